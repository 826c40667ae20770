"""Journal bytes per reused decision: what a fully cached `run --resume` adds to the journal.

Builds a corpus of DOCS documents x PARAS paragraphs (the `builtin.terms` pipeline of
bench_resume.py), runs it cold, then REPEAT fully cached `--resume`s through the console
script, measuring the SQLite journal's size (pages, with the WAL folded in) before and
after each. Each fully reused lane is one `LaneReused` (docs/internals.md "Reuse
summaries"); the peers, measured in the same run: the same resume with
`--no-reuse-summary` (every decision its own `StageDecided`), and that resume's events
stored one row per event (the layout before packed and delta rows, docs/internals.md
"Delta rows") in a scratch journal, through the same mapper and chain.

    python bench/bench_journal_size.py [--docs 20] [--paras 60] [--small-docs 300] [--repeat 5]

A second corpus of SMALL_DOCS one-paragraph documents shows the other end: one chunk per
lane, where the lane's own events (`LaneResolved`, `ArtifactGenerated`, `OutputWritten`)
weigh most on each decision (they share the lane's delta row).

Targets: a reused decision costs <= 200 bytes in the journal (issue 15); a no-op resume
adds at most 2 KiB per 1,000 decisions (issue 29).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from runjournal.adapters.journal import open_journal
from runjournal.adapters.journal.chain import genesis
from runjournal.domain.run import run_aggregate_id

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_resume import make_corpus  # the same corpus as the resume benchmark

TARGET = 200
TARGET_SUMMARY = 2048  # bytes per 1,000 decisions


def console() -> list[str]:
    script = Path(sys.executable).parent / "runjournal"
    return [str(script)] if script.exists() else [sys.executable, "-m", "runjournal.cli.main"]


def db_bytes(path: Path) -> int:
    """The database's size with its WAL folded in (what the journal occupies on disk)."""
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        return int(pages * db.execute("PRAGMA page_size").fetchone()[0])


def run(root: Path, *extra: str) -> dict:
    proc = subprocess.run(
        [
            *console(),
            "run",
            str(root / "big.toml"),
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
    )
    if proc.returncode != 0:
        sys.exit(f"bench_journal_size: run failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def one_row_per_event(journal: Path, run_id: str, scratch: Path) -> tuple[int, int]:
    """(bytes, events) of the run re-stored one row per event in a fresh journal."""
    with open_journal(str(journal), read_only=True) as source:
        events = list(source.events(run_id))
    with open_journal(str(scratch)) as target:
        mapper, insert = target._mapper, target._app.recorder.insert_events
        previous = genesis(run_aggregate_id(run_id))
        rows = []
        for event in events:
            row, previous = mapper.to_chained_stored_event(event, previous)
            rows.append(row)
        before = db_bytes(scratch)
        for start in range(0, len(rows), 256):  # the session's batch
            insert(rows[start : start + 256])
    return db_bytes(scratch) - before, len(events)


def measure(docs: int, paras: int, repeat: int) -> None:
    """Print the figures of one corpus."""
    with tempfile.TemporaryDirectory(prefix="rj-bench-size-") as tmp:
        root = Path(tmp)
        make_corpus(root, docs, paras)
        journal = root / "out" / "journal.sqlite3"
        run(root)
        sizes, olds, decisions, run_id, old_id = [], [], 0, "", ""
        for _ in range(repeat):
            for extra, into in (((), sizes), (("--no-reuse-summary",), olds)):
                before = db_bytes(journal)
                doc = run(root, "--resume", *extra)
                if set(doc["decisions"]) != {"reused"}:
                    sys.exit(f"bench_journal_size: not fully cached: {doc['decisions']}")
                into.append(db_bytes(journal) - before)
                decisions = sum(doc["decisions"].values())
                if extra:
                    old_id = doc["run_id"]
                else:
                    run_id = doc["run_id"]
        with open_journal(str(journal), read_only=True) as store:
            stored = sum(1 for _ in store.events(run_id))
            old_events = sum(1 for _ in store.events(old_id))
        peer, peer_events = one_row_per_event(journal, old_id, root / "scratch.sqlite3")
    size, old = statistics.median(sizes), statistics.median(olds)
    per, old_per, peer_per = size / decisions, old / decisions, peer / decisions
    verdict = "meets" if per * 1000 <= TARGET_SUMMARY else "misses"
    print(
        f"corpus: {docs} docs x {paras} paragraphs, {decisions} decisions "
        f"({stored} events stored, {old_events} without summaries); medians of {repeat}"
    )
    print(
        f"  resume adds        {size:>10,.0f} bytes  {per * 1000:8,.0f} per 1,000 decisions  "
        f"target <= {TARGET_SUMMARY:,}: {verdict}"
    )
    print(
        f"  without summaries  {old:>10,.0f} bytes  {old_per * 1000:8,.0f} per 1,000 decisions  "
        f"({old_per:.1f} per decision, target <= {TARGET})"
    )
    print(
        f"  one row per event  {peer:>10,.0f} bytes  {peer_per * 1000:8,.0f} per 1,000 decisions  "
        f"({peer_events} rows)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20)
    parser.add_argument("--paras", type=int, default=60)
    parser.add_argument("--small-docs", type=int, default=300, help="one-paragraph documents")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    measure(args.docs, args.paras, args.repeat)
    if args.small_docs:  # one chunk per lane: the lane's own events weigh on each decision
        measure(args.small_docs, 1, args.repeat)


if __name__ == "__main__":
    main()
