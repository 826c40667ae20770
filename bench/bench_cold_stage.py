"""Engine overhead per stage of a cold run, beyond the module's own time.

Builds DOCS documents x PARAS paragraphs (builtin.terms, small chunks, so most stages are
extracts) and times, as child processes, a cold run of the whole corpus and of a
one-document pipeline (start-up and fixed costs), with checkpoints and with
`--no-checkpoints`, each from fresh roots. The module's own time is measured in this
process in the same run: builtin.terms' extract, merge and normalize called directly on
the same chunks. Engine overhead per stage =
((big - tiny) - (module big - module tiny)) / (stages big - stages tiny), by cpu (user +
sys of the child, the steadier figure on a shared machine) and by wall; medians of REPEAT.

    python bench/bench_cold_stage.py [--docs 40] [--paras 40] [--repeat 5]

Target (issue 15): <= 1.5 ms per stage with checkpoints on.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runjournal.adapters.module_loader import load_module
from runjournal.domain.chunking import ChunkingSettings, plan_chunks
from runjournal.domain.identity import sha256_hex
from runjournal.domain.modules import Chunk, StageContext

SCRIPT = Path(sys.executable).parent / "runjournal"
MAX_CHARS = 100
PIPELINE = """name = "{name}"
inputs = ["{glob}"]
[chunking]
max_chars = {max_chars}
[[steps]]
id = "terms"
module = "builtin.terms"
"""
WORDS = ["alpha", "beta", "gamma", "delta", "journal", "checkpoint", "lane", "chunk", "stage"]


def make_corpus(root: Path, docs: int, paras: int) -> list[Path]:
    rng = random.Random(7)
    (root / "docs").mkdir()
    paths = []
    for d in range(docs):
        text = "\n\n".join(
            " ".join(rng.choice(WORDS) for _ in range(12)) + "." for _ in range(paras)
        )
        path = root / "docs" / f"d{d:04}.md"
        path.write_text(text + "\n")
        paths.append(path)
    for name, glob in (("big", "docs/*.md"), ("tiny", "docs/d0000.md")):
        (root / f"{name}.toml").write_text(
            PIPELINE.format(name=name, glob=glob, max_chars=MAX_CHARS)
        )
    return paths


def child_run(root: Path, pipeline: str, *extra: str) -> tuple[float, float, int]:
    """(cpu s, wall s, stages) of one cold run from fresh roots."""
    for d in ("out", "cache"):
        shutil.rmtree(root / d, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
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
            "-q",
            *extra,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    doc = json.loads(proc.stdout)
    return cpu, wall, sum(doc["decisions"].values())


def module_time(paths: list[Path], pipeline_dir: Path) -> tuple[float, float]:
    """(cpu s, wall s) of builtin.terms' own stages over `paths`, called directly."""
    module = load_module("builtin.terms", pipeline_dir=str(pipeline_dir))
    settings = ChunkingSettings(max_chars=MAX_CHARS)
    lanes = []
    for path in paths:
        data = path.read_bytes()
        lane = f"docs/{path.name}"
        chunks = [
            Chunk(
                id=sha256_hex(data[s.start : s.end] + lane.encode()),
                source=lane,
                start=s.start,
                end=s.end,
                text=data[s.start : s.end].decode(),
                sha256=sha256_hex(data[s.start : s.end]),
            )
            for s in plan_chunks(data, settings)
        ]
        lanes.append((StageContext(step="terms", lane=lane), chunks))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for ctx, chunks in lanes:
        parts = [module.extract(chunk, ctx) for chunk in chunks]
        module.normalize(module.merge(parts, ctx), ctx)
    return time.process_time() - cpu0, time.perf_counter() - wall0


def median_pair(samples: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=40)
    parser.add_argument("--paras", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        paths = make_corpus(root, args.docs, args.paras)
        module_big = median_pair([module_time(paths, root) for _ in range(args.repeat)])
        module_tiny = median_pair([module_time(paths[:1], root) for _ in range(args.repeat)])
        rows = {}
        for label, extra in (("checkpoints on", ()), ("--no-checkpoints", ("--no-checkpoints",))):
            big, tiny = [], []
            stages = (0, 0)
            for _ in range(args.repeat):
                cpu, wall, n_big = child_run(root, "big.toml", *extra)
                big.append((cpu, wall))
                cpu, wall, n_tiny = child_run(root, "tiny.toml", *extra)
                tiny.append((cpu, wall))
                stages = (n_big, n_tiny)
            rows[label] = (median_pair(big), median_pair(tiny), stages)
        _, _, (n_big, n_tiny) = rows["checkpoints on"]
        print(
            f"corpus: {args.docs} docs x {args.paras} paragraphs, {n_big} stages "
            f"({n_tiny} in the one-document run); medians of {args.repeat}; "
            f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}"
        )
        mod = [(module_big[i] - module_tiny[i]) / (n_big - n_tiny) * 1000 for i in (0, 1)]
        print(f"module's own time (in process)   cpu {mod[0]:6.3f} ms/stage  wall {mod[1]:6.3f}")
        for label, ((bc, bw), (tc, tw), _) in rows.items():
            cpu = ((bc - tc) / (n_big - n_tiny)) * 1000 - mod[0]
            wall = ((bw - tw) / (n_big - n_tiny)) * 1000 - mod[1]
            print(
                f"engine overhead, {label:<17} cpu {cpu:6.3f} ms/stage  wall {wall:6.3f}"
                f"   target <= 1.5 ms   cold run cpu {bc:.2f} s wall {bw:.2f} s"
            )


if __name__ == "__main__":
    main()
