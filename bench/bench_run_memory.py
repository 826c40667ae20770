"""Peak memory of `run` (cold and fully cached `--resume`) on a 60k-decision corpus.

Builds the corpus of bench_resume.py (DOCS documents x PARAS paragraphs of about 100
characters, `builtin.terms` in chunks of at most 100 characters) in a temp dir and, REPEAT
times from fresh output and cache roots, runs it cold and then resumes it, each through
the console script as a child process; reports the medians of the child's peak resident
set (`ru_maxrss` from `os.wait4`, that child alone), cpu (user + sys) and wall. The same
for a corpus of SMALL documents, measured in the same run, shows what grows with the run;
the floor is `runs list` on the large run's journal (the interpreter, the command line
and an opened journal). `gc --cache --dry-run` on the large roots (a cold run and its
resume in the journal, every checkpoint referenced) reads what the runs reference.

    python bench/bench_run_memory.py [--docs 180] [--paras 330] [--small 10] [--repeat 3]

Target (issue 15): peak RSS <= 120 MB for every command on a 60k-decision run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_resume import ENV, SCRIPT, make_corpus, run_argv  # the same corpus

TARGET_MB = 120.0


def measure(argv: list[str]) -> tuple[float, float, float, str]:
    """(cpu s, wall s, peak RSS MB, stdout) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"bench_run_memory: {' '.join(argv[1:3])} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024, out


def run(root: Path, pipeline: str, *extra: str) -> tuple[float, float, float, dict]:
    cpu, wall, rss, out = measure(run_argv(root, pipeline, "-q", *extra))
    return cpu, wall, rss, json.loads(out)


def fresh(root: Path) -> None:
    for name in ("out", "cache"):
        shutil.rmtree(root / name, ignore_errors=True)


def cycle(root: Path, pipeline: str) -> tuple[tuple, tuple, int]:
    """One cold run and one resume from fresh roots: their (cpu, wall, rss), decisions."""
    fresh(root)
    cold = run(root, pipeline)
    resume = run(root, pipeline, "--resume")
    assert set(resume[3]["decisions"]) == {"reused"}, resume[3]["decisions"]
    return cold[:3], resume[:3], sum(resume[3]["decisions"].values())


def line(label: str, samples: list[tuple], decisions: int) -> str:
    cpu, wall, rss = (statistics.median(s[i] for s in samples) for i in range(3))
    verdict = "meets" if rss <= TARGET_MB else "misses"
    return (
        f"{label:<28} {decisions:>6} decisions  cpu {cpu:6.2f} s  wall {wall:6.2f} s  "
        f"peak RSS {rss:6.1f} MB  target <= {TARGET_MB:.0f} MB: {verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=180)
    parser.add_argument("--paras", type=int, default=330)
    parser.add_argument("--small", type=int, default=10, help="documents of the small corpus")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rj-bench-memory-") as tmp:
        large, little = Path(tmp) / "large", Path(tmp) / "small"
        large.mkdir(), little.mkdir()
        make_corpus(large, args.docs, args.paras)
        make_corpus(little, args.small, args.paras)
        small = [cycle(little, "big.toml") for _ in range(args.repeat)]
        big = [cycle(large, "big.toml") for _ in range(args.repeat)]
        floor = [
            measure([str(SCRIPT), "runs", "list", "--output-root", str(large / "out")])[:3]
            for _ in range(args.repeat)
        ]
        roots = ["--output-root", str(large / "out"), "--cache-root", str(large / "cache")]
        gc = [
            measure([str(SCRIPT), "gc", *roots, "--cache", "--dry-run"])[:3]
            for _ in range(args.repeat)
        ]
        print(
            f"corpus: {args.docs} docs x {args.paras} paragraphs (small: {args.small} docs); "
            f"medians of {args.repeat}; {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}"
        )
        print(line("cold run (small)", [c for c, _, _ in small], small[0][2]))
        print(line("resume (small)", [r for _, r, _ in small], small[0][2]))
        print(line("cold run", [c for c, _, _ in big], big[0][2]))
        print(line("run --resume", [r for _, r, _ in big], big[0][2]))
        print(line("gc --cache --dry-run", gc, big[0][2]))
        rss = statistics.median(f[2] for f in floor)
        print(f"{'floor: runs list':<28} {'':>6}            peak RSS {rss:6.1f} MB")


if __name__ == "__main__":
    main()
