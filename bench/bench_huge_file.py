"""One huge document: how long until it is chunked and its first stage checkpointed, and
what the whole run costs per MB as the file grows (issue 29: a 25.6 MB file finished no
stage in 120 s, 2.5 MB took 37 s and 5 MB 84 s, super-linear).

Each size is one synthetic Markdown file (the paragraphs of bench_million.py, a fixed
seed) under a one-step pipeline (`builtin.terms`, paragraphs of at most 1,200 chars).
For each run, from outside the process: the wall from spawn until the chunk plan is in
the cache's packed index (`chunked`), until the first checkpoint is (`first stage`), and
until the process ends, with its cpu (user + system, `wait4`) and peak RSS. A thread
polls the index every 20 ms, so `chunked` and `first stage` are late by up to that.

    python bench/bench_huge_file.py [--mb 2.5 --mb 25] [--repeat 3]

Target (issue 29): a 25 MB single file chunked in under 5 s, cost linear in its size.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_concurrency import ENV, SCRIPT
from bench_million import paragraph

PIPELINE = """name = "huge"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 1200
[[steps]]
id = "terms"
module = "builtin.terms"
"""


def make_file(root: Path, mb: float) -> int:
    """docs/huge.md of about `mb` MB; returns its bytes."""
    rng = random.Random(29)
    (root / "docs").mkdir(parents=True)
    parts, size, n = ["# A huge document\n"], 0, 0
    while size < mb * 1e6:
        if n % 40 == 0:
            parts.append(f"## Section {n // 40}\n")
        text = paragraph(rng) + "\n"
        parts.append(text)
        size += len(text) + 1
        n += 1
    data = "\n".join(parts).encode()
    (root / "docs" / "huge.md").write_bytes(data)
    (root / "pipeline.toml").write_text(PIPELINE)
    return len(data)


# names are BLOBs since index schema 2 (docs/internals.md "Packed store"), which LIKE
# does not match
_CHUNKPLANS = "instr(dirs.name, CAST('chunkplans' AS BLOB)) = 1"
_CHECKPOINT = "substr(entries.leaf, -5) = CAST('.ckpt' AS BLOB)"


def _entries(index: Path, where: str) -> bool:
    """Whether the packed index names an entry matching `where` (never blocks a writer)."""
    try:
        with sqlite3.connect(f"file:{index}?mode=ro", uri=True, timeout=0.1) as conn:
            query = f"SELECT 1 FROM entries JOIN dirs ON dirs.id = entries.dir WHERE {where}"
            return conn.execute(query + " LIMIT 1").fetchone() is not None
    except sqlite3.Error:
        return False


def one_run(root: Path) -> dict[str, float]:
    """Spawn `run` on a fresh cache; the moments seen from outside, cpu and peak RSS."""
    cache = root / f"cache-{time.monotonic_ns()}"
    index = cache / "pack" / "index.sqlite"
    seen: dict[str, float] = {}
    stop = threading.Event()
    start = time.perf_counter()
    argv = [str(SCRIPT), "run", str(root / "pipeline.toml"), "--output-root", str(root / "out")]
    proc = subprocess.Popen(
        [*argv, "--cache-root", str(cache), "--no-progress", "-q"],
        cwd=root,
        env=ENV,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    def poll() -> None:
        while not stop.is_set() and len(seen) < 2:
            if "chunked" not in seen and _entries(index, _CHUNKPLANS):
                seen["chunked"] = time.perf_counter() - start
            if "first" not in seen and _entries(index, _CHECKPOINT):
                seen["first"] = time.perf_counter() - start
            stop.wait(0.02)

    poller = threading.Thread(target=poll)
    poller.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    stop.set()
    poller.join()
    err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"run failed: {err[-500:]}")
    return {
        "chunked": seen.get("chunked", float("nan")),
        "first": seen.get("first", float("nan")),
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss": usage.ru_maxrss * 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, action="append")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = args.mb or [2.5, 25.0]
    load = os.getloadavg()[0]
    rows = []
    for mb in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            size = make_file(root, mb)
            runs = [one_run(root) for _ in range(args.repeat)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "rss"}
        rows.append((size, med, max(r["rss"] for r in runs)))
    print(
        f"one document per run, pipeline builtin.terms (paragraphs <= 1,200 chars); medians of "
        f"{args.repeat}; load {load:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    for size, med, rss in rows:
        print(
            f"{size / 1e6:6.1f} MB  chunked {med['chunked']:6.2f} s  first stage "
            f"{med['first']:6.2f} s  run wall {med['wall']:7.2f} s  cpu {med['cpu']:7.2f} s  "
            f"cpu per MB {med['cpu'] / (size / 1e6):5.2f} s  peak RSS {rss / 2**20:5.0f} MiB"
        )
    (small, small_med, _), (large, large_med, _) = rows[0], rows[-1]
    if large > small:
        ratio = (large_med["cpu"] / large) / (small_med["cpu"] / small)
        print(
            f"cpu per byte, {large / 1e6:.1f} MB against {small / 1e6:.1f} MB: {ratio:.2f}x "
            f"(1.00 = linear); chunked within 5 s at {large / 1e6:.1f} MB: "
            f"{'yes' if large_med['chunked'] < 5 else 'no'}"
        )


if __name__ == "__main__":
    sys.exit(main())
