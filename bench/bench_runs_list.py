"""`runs list` on a small and a large journal: does its cost grow with the size of the runs?

Writes two temp SQLite journals of synthetic runs (built as the runner records them,
tests/support/synthetic.py): a small one (one run, 2 lanes x 2 chunks) and a large one
(one run of --lanes x --chunks, then one small run), and a copy of the large one without
the runs index table (what every `runs list` read before the table: the peer). Each
`runs list` runs through the console script REPEAT times; medians of the child's cpu
(user + sys), wall time and peak RSS (`ru_maxrss` from `os.wait4`), and the ratios of the
large journal against the small one and of the peer against the large one, all measured
in this run (docs/performance.md "`runs list` on a large journal"). The same
three `list_runs` calls in this process (a fresh read-only store each, median of REPEAT)
show the catch-up alone, without the console script's start-up.

    python bench/bench_runs_list.py [--lanes 60] [--chunks 300] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runjournal.adapters.export import IMPORT_BATCH
from runjournal.adapters.journal import open_journal

# The synthetic-run builder is the tests' shared helper (tests/support/synthetic.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import synthetic as syn


def console() -> list[str]:
    script = Path(sys.executable).parent / "runjournal"
    return [str(script)] if script.exists() else [sys.executable, "-m", "runjournal.cli.main"]


def child(argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(cpu s, wall s, peak RSS MB) of one child process; it must exit 0."""
    start = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen(argv, stdout=devnull, stderr=subprocess.PIPE, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench_runs_list: {' '.join(argv[1:3])} failed: {err.strip()}")
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024


def medians(repeat: int, argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    runs = [child(argv, env) for _ in range(repeat)]
    return tuple(statistics.median(r[i] for r in runs) for i in range(3))  # type: ignore[return-value]


def write(url: str, runs: list[syn.SyntheticRun]) -> int:
    with open_journal(url) as store:
        for run in runs:
            for i in range(0, len(run.events), IMPORT_BATCH):
                store.append_events(run.run_id, run.events[i : i + IMPORT_BATCH])
    return sum(len(r.events) for r in runs)


def in_process(url: str) -> float:
    """Wall time of `list_runs` on a freshly opened read-only store (no start-up, no open)."""
    store = open_journal(url, read_only=True)
    try:
        start = time.perf_counter()
        store.list_runs()
        return time.perf_counter() - start
    finally:
        store.close()


def build(tmp: Path, lanes: int, chunks: int) -> None:
    """Write the small and the large journal and the peer (the large one without the
    runs index table, as journals were before it) into `tmp`."""
    base = time.time_ns() // 1000
    small_url, large_url = str(tmp / "small.sqlite3"), str(tmp / "large.sqlite3")
    small = write(small_url, [syn.synthetic_run(syn.run_id_for(base), lanes=2, chunks=2)])
    large = syn.synthetic_run(syn.run_id_for(base + 1), lanes=lanes, chunks=chunks)
    last = syn.synthetic_run(syn.run_id_for(base + 2), lanes=2, chunks=2)
    events = write(large_url, [large, last])
    peer_url = str(tmp / "peer.sqlite3")
    shutil.copyfile(large_url, peer_url)
    with sqlite3.connect(peer_url) as db:
        db.execute("DROP TABLE runjournal_runs_index")
        db.execute("DROP TABLE runjournal_runs_index_position")
    (tmp / "events.txt").write_text(f"{small} {events}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=60)
    parser.add_argument("--chunks", type=int, default=300, help="extract chunks per lane")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--build", help=argparse.SUPPRESS)  # the writing child process
    args = parser.parse_args()

    if args.build:
        build(Path(args.build), args.lanes, args.chunks)
        return
    tmp = Path(tempfile.mkdtemp(prefix="rj-bench-runs-list-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNJOURNAL_")}
    try:
        size = ["--lanes", str(args.lanes), "--chunks", str(args.chunks)]
        # The journals are written by another process: a child's ru_maxrss counts the
        # memory of the process it was forked from, so this one must stay small.
        subprocess.run(
            [sys.executable, __file__, "--build", str(tmp), *size],
            check=True,
        )
        counts = (tmp / "events.txt").read_text().split()
        small_events, large_events = int(counts[0]), int(counts[1])
        small_url, large_url = str(tmp / "small.sqlite3"), str(tmp / "large.sqlite3")
        peer_url = str(tmp / "peer.sqlite3")
        rj = console()
        rows = [
            (label, events, *medians(args.repeat, [*rj, "runs", "list", "--journal", url], env))
            for label, events, url in (
                ("small journal", small_events, small_url),
                ("large journal", large_events, large_url),
                ("large, no index (peer)", large_events, peer_url),
            )
        ]
        # after the children: in-process reads grow this process, not theirs
        inproc = {
            label: statistics.median(in_process(url) for _ in range(args.repeat))
            for label, url in (("small", small_url), ("large", large_url), ("peer", peer_url))
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(
        f"runs list; large: a run of {args.lanes} lanes x {args.chunks} chunks, then a small "
        f"run; sqlite; medians of {args.repeat}; {os.cpu_count()} cpus"
    )
    for label, events, cpu, wall, rss in rows:
        print(
            f"{label:<24} {events:>8} events  cpu {cpu:5.2f} s  wall {wall:5.2f} s  "
            f"peak RSS {rss:6.1f} MB"
        )
    (_, _, s_cpu, s_wall, s_rss), (_, _, l_cpu, l_wall, l_rss), (_, _, p_cpu, p_wall, p_rss) = rows
    print(
        "list_runs in process (median): "
        + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in inproc.items())
        + f"; peer / large {inproc['peer'] / inproc['large']:.0f}x"
    )
    print(
        f"large / small: cpu {l_cpu / s_cpu:4.2f}x  wall {l_wall / s_wall:4.2f}x  "
        f"RSS {l_rss / s_rss:4.2f}x"
    )
    print(
        f"peer / large:  cpu {p_cpu / l_cpu:4.2f}x  wall {p_wall / l_wall:4.2f}x  "
        f"RSS {p_rss / l_rss:4.2f}x"
    )


if __name__ == "__main__":
    main()
