"""A corpus at scale on one machine: what every command costs per decision, what the cache
and the journal hold (issue 29).

Generates DOCS synthetic documents of realistic size (PARAS paragraphs of 40-120 words,
2-8 KB each, a fixed seed) and a pipeline of two steps over them: `ask`, an `llm.json`
step answered at once by the loopback fake server (tests/support/fake_openai.py), and
`terms`, the deterministic `builtin.terms`. Then, each command REPEAT times where it is
repeatable (medians), with cpu (user + system of the child, from `wait4`), wall and the
child's peak RSS:

  cold run; no-op `run --resume`; a 1% edit (DOCS/100 documents get one paragraph more)
  then `run --resume`; `journal audit` of the no-op resume; `explain` of it;
  `gc --cache`.

And what is on disk: files and bytes in the cache root against the corpus's bytes, files
per 1,000 checkpoints, journal bytes and what one no-op resume adds to the journal per
1,000 decisions. The floor of a fully cached resume, measured in this process on the same
cache: reading every segment once and hashing each checkpoint record.

    python bench/bench_million.py [--docs 2000] [--paras 6] [--repeat 3]
        [--input-check verify|stat|both]

The no-op resumes run with `input_check = "verify"`, then (after one unmeasured resume that
records the stat cache) with `"stat"`, unless `--input-check` names one.

Targets (issue 29, stated for 100k documents / 1M decisions): cache files at most 1 per
1,000 checkpoints plus large objects; a no-op resume adds at most 2 KiB per 1,000
decisions to the journal; a fully cached resume at most 2x the read+hash floor per
decision; peak RSS at most 300 MB for every command. The default size runs in minutes on
a 2-core machine; `--docs 100000` is the issue's size.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_concurrency import ENV, KEY_VAR, PROFILE, SCRIPT, start_fake
from runjournal.adapters.packed_store import segment_records
from spawn import Spawner

PIPELINE = """name = "million"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 1200
[[steps]]
id = "ask"
module = "llm.json"
params = { prompt = "Terms in: {text}", temperature = 0, seed = 7, max_tokens = 20 }
[[steps]]
id = "terms"
module = "builtin.terms"
"""
WORDS = [
    "journal",
    "checkpoint",
    "resume",
    "stage",
    "lane",
    "pipeline",
    "digest",
    "manifest",
    "event",
    "replay",
    "audit",
    "batch",
    "segment",
    "index",
    "reader",
    "writer",
    "compaction",
    "record",
    "payload",
    "envelope",
    "scope",
    "identity",
    "corpus",
    "document",
    "paragraph",
    "chunk",
    "plan",
    "decision",
    "reuse",
    "cache",
    "storage",
    "durable",
    "crash",
    "recovery",
]


def paragraph(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(40, 120))]
    if rng.random() < 0.3:
        words[0] = f"**{words[0].capitalize()} {words[1]}**"
    return " ".join(words).capitalize() + "."


def make_corpus(root: Path, docs: int, paras: int, url: str) -> int:
    """The documents, pipeline and profile; returns the corpus's bytes."""
    rng = random.Random(29)
    (root / "docs").mkdir(parents=True)
    total = 0
    for d in range(docs):
        text = f"# Document {d}\n\n" + "\n\n".join(paragraph(rng) for _ in range(paras)) + "\n"
        (root / "docs" / f"d{d:06d}.md").write_text(text)
        total += len(text.encode())
    (root / "pipeline.toml").write_text(PIPELINE)
    profile = PROFILE.replace("{retries}", "0")
    (root / "profiles.toml").write_text(profile.replace("{url}", url))
    return total


_SPAWNER: Spawner | None = None


def command(root: Path, *args: str, keep: bool = True) -> tuple[float, float, int, str]:
    """(cpu s, wall s, peak RSS bytes, stdout) of one runjournal command, from `wait4` in
    a small spawner process (`bench/spawn.py`): a child of this bench would report at least
    the bench's own peak RSS. Each command's figures go to stderr as it ends: at 100k
    documents the bench takes most of an hour, and a failure late in it keeps the rest."""
    global _SPAWNER
    if _SPAWNER is None:
        _SPAWNER = Spawner()
    env = dict(ENV, **{KEY_VAR: "bench-key"})
    result = _SPAWNER.run([str(SCRIPT), *args], cwd=root, env=env, keep_output=keep)
    cpu, wall, rss, _ = result
    name = " ".join(a for a in args[:3] if not a.startswith("/"))
    flags = " ".join(a for a in args if a in ("--resume", "verify", "stat", "--cache"))
    print(
        f"[{time.strftime('%H:%M:%S')}] {name} {flags}: cpu {cpu:.2f} s wall {wall:.2f} s "
        f"peak RSS {rss / 2**20:.0f} MiB; load {os.getloadavg()[0]:.1f}",
        file=sys.stderr,
        flush=True,
    )
    return result


def run_args(root: Path, *extra: str) -> list[str]:
    return [
        "run",
        str(root / "pipeline.toml"),
        "--output-root",
        str(root / "out"),
        "--cache-root",
        str(root / "cache"),
        "--profile",
        "fake",
        "--profiles-file",
        str(root / "profiles.toml"),
        "--jobs",
        "8",
        "--no-progress",
        "--json",
        *extra,
    ]


def disk(path: Path) -> tuple[int, int]:
    """(regular files, bytes allocated on disk) under `path`."""
    files = size = 0
    for directory, _dirs, names in os.walk(path):
        for name in names:
            info = os.lstat(os.path.join(directory, name))
            files += 1
            size += info.st_blocks * 512
    return files, size


def floor(cache: Path) -> float:
    """cpu s of reading every segment once and hashing each checkpoint record."""
    cpu = time.process_time()
    for segment in (cache / "pack" / "segments").glob("*.seg"):
        for name, data in segment_records(segment.read_bytes()):
            if name.endswith(".ckpt"):
                hashlib.sha256(data).digest()
    return time.process_time() - cpu


def journal_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "out").glob("journal.sqlite3*"))


def edit(root: Path, docs: int) -> None:
    """One paragraph more in 1% of the documents (at least one)."""
    rng = random.Random(30)
    for d in range(0, docs, max(1, docs // max(1, docs // 100))):
        path = root / "docs" / f"d{d:06d}.md"
        path.write_text(path.read_text() + "\n" + paragraph(rng) + "\n")


def med(rows: list[tuple[float, float, int]]) -> tuple[float, float, int]:
    return (
        statistics.median(r[0] for r in rows),
        statistics.median(r[1] for r in rows),
        max(r[2] for r in rows),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--paras", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--input-check",
        choices=("verify", "stat", "both"),
        default="both",
        help="the no-op resumes' input_check (both: a series of each, verify's first)",
    )
    args = parser.parse_args()
    modes = ("verify", "stat") if args.input_check == "both" else (args.input_check,)
    server, url = start_fake(0.0, log=False)  # a log of every request: GBs at 100k docs
    try:
        with tempfile.TemporaryDirectory(prefix="rj-million-") as tmp:
            root = Path(tmp)
            corpus = make_corpus(root, args.docs, args.paras, url)
            load = os.getloadavg()[0]
            cpu, wall, rss, out = command(root, *run_args(root))
            cold = (cpu, wall, rss)
            cold_doc = json.loads(out)
            decisions = sum(cold_doc["decisions"].values())
            checkpoints = decisions  # every stage of a cold run writes one
            resumes: dict[str, list[tuple[float, float, int]]] = {m: [] for m in modes}
            added = []
            for mode in modes:
                if mode == "stat":  # records the stat cache: not measured
                    command(root, *run_args(root, "--resume", "--input-check", mode))
                for _ in range(args.repeat):
                    before = journal_bytes(root)
                    extra = ("--resume", "--input-check", mode)
                    cpu, wall, rss, out = command(root, *run_args(root, *extra))
                    doc = json.loads(out)
                    assert set(doc["decisions"]) == {"reused"}, doc["decisions"]
                    resumes[mode].append((cpu, wall, rss))
                    added.append(journal_bytes(root) - before)
            noop_run = doc["run_id"]
            floors = [floor(root / "cache") for _ in range(args.repeat)]
            outs = ("--output-root", str(root / "out"))
            audits = [
                command(root, "journal", "audit", noop_run, *outs, "--json", keep=False)[:3]
                for _ in range(args.repeat)
            ]
            explains = [
                command(root, "explain", noop_run, *outs, "--json", keep=False)[:3]
                for _ in range(args.repeat)
            ]
            edit(root, args.docs)
            cpu, wall, rss, out = command(root, *run_args(root, "--resume"))
            edited = (cpu, wall, rss)
            edited_doc = json.loads(out)
            files, size = disk(root / "cache")
            jbytes = journal_bytes(root)
            gcs = [
                command(root, "gc", "--cache", *outs, "--cache-root", str(root / "cache"))[:3]
                for _ in range(1)
            ]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
    per_decision_us = {m: med(rows)[0] / decisions * 1e6 for m, rows in resumes.items()}
    floor_us = statistics.median(floors) / decisions * 1e6
    print(
        f"corpus: {args.docs:,} documents, {corpus / 1e6:.1f} MB, {decisions:,} decisions "
        f"(ask: llm.json against the instant fake server, terms: builtin.terms); medians of "
        f"{args.repeat}; load {load:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    rows = [
        ("cold run", cold),
        *((f"no-op resume, {m}", med(rows)) for m, rows in resumes.items()),
        ("1% edit, resume", edited),
        ("journal audit", med(audits)),
        ("explain", med(explains)),
        ("gc --cache", med(gcs)),
    ]
    for name, (cpu, wall, rss) in rows:
        print(
            f"{name:<20} cpu {cpu:7.2f} s  wall {wall:7.2f} s  "
            f"cpu per decision {cpu / decisions * 1e6:7.1f} us  peak RSS {rss / 2**20:6.0f} MiB"
            + ("  (target <= 300 MiB)" if rss > 0 else "")
        )
    for mode, us in per_decision_us.items():
        print(
            f"no-op resume ({mode}) per decision {us:.1f} us cpu (start-up included); "
            f"read+hash floor {floor_us:.2f} us; ratio {us / floor_us:.0f}x"
        )
    print(
        f"cache: {files:,} files for {checkpoints:,} checkpoints "
        f"({files / checkpoints * 1000:.2f} per 1,000; target <= 1 plus large objects), "
        f"{size / 1e6:.1f} MB on disk = {size / corpus:.1f}x the corpus"
    )
    per_k = statistics.median(added) / decisions * 1000
    runs = len(resumes) * args.repeat + 2 + ("stat" in resumes)
    print(
        f"journal: {jbytes / 1e6:.1f} MB after {runs} runs; a no-op resume adds "
        f"{statistics.median(added):,.0f} bytes = {per_k:,.0f} B per 1,000 decisions "
        f"(median; target <= 2,048); the first after the cold run {added[0]:,} bytes = "
        f"{added[0] / decisions * 1000:,.0f} B per 1,000 decisions"
    )
    print(
        f"1% edit: {sum(v for k, v in edited_doc['decisions'].items() if k != 'reused'):,} "
        f"decisions not reused of {sum(edited_doc['decisions'].values()):,}"
    )


if __name__ == "__main__":
    sys.exit(main())
