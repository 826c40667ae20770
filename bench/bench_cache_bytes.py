"""What the cache holds for the glossary example, against the corpus it was built from
(issue 29: "cache bytes at most 3x the corpus for the glossary example").

Runs `examples/glossary/pipeline.toml` (its plugin included) cold, in a temp dir, over:

- `examples/glossary/docs`: the README's first command (6 small documents: the fixed
  cost of an index and a segment dominates);
- `examples/real-docs/docs`: 37 reStructuredText pages of the Sphinx docs (real prose,
  the closest corpus here to the issue's 497 pages of the Python docs);
- a synthetic corpus of DOCS documents of PARAS paragraphs (40-120 words each, a fixed
  seed), as `bench/bench_million.py` makes them.

For each: the corpus's bytes, the cache's bytes on disk (blocks allocated, every file
under the cache root) and their ratio, then where the packed store's bytes go: checkpoint
envelopes (header, payload, and the envelope's own framing), the shared components
entries, lane pointers and chunk plans, the segment records' names and framing, what
sealing the segments into zstd blocks took off (negative), and the SQLite index. A fully
cached `--resume` follows each cold run and must reuse every decision.

    python bench/bench_cache_bytes.py [--docs 500] [--paras 8]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from runjournal.adapters.packed_store import segment_bytes, segment_records

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "runjournal"
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
WORDS = [
    *("journal", "checkpoint", "resume", "stage", "lane", "pipeline", "digest", "manifest"),
    *("event", "replay", "audit", "batch", "segment", "index", "reader", "writer"),
    *("compaction", "record", "payload", "envelope", "scope", "identity", "corpus"),
    *("document", "paragraph", "chunk", "plan", "decision", "reuse", "cache", "storage"),
    *("durable", "crash"),
]


def paragraph(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(40, 120))]
    if rng.random() < 0.3:
        words[0] = f"**{words[0].capitalize()} {words[1]}**"
    if rng.random() < 0.2:
        words[-1] = f"Write-Ahead Log (WAL) {words[-1]}"
    return " ".join(words).capitalize() + "."


def synthetic(docs: Path, count: int, paras: int) -> None:
    rng = random.Random(29)
    docs.mkdir(parents=True)
    for d in range(count):
        body = "\n\n".join(paragraph(rng) for _ in range(paras))
        (docs / f"d{d:06d}.md").write_text(f"# Document {d}\n\n{body}\n")


def project(where: Path, docs: Path | None, glob: str) -> Path:
    """A copy of the glossary example whose inputs are `docs` (copied) under `glob`."""
    example = ROOT / "examples" / "glossary"
    where.mkdir(parents=True)
    shutil.copytree(example / "plugins", where / "plugins")
    if docs is not None:
        shutil.copytree(docs, where / "docs")
    text = (example / "pipeline.toml").read_text()
    (where / "pipeline.toml").write_text(text.replace('"docs/*.md"', f'"{glob}"'))
    return where


def corpus_bytes(docs: Path) -> int:
    return sum(p.stat().st_size for p in docs.rglob("*") if p.is_file())


def on_disk(path: Path) -> int:
    return sum(p.lstat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def run(where: Path, *extra: str) -> dict:
    proc = subprocess.run(
        [
            *(str(SCRIPT), "run", "pipeline.toml", "--cache-root", str(where / "cache")),
            *("--no-progress", "--json", *extra),
        ],
        cwd=where,
        env=ENV,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return json.loads(proc.stdout)


def breakdown(cache: Path) -> Counter[str]:
    """Bytes of the packed store by what they hold."""
    out: Counter[str] = Counter()
    for segment in (cache / "pack" / "segments").glob("*.seg"):
        stored = segment.read_bytes()
        data = segment_bytes(stored)  # a sealed segment's records, decompressed
        out["sealed blocks (zstd)"] += len(stored) - len(data)
        held = 0
        for name, record in segment_records(data):
            held += len(record)
            if name.endswith(".ckpt"):
                size = struct.unpack_from(">I", record, 6)[0]
                out["envelope headers"] += size
                out["envelope framing"] += 42
                out["payloads"] += len(record) - 42 - size
            elif name.endswith(".plan"):
                out["chunk plans"] += len(record)
            elif "latest." in name.rsplit("/", 1)[-1]:
                out["lane pointers"] += len(record)
            else:
                out["shared components"] += len(record)
        out["record names and framing"] += len(data) - held
    out["index (SQLite)"] = sum(
        p.stat().st_size for p in (cache / "pack").glob("index.sqlite*") if p.is_file()
    )
    return out


def measure(label: str, where: Path, docs: Path) -> None:
    corpus = corpus_bytes(docs)
    cold = run(where)
    resumed = run(where, "--resume")
    assert set(resumed["decisions"]) == {"reused"}, resumed["decisions"]
    decisions = sum(cold["decisions"].values())
    cache = on_disk(where / "cache")
    parts = breakdown(where / "cache")
    print(
        f"{label}: corpus {corpus / 1e3:,.0f} kB, {decisions:,} checkpoints; cache "
        f"{cache / 1e3:,.0f} kB on disk = {cache / corpus:.1f}x the corpus (target <= 3x)"
    )
    shown = [(k, v) for k, v in parts.items() if v]
    print(
        "  "
        + ", ".join(
            f"{k} {v / 1e3:+,.0f} kB" if v < 0 else f"{k} {v / 1e3:,.0f} kB" for k, v in shown
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--paras", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        example = project(base / "example", ROOT / "examples" / "glossary" / "docs", "docs/*.md")
        measure("glossary example (its 6 documents)", example, example / "docs")
        real = project(base / "real", ROOT / "examples" / "real-docs" / "docs", "docs/**/*.rst")
        measure("glossary pipeline over examples/real-docs (37 reST pages)", real, real / "docs")
        synth = project(base / "synth", None, "docs/*.md")
        synthetic(synth / "docs", args.docs, args.paras)
        label = f"glossary pipeline over {args.docs:,} synthetic documents"
        measure(f"{label} of {args.paras} paragraphs", synth, synth / "docs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
