"""`journal audit` and `projections rebuild` of a 10,000-decision run, against reading it.

Writes one synthetic run (built the way the runner records a cold run: per lane a
LaneResolved, every extract decision, the executions and checkpoint writes, merge and
normalize) through `JournalStore.append_events` in batches, then times, in this process:

- floor: reading and decoding the run's events (`JournalStore.events`),
- audit: reading + `audit_run` (what `journal audit` does),
- rebuild: `ProjectionStore.rebuild(run_id=…)` (manifest, reasons, runs index; reads the
  run once, writes the views atomically),

and the two commands end to end through the console script (process start included).
Ratios are against the floor measured in the same run.

    .venv/bin/python bench/bench_audit_rebuild.py [--lanes 40] [--chunks 248] [--repeat 3]
    .venv/bin/python bench/bench_audit_rebuild.py --journal postgresql://…?schema=bench
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
from collections.abc import Callable
from pathlib import Path

from runjournal.adapters.export import IMPORT_BATCH
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.journal import open_journal
from runjournal.adapters.projection_store import ProjectionStore
from runjournal.cli.output import json_bytes
from runjournal.domain.audit import audit_run

# The synthetic-run builder is the tests' shared helper (tests/support/synthetic.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import synthetic as syn


def median_of(repeat: int, fn: Callable[[], object]) -> tuple[float, float]:
    """Median (cpu s, wall s) of `fn`: this process's cpu plus its children's."""
    cpus, walls = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu, start = time.process_time(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        children = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        cpus.append(time.process_time() - cpu + children)
    return statistics.median(cpus), statistics.median(walls)


def console() -> list[str]:
    script = Path(sys.executable).parent / "runjournal"
    return [str(script)] if script.exists() else [sys.executable, "-m", "runjournal.cli.main"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=40)
    parser.add_argument("--chunks", type=int, default=248, help="extract chunks per lane")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--journal", default=None, help="journal URL (default: a temp SQLite)")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="rj-bench-audit-"))
    try:
        out = tmp / "out"
        url = args.journal or str(out / "journal.sqlite3")
        run = syn.synthetic_run(
            syn.run_id_for(time.time_ns() // 1000),
            lanes=args.lanes,
            chunks=args.chunks,
            output_root=str(out),
        )
        decisions = len(run.decisions)
        with open_journal(url) as store:
            start = time.perf_counter()
            for i in range(0, len(run.events), IMPORT_BATCH):  # as `journal import` appends
                store.append_events(run.run_id, run.events[i : i + IMPORT_BATCH])
            written = time.perf_counter() - start
            (out / run.run_id).mkdir(parents=True, exist_ok=True)

            floor = median_of(args.repeat, lambda: list(store.events(run.run_id)))

            def audit() -> None:
                report = audit_run(store.events(run.run_id))
                assert report.ok and report.decisions == decisions

            audit_s = median_of(args.repeat, audit)
            views = ProjectionStore(store, str(out), json_bytes, open_root=FsRoot.open)
            rebuild_s = median_of(args.repeat, lambda: views.rebuild(run_id=run.run_id))

        where = ["--journal", url, "--output-root", str(out)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNJOURNAL_")}

        def command(*argv: str, at: list[str] = where) -> Callable[[], None]:
            def call() -> None:
                subprocess.run(
                    [*console(), *argv, *at], check=True, env=env, stdout=subprocess.DEVNULL
                )

            return call

        # The synthetic run wrote no outputs: without its run directory (the in-process
        # rebuild made one for its views) the audit checks the events, not the directory
        # (which would miss every OutputWritten file); the CLI rebuild makes it again.
        shutil.rmtree(out / run.run_id)
        elsewhere = ["--journal", url, "--output-root", str(tmp / "elsewhere")]
        cli_audit = median_of(args.repeat, command("journal", "audit", run.run_id, at=elsewhere))
        cli_rebuild = median_of(args.repeat, command("projections", "rebuild", "--run", run.run_id))
        cli_start = median_of(args.repeat, command("runs", "list"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def line(label: str, figures: tuple[float, float]) -> str:
        cpu, wall = figures
        return (
            f"{label:<28} cpu {cpu:7.3f} s  wall {wall:7.3f} s  {decisions / wall:9,.0f} "
            f"decisions/s  ratio to floor {cpu / floor[0]:5.2f}x cpu {wall / floor[1]:5.2f}x wall"
        )

    backend = "postgresql" if url.startswith("postgres") else "sqlite"
    print(
        f"run: {args.lanes} lanes x {args.chunks} chunks, {decisions} decisions, "
        f"{len(run.events)} events, {backend} journal (appended in {written:.2f} s); "
        f"medians of {args.repeat}"
    )
    print(
        f"{'floor (read + decode)':<28} cpu {floor[0]:7.3f} s  wall {floor[1]:7.3f} s  "
        f"{decisions / floor[1]:9,.0f} decisions/s"
    )
    print(line("audit (in process)", audit_s))
    print(line("rebuild --run (in process)", rebuild_s))
    print(line("journal audit (CLI)", cli_audit))
    print(line("projections rebuild (CLI)", cli_rebuild))
    print(f"{'CLI start-up (runs list)':<28} cpu {cli_start[0]:7.3f} s  wall {cli_start[1]:7.3f} s")


if __name__ == "__main__":
    main()
