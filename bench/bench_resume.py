"""Cost of a fully cached `run --resume`: start-up and time per stage decision.

Builds a corpus of DOCS documents x PARAS paragraphs in a temp dir, runs it once cold,
then times (median of REPEAT) a fully cached `--resume` of a one-document pipeline (the
start-up cost) and of the whole corpus, by cpu (user + sys of the child: the steadier
figure on a shared machine) and by wall. Per-decision cost = (big - tiny) / decisions.
The floor, measured in the same run: reading and hashing every checkpoint file in Python.
Children run with bytecode caching on (an installed package's normal state), whatever
PYTHONDONTWRITEBYTECODE says here.

    python bench/bench_resume.py [--docs 100] [--paras 100] [--repeat 5]

Targets: start-up <= 0.4 s, <= 0.1 ms per decision, <= 3x the floor by cpu. Peers
(Snakemake, Hamilton) are not measured by this script, so it prints no figure for them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runjournal.adapters.packed_store import segment_records

SCRIPT = Path(sys.executable).parent / "runjournal"
PIPELINE = """name = "{name}"
inputs = ["{glob}"]
[chunking]
max_chars = 100
[[steps]]
id = "terms"
module = "builtin.terms"
"""
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "journal",
    "checkpoint",
    "lane",
    "chunk",
    "stage",
]


def make_corpus(root: Path, docs: int, paras: int) -> None:
    rng = random.Random(7)
    (root / "docs").mkdir()
    for d in range(docs):
        text = "\n\n".join(
            " ".join(rng.choice(WORDS) for _ in range(12)) + "." for _ in range(paras)
        )
        (root / "docs" / f"d{d:04}.md").write_text(text + "\n")
    (root / "big.toml").write_text(PIPELINE.format(name="big", glob="docs/*.md"))
    (root / "tiny.toml").write_text(PIPELINE.format(name="tiny", glob="docs/d0000.md"))


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_argv(root: Path, pipeline: str, *extra: str) -> list[str]:
    """The console script running `pipeline` with its roots under `root`, `--json`."""
    roots = ["--output-root", str(root / "out"), "--cache-root", str(root / "cache")]
    return [str(SCRIPT), "run", str(root / pipeline), *roots, "--json", *extra]


def run(root: Path, pipeline: str, *extra: str) -> tuple[float, float, dict]:
    """(cpu s, wall s, the run's --json document)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        run_argv(root, pipeline, *extra),
        capture_output=True,
        text=True,
        check=True,
        env=ENV,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, json.loads(proc.stdout)


def new_files(root: Path) -> tuple[int, int, int, list[str]]:
    """(files, bytes, output files) a no-op resume creates under the output and cache roots:
    regular files with an inode that was not there before (the journal's own aside)."""

    def inodes() -> dict[int, tuple[int, str]]:
        found = {}
        for top in (root / "out", root / "cache"):
            for path in top.rglob("*"):
                info = path.lstat()
                if path.is_file() and not path.name.startswith("journal.sqlite3"):
                    found[info.st_ino] = (info.st_size, path.name)
        return found

    before = inodes()
    _, _, doc = run(root, "big.toml", "--resume")
    created = [entry for ino, entry in inodes().items() if ino not in before]
    names = sorted(name for _, name in created)
    return len(created), sum(size for size, _ in created), len(doc["outputs"]), names


def floor(root: Path) -> tuple[float, float]:
    """(cpu s, wall s) of reading and hashing every checkpoint, in this process: each
    segment of the packed store read once, each checkpoint record's bytes hashed
    (docs/internals.md "Packed store"), plus any checkpoint file of the old layout."""
    segments = list((root / "cache" / "pack" / "segments").glob("*.seg"))
    paths = list((root / "cache" / "workspaces").rglob("*.ckpt"))
    cpu, start = time.process_time(), time.perf_counter()
    for segment in segments:
        for name, data in segment_records(segment.read_bytes()):
            if name.endswith(".ckpt"):
                hashlib.sha256(data).digest()
    for path in paths:
        hashlib.sha256(path.read_bytes()).digest()
    return time.process_time() - cpu, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--paras", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_corpus(root, args.docs, args.paras)
        run(root, "tiny.toml")
        cold_cpu, cold, _ = run(root, "big.toml")
        tinies = [run(root, "tiny.toml", "--resume") for _ in range(args.repeat)]
        results = [run(root, "big.toml", "--resume") for _ in range(args.repeat)]
        doc = results[-1][2]
        decisions = sum(doc["decisions"].values())
        assert set(doc["decisions"]) == {"reused"}, doc["decisions"]
        floors = [floor(root) for _ in range(args.repeat)]
        files, size, outputs, names = new_files(root)
        print(
            f"corpus: {args.docs} docs x {args.paras} paragraphs, {decisions} decisions; "
            f"medians of {args.repeat}; load {os.getloadavg()[0]:.1f}"
        )
        print(f"cold run:                 cpu {cold_cpu:.2f} s   wall {cold:.2f} s")
        for i, what in ((0, "cpu "), (1, "wall")):
            tiny = statistics.median(t[i] for t in tinies)
            big = statistics.median(r[i] for r in results)
            floor_ms = statistics.median(f[i] for f in floors) / decisions * 1000
            per_decision_ms = (big - tiny) / decisions * 1000
            print(
                f"{what} start-up (tiny resume) {tiny:.3f} s   full resume {big:.3f} s   "
                f"per decision {per_decision_ms:.4f} ms (target <= 0.1 ms)   "
                f"floor {floor_ms:.4f} ms   ratio to floor {per_decision_ms / floor_ms:.1f}x"
                + ("   target <= 3x" if i == 0 else "")
            )
        shown = ", ".join(names) if files <= 4 else f"{names[0]}, ..."
        print(
            f"a no-op resume creates {files} new files ({size:,} bytes: {shown}) "
            f"under the output and cache roots, for {outputs} outputs"
        )
        print("peers: skipped (Snakemake and Hamilton are not measured by this script)")


if __name__ == "__main__":
    main()
