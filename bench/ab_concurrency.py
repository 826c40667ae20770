"""Interleaved A/B of bench/bench_concurrency.py's figures: this checkout against another.

    git archive integ | tar -x -C /tmp/base/runjournal
    python bench/ab_concurrency.py --base /tmp/base [--rounds 5] [--docs 250 --chunks 4]

`--base` is a directory holding another checkout as `runjournal/`; its runs put it first
on PYTHONPATH (this checkout's editable install is found after it). `--this` likewise,
for a copy of this checkout taken before the A/B (edits during it then change nothing).
Each round runs both checkouts, in alternating order, the same three ways: a one-call
run against the instant server (start-up), the DOCS x CHUNKS run against the instant
server, and the same run against a server with LATENCY seconds per answer (`--jobs`
JOBS). Single figures on a shared box move with its load; alternating the checkouts
round by round puts both under the same load. Printed: per checkout the medians over the
rounds of cpu per call (run minus start-up, over calls - 1, as bench_concurrency.py
computes it) against the instant server and at the latency, the wall at the latency and
wall / ideal; the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_concurrency as bench


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--this", type=Path, help="a copy of this checkout, as --base")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--docs", type=int, default=250)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--jobs", type=int, default=64)
    args = parser.parse_args()
    for tree in (args.base, args.this):
        if tree is not None and not (tree / "runjournal" / "__init__.py").exists():
            raise SystemExit(f"{tree}/runjournal is not a checkout")
    calls = args.docs * args.chunks
    ideal = calls * args.latency / args.jobs
    plain = dict(bench.ENV)
    this = plain if args.this is None else {**plain, "PYTHONPATH": str(args.this.resolve())}
    variants = {"this": this, "base": {**plain, "PYTHONPATH": str(args.base.resolve())}}
    slow, slow_url = bench.start_fake(args.latency)
    fast, fast_url = bench.start_fake(0.0)
    tmp = Path(tempfile.mkdtemp(prefix="rj-bench-ab-"))
    figures = {name: {"cpu0": [], "cpu": [], "wall": []} for name in variants}
    try:
        bench.make_corpus(tmp / "corpus", args.docs, args.chunks, slow_url, fast_url)
        bench.make_corpus(tmp / "one", 1, 1, fast_url, fast_url)
        print(
            f"{calls} calls, latency {args.latency * 1000:.0f} ms, --jobs {args.jobs}, "
            f"{args.rounds} rounds alternating; load {bench.load()} before",
            flush=True,
        )
        jobs = ("--jobs", str(args.jobs))
        for i in range(args.rounds):
            order = list(variants) if i % 2 == 0 else list(variants)[::-1]
            for name in order:
                bench.ENV = variants[name]
                where = tmp / f"{name}-{i}"
                _, start_cpu, _ = bench.run(tmp / "one", Path(f"{where}-one"), *jobs)
                _, cpu0, _ = bench.run(
                    tmp / "corpus", Path(f"{where}-fast"), *jobs, profiles="instant.toml"
                )
                wall, cpu, _ = bench.run(tmp / "corpus", Path(f"{where}-slow"), *jobs)
                per = {"cpu0": cpu0, "cpu": cpu}
                for key, value in per.items():
                    figures[name][key].append((value - start_cpu) / (calls - 1) * 1000)
                figures[name]["wall"].append(wall)
                print(
                    f"round {i} {name}: cpu/call {figures[name]['cpu0'][-1]:.2f} ms instant,"
                    f" {figures[name]['cpu'][-1]:.2f} ms at latency, wall {wall:.2f} s;"
                    f" load {bench.load()}",
                    flush=True,
                )
        print(
            f"{'':>6} {'cpu/call instant':>17} {'cpu/call latency':>17} {'wall s':>7} {'/ideal':>7}"
        )
        for name, got in figures.items():
            wall = statistics.median(got["wall"])
            print(
                f"{name:>6} {statistics.median(got['cpu0']):>14.2f} ms"
                f" {statistics.median(got['cpu']):>14.2f} ms {wall:>7.2f} {wall / ideal:>6.2f}x"
            )
        print(f"load {bench.load()} after")
    finally:
        bench.ENV = plain
        for server in (slow, fast):
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.exit(main())
