"""Fully cached re-runs per item: runjournal's `--resume` against Snakemake and Hamilton.

Each tool gets a workflow of N items and one of 1 item, built once, then re-run fully
cached REPEAT times as a child process (medians of cpu = user + sys, and wall). Per item
is (big - tiny) / (N - 1), so start-up cancels out. The items:

- runjournal: `builtin.terms` over DOCS documents (one paragraph, so one chunk each):
  a fully cached `run --resume`, every stage decision reused;
- Snakemake: one rule instance per item (`in/{i}.txt` -> `out/{i}.txt`), all outputs up
  to date; `snakemake -n` (the dry run that decides nothing needs to run);
- Hamilton: N nodes over one input, `Builder().with_cache()`; the second and later runs
  read every node from the cache.

The peers come from the `bench` extra (`pip install -e '.[bench]'`); a missing one is
skipped with a message. Target (issue 15): runjournal >= 10x better per item.

    python bench/bench_peers.py [--items 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

TARGET = 10.0
PIPELINE = """name = "peers"
inputs = ["docs/*.md"]
[[steps]]
id = "terms"
module = "builtin.terms"
"""
SNAKEFILE = """N = {n}
rule all:
    input: expand("out/{i}.txt", i=range(N))
rule item:
    input: "in/{i}.txt"
    output: "out/{i}.txt"
    shell: "cp {input} {output}"
"""
HAMILTON = """import sys
from hamilton import driver
import nodes
dr = driver.Builder().with_modules(nodes).with_cache(path=sys.argv[1]).build()
dr.execute([f"item_{i}" for i in range(int(sys.argv[2]))], inputs={"source": "journal"})
"""


def measure(argv: list[str], cwd: Path, repeat: int) -> tuple[float, float]:
    """Median (cpu s, wall s) of a child process; it must succeed."""
    cpus, walls = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            sys.exit(f"bench_peers: {' '.join(argv[:3])} failed: {proc.stderr.strip()[-300:]}")
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(cpus), statistics.median(walls)


def runjournal(root: Path, n: int) -> list[str]:
    (root / "docs").mkdir(parents=True)
    for i in range(n):
        (root / "docs" / f"d{i:05}.md").write_text(f"Item {i}: the journal records a lane.\n")
    (root / "pipeline.toml").write_text(PIPELINE)
    script = Path(sys.executable).parent / "runjournal"
    argv = [str(script), "run", "pipeline.toml", "--output-root", "out", "--cache-root", "cache"]
    subprocess.run([*argv, "-q"], cwd=root, check=True, capture_output=True)
    return [*argv, "--resume", "-q"]


def snakemake(root: Path, n: int) -> list[str]:
    (root / "in").mkdir(parents=True)
    (root / "out").mkdir()
    for i in range(n):
        (root / "in" / f"{i}.txt").write_text(f"item {i}\n")
    later = time.time() + 5
    for i in range(n):  # built: every output newer than its input
        out = root / "out" / f"{i}.txt"
        out.write_text(f"item {i}\n")
        os.utime(out, (later, later))
    (root / "Snakefile").write_text(SNAKEFILE.replace("{n}", str(n), 1))
    exe = shutil.which("snakemake", path=os.path.dirname(sys.executable))
    argv = [str(exe), "-n", "-c1", "--rerun-triggers", "mtime"]
    check = subprocess.run(argv, cwd=root, capture_output=True, text=True)
    if check.returncode != 0 or "Nothing to be done" not in check.stdout + check.stderr:
        sys.exit(f"bench_peers: the snakemake workflow is not up to date: {check.stdout[-300:]}")
    return argv


def hamilton(root: Path, n: int) -> list[str]:
    root.mkdir(parents=True)
    nodes = "\n".join(
        f"def item_{i}(source: str) -> str:\n    return source + '{i}'\n" for i in range(n)
    )
    (root / "nodes.py").write_text(nodes)
    (root / "run.py").write_text(HAMILTON)
    argv = [sys.executable, "run.py", str(root / "cache"), str(n)]
    subprocess.run(argv, cwd=root, check=True, capture_output=True)  # fills the cache
    return argv


def per_item(
    name: str, build: Callable[[Path, int], list[str]], base: Path, n: int, repeat: int
) -> tuple[float, float]:
    """(cpu ms, wall ms) per item of a fully cached re-run, start-up cancelled."""
    tiny_argv, big_argv = build(base / name / "tiny", 1), build(base / name / "big", n)
    tiny = measure(tiny_argv, base / name / "tiny", repeat)
    big = measure(big_argv, base / name / "big", repeat)
    cpu, wall = ((b - t) / (n - 1) * 1000 for b, t in zip(big, tiny, strict=True))
    print(
        f"{name:11} 1 item cpu {tiny[0]:6.2f} s wall {tiny[1]:6.2f} s; {n} items cpu "
        f"{big[0]:6.2f} s wall {big[1]:6.2f} s; per item cpu {cpu:7.3f} ms wall {wall:7.3f} ms"
    )
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"fully cached re-run of {args.items} items vs 1 item; medians of {args.repeat}")
    with tempfile.TemporaryDirectory(prefix="rj-bench-peers-") as tmp:
        base = Path(tmp)
        ours = per_item("runjournal", runjournal, base, args.items, args.repeat)
        peers = [
            ("snakemake", snakemake, "snakemake"),
            ("hamilton", hamilton, "hamilton"),
        ]
        for name, build, module in peers:
            if importlib.util.find_spec(module) is None:
                print(f"{name:11} skipped: not installed (pip install -e '.[bench]')")
                continue
            cpu, wall = per_item(name, build, base, args.items, args.repeat)
            ratio = cpu / ours[0] if ours[0] > 0 else float("inf")
            verdict = "meets" if ratio >= TARGET else "misses"
            print(
                f"{'':11} runjournal is {ratio:6.1f}x better per item by cpu "
                f"({wall / ours[1] if ours[1] > 0 else float('inf'):.1f}x by wall); "
                f"target >= {TARGET:g}x: {verdict}"
            )


if __name__ == "__main__":
    main()
