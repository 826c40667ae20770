"""Reading commands on a large run: events per second and peak memory, same run.

Writes one synthetic cold run (built as the runner records it, tests/support/synthetic.py)
into a temp SQLite journal, then runs each command through the console script REPEAT
times, measuring the child's cpu (user + sys), wall time and peak RSS (`ru_maxrss` from
`os.wait4`), medians. The floor is reading and decoding the run's events
(`JournalStore.events`, medians of REPEAT) in the child that built the run; the console
script's start-up plus opening the
journal (`runs list`) is shown beside it. The synthetic run has no run directory (its
outputs were never written), so `journal audit` checks the events alone. Beside the
streaming commands (show, audit, explain --json, rebuild, export, import) it measures
every other command that reads the run: `projections status`, `explain` (text), `runs
show`, `runs diff` (the run with itself: read twice) and `report`.

    python bench/bench_journal_stream.py [--lanes 180] [--chunks 330] [--repeat 5]

Targets (issue 15): `journal show --jsonl` and `journal import` >= 50k events/s; peak RSS
<= 120 MB for every command on a 60k-decision run.
"""

from __future__ import annotations

import argparse
import os
import shutil
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

STATUS = "projections status"
DIFF = "runs diff (the run with itself)"
# How many times a command reads the run's events (events/s counts every read): status
# reads the views' files and the journal's run list, never the events.
READS = {STATUS: 0, DIFF: 2}


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
        sys.exit(f"bench_journal_stream: {' '.join(argv[1:3])} failed: {err.strip()}")
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024


def median_of(repeat: int, argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    runs = [child(argv, env) for _ in range(repeat)]
    return tuple(statistics.median(r[i] for r in runs) for i in range(3))  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=180)
    parser.add_argument("--chunks", type=int, default=330, help="extract chunks per lane")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--build", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        build(args.build, args.lanes, args.chunks, args.repeat)
        return

    tmp = Path(tempfile.mkdtemp(prefix="rj-bench-stream-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNJOURNAL_")}
    try:
        out = tmp / "out"
        url = str(out / "journal.sqlite3")
        # Built in a child: a child forked from a parent that holds the synthetic run
        # starts with the parent's resident pages, and `ru_maxrss` would count them.
        built = subprocess.run(
            [
                sys.executable,
                __file__,
                "--build",
                url,
                "--lanes",
                str(args.lanes),
                "--chunks",
                str(args.chunks),
                "--repeat",
                str(args.repeat),
            ],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        ).stdout.split()
        run_id, events, decisions = built[0], int(built[1]), int(built[2])
        floor_cpu, floor = float(built[3]), float(built[4])
        export = tmp / "run.rjx"
        where = ["--journal", url, "--output-root", str(out)]
        rj = console()
        subprocess.run(
            [*rj, "journal", "export", run_id, "-o", str(export), *where],
            check=True,
            env=env,
            capture_output=True,
        )
        start_cpu, start_wall, start_rss = median_of(
            args.repeat, [*rj, "runs", "list", *where], env
        )
        commands = [
            ("journal show --jsonl", ["journal", "show", run_id, "--jsonl", *where]),
            ("journal show (text)", ["journal", "show", run_id, *where]),
            ("journal show --json", ["journal", "show", run_id, "--json", *where]),
            ("journal audit", ["journal", "audit", run_id, *where]),
            ("explain --json", ["explain", run_id, "--json", *where]),
            ("projections rebuild --run", ["projections", "rebuild", "--run", run_id, *where]),
            (STATUS, ["projections", "status", *where]),
            ("explain (text)", ["explain", run_id, *where]),
            ("runs show", ["runs", "show", run_id, *where]),
            (DIFF, ["runs", "diff", run_id, run_id, *where]),
            (
                "report -o FILE",
                ["report", run_id, "-o", str(tmp / "report.html"), "--force", *where],
            ),
            (
                "journal export",
                ["journal", "export", run_id, "-o", str(tmp / "again.rjx"), "--force", *where],
            ),
        ]
        rows = [(label, *median_of(args.repeat, [*rj, *argv], env)) for label, argv in commands]
        imports = []
        for i in range(args.repeat):  # each import into a fresh journal
            target = tmp / f"import-{i}"
            imports.append(
                child([*rj, "journal", "import", str(export), "--output-root", str(target)], env)
            )
        rows.append(
            ("journal import", *(statistics.median(r[k] for r in imports) for k in range(3)))
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(
        f"run: {args.lanes} lanes x {args.chunks} chunks, {decisions} decisions, {events} events,"
        f" sqlite journal; medians of {args.repeat}"
    )
    print(
        f"{'floor: read + decode (in process)':<34} cpu {floor_cpu:6.2f} s  wall {floor:6.2f} s  "
        f"events/s {events / floor_cpu:7,.0f} cpu {events / floor:7,.0f} wall"
    )
    print(
        f"{'CLI start-up (runs list)':<34} cpu {start_cpu:6.2f} s  wall "
        f"{start_wall:6.2f} s  peak RSS {start_rss:6.1f} MB"
    )
    for label, cpu, wall, rss in rows:
        read = events * READS.get(label, 1)
        rate = f"events/s {read / cpu:7,.0f} cpu {read / wall:7,.0f} wall" if read else " " * 37
        print(f"{label:<34} cpu {cpu:6.2f} s  wall {wall:6.2f} s  {rate}  peak RSS {rss:6.1f} MB")


def build(url: str, lanes: int, chunks: int, repeat: int) -> None:
    """Write the synthetic run; print its id, events, decisions and the read floor."""
    run = syn.synthetic_run(
        syn.run_id_for(time.time_ns() // 1000),
        lanes=lanes,
        chunks=chunks,
        output_root=str(Path(url).parent),
    )
    with open_journal(url) as store:
        store.append_events(run.run_id, run.events, batch=IMPORT_BATCH)
        cpus, walls = [], []
        for _ in range(repeat):
            cpu, wall = time.process_time(), time.perf_counter()
            sum(1 for _ in store.events(run.run_id))
            cpus.append(time.process_time() - cpu)
            walls.append(time.perf_counter() - wall)
    print(run.run_id, len(run.events), len(run.decisions), *map(statistics.median, (cpus, walls)))


if __name__ == "__main__":
    main()
