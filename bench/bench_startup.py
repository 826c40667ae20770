"""Start-up cost of the `runjournal` console script against `python -c pass`, same run.

Runs each command REPEAT times as a child process (after one unmeasured run, so the
bytecode caches exist) and takes the median of its cpu time (user + sys of the child,
from `resource.getrusage`) and of its wall time. The floor is the interpreter itself
(`python -c pass`); `python -c "import click"` shows what the command-line library alone
costs, since every command needs it, and the libraries' line what any command that opens
a journal must import (eventsourcing's application, msgspec, click, zstandard, sqlite3).
Children run with bytecode caching on (an installed package's normal state), whatever
PYTHONDONTWRITEBYTECODE says in the calling shell.

    python bench/bench_startup.py [--repeat 9]

Targets (issue 15): `runjournal --version` <= 3x `python -c pass` by cpu; a fully cached
`run --resume` of a one-document pipeline (built in a temp dir, run cold once) <= 5x.
The last line is the same resume of a one-document `llm.json` step (its one call answered
by the loopback fake server in the cold run): what an LLM step adds to a no-op resume
(issue 29: the `openai` client is imported only when a stage executes).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ONE_DOC = """name = \"one\"
inputs = [\"doc.md\"]
[[steps]]
id = \"terms\"
module = \"builtin.terms\"
"""


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ONE_LLM = """name = "one-llm"
inputs = ["doc.md"]
[[steps]]
id = "ask"
module = "llm.json"
params = { prompt = "Terms in: {text}", temperature = 0, seed = 7, max_tokens = 20 }
"""
LIBRARIES = "import eventsourcing.application, msgspec, click, zstandard, sqlite3"


def measure(argv: list[str], repeat: int) -> tuple[float, float]:
    """Median (cpu seconds, wall seconds) of running argv `repeat` times, after one
    unmeasured run that writes the bytecode caches."""
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": ENV}
    subprocess.run(argv, check=True, **quiet)
    cpus, walls = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, check=True, **quiet)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return statistics.median(cpus), statistics.median(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    script = shutil.which("runjournal", path=os.path.dirname(sys.executable)) or shutil.which(
        "runjournal"
    )
    if script is None:
        sys.exit("bench_startup: the runjournal console script is not installed")
    with tempfile.TemporaryDirectory(prefix="rj-bench-startup-") as tmp:
        root = Path(tmp)
        (root / "doc.md").write_text("One paragraph about the journal and its lanes.\n")
        (root / "one.toml").write_text(ONE_DOC)
        where = ["--output-root", str(root / "out"), "--cache-root", str(root / "cache")]
        resume = [script, "run", str(root / "one.toml"), *where, "-q"]
        subprocess.run(resume, capture_output=True, check=True, env=ENV)  # the cold run
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_concurrency import KEY_VAR, PROFILE, start_fake

        (root / "one-llm.toml").write_text(ONE_LLM)
        server, url = start_fake(0.0)
        try:
            (root / "profiles.toml").write_text(
                PROFILE.replace("{retries}", "0").replace("{url}", url)
            )
            llm = [script, "run", str(root / "one-llm.toml"), *where, "-q", "--profile", "fake"]
            llm += ["--profiles-file", str(root / "profiles.toml")]
            env = dict(ENV, **{KEY_VAR: "bench-key"})
            subprocess.run(llm, capture_output=True, check=True, env=env)
        finally:
            server.terminate()
            server.wait(timeout=10)
        floor_cpu, floor_wall = measure([sys.executable, "-c", "pass"], args.repeat)
        rows = [
            ("python -c 'import click'", [sys.executable, "-c", "import click"], ""),
            ("libraries of a journal command", [sys.executable, "-c", LIBRARIES], ""),
            ("runjournal --version", [script, "--version"], "3x"),
            ("runjournal --help", [script, "--help"], ""),
            ("runjournal reasons", [script, "reasons"], ""),
            ("run --resume (one document)", [*resume, "--resume"], "5x"),
            ("  the same, an llm.json step", [*llm, "--resume"], ""),
        ]
        ENV[KEY_VAR] = "bench-key"  # the llm.json resume's profile names it (no call is made)
        measured = [(label, measure(argv, args.repeat), target) for label, argv, target in rows]
        print(
            f"median of {args.repeat} runs; cpu = user+sys of the child; "
            f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f} at the end"
        )
        print(
            f"{'python -c pass':31} cpu {floor_cpu * 1000:7.1f} ms  "
            f"wall {floor_wall * 1000:7.1f} ms"
        )
        for label, (cpu, wall), target in measured:
            ratio = cpu / floor_cpu if floor_cpu else float("inf")
            verdict = ""
            if target:
                met = "meets" if ratio <= float(target[:-1]) else "misses"
                verdict = f"   target <= {target}: {met}"
            print(
                f"{label:31} cpu {cpu * 1000:7.1f} ms  wall {wall * 1000:7.1f} ms  "
                f"cpu ratio {ratio:5.1f}x{verdict}"
            )


if __name__ == "__main__":
    main()
