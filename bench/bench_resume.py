"""Cost of a fully cached `run --resume`: start-up and time per stage decision.

Builds a corpus of DOCS documents x PARAS paragraphs in a temp dir, runs it once cold,
then times (median of REPEAT) a fully cached `--resume` of a one-document pipeline (the
start-up cost) and of the whole corpus. Per-decision cost = (big - tiny) / decisions.
The floor, measured in the same run: reading and hashing every checkpoint file in Python.

    python bench/bench_resume.py [--docs 100] [--paras 100] [--repeat 3]

Targets: start-up <= 0.4 s, <= 0.1 ms per decision. Peers (Snakemake, Hamilton) are not
measured by this script, so it prints no figure for them (issue 15 adds a measured peer run).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def run(root: Path, pipeline: str, *extra: str) -> tuple[float, dict]:
    start = time.perf_counter()
    proc = subprocess.run(
        [
            str(SCRIPT),
            "run",
            str(root / pipeline),
            "--output-root",
            str(root / "out"),
            "--cache-root",
            str(root / "cache"),
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - start, json.loads(proc.stdout)


def floor(root: Path) -> float:
    start = time.perf_counter()
    for path in (root / "cache" / "workspaces").rglob("*.ckpt"):
        hashlib.sha256(path.read_bytes()).digest()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--paras", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_corpus(root, args.docs, args.paras)
        run(root, "tiny.toml")
        cold, _ = run(root, "big.toml")
        tiny = statistics.median(run(root, "tiny.toml", "--resume")[0] for _ in range(args.repeat))
        results = [run(root, "big.toml", "--resume") for _ in range(args.repeat)]
        big = statistics.median(t for t, _ in results)
        doc = results[-1][1]
        decisions = sum(doc["decisions"].values())
        assert set(doc["decisions"]) == {"reused"}, doc["decisions"]
        floor_s = statistics.median(floor(root) for _ in range(args.repeat))
        per_decision_ms = (big - tiny) / decisions * 1000
        floor_ms = floor_s / decisions * 1000
        print(f"corpus: {args.docs} docs x {args.paras} paragraphs, {decisions} decisions")
        print(f"cold run:                 {cold:.2f} s")
        print(f"start-up (tiny resume):   {tiny:.3f} s   target <= 0.4 s   ratio {tiny / 0.4:.2f}")
        print(f"full resume:              {big:.3f} s")
        print(
            f"per decision:             {per_decision_ms:.4f} ms   target <= 0.1 ms   "
            f"ratio {per_decision_ms / 0.1:.2f}"
        )
        print(
            f"floor (read+hash ckpt):   {floor_ms:.4f} ms/decision   "
            f"ratio to floor {per_decision_ms / floor_ms:.1f}x"
        )
        print("peers: skipped (Snakemake and Hamilton are not measured by this script)")


if __name__ == "__main__":
    main()
