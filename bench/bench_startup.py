"""Start-up cost of the `runjournal` console script against `python -c pass`, same run.

Runs each command REPEAT times as a child process and takes the median of its cpu time
(user + sys of the child, from `resource.getrusage`) and of its wall time. The floor is
the interpreter itself (`python -c pass`), and `python -c "import click"` shows what the
command-line library alone costs, since every command needs it.

    python bench/bench_startup.py [--repeat 9]

Target (issue 15): `runjournal --version` <= 3x `python -c pass` by cpu.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time


def measure(argv: list[str], repeat: int) -> tuple[float, float]:
    """Median (cpu seconds, wall seconds) of running argv `repeat` times."""
    cpus, walls = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
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
    floor_cpu, floor_wall = measure([sys.executable, "-c", "pass"], args.repeat)
    rows = [
        ("python -c 'import click'", [sys.executable, "-c", "import click"]),
        ("runjournal --version", [script, "--version"]),
        ("runjournal --help", [script, "--help"]),
        ("runjournal reasons", [script, "reasons"]),
    ]
    print(f"median of {args.repeat} runs; cpu = user+sys of the child")
    print(f"{'python -c pass':28} cpu {floor_cpu * 1000:7.1f} ms  wall {floor_wall * 1000:7.1f} ms")
    for label, argv in rows:
        cpu, wall = measure(argv, args.repeat)
        ratio = cpu / floor_cpu if floor_cpu else float("inf")
        target = "   target <= 3x" if label == "runjournal --version" else ""
        print(
            f"{label:28} cpu {cpu * 1000:7.1f} ms  wall {wall * 1000:7.1f} ms  "
            f"cpu ratio {ratio:5.1f}x{target}"
        )


if __name__ == "__main__":
    main()
