"""Cost of one `builtin.glossary` extract per chunk as the number of terms grows.

Builds KEYS consumed terms (half code-like, `cfg_12.opt`, half two-word phrases) and a
corpus of reST chunks that mention some of them, then times the glossary's extract over
every chunk (after the lane's matchers are built once) and, in the same run, the way
`builtin.glossary/1` counted code-like keys: one pattern per key per chunk with
`re.findall`, which thrashes Python's 512-entry pattern cache past 512 keys. Medians of
REPEAT runs, cpu (process time) and wall.

    python bench/bench_glossary_keys.py [--chunks 200] [--repeat 5]

Flat means the per-chunk cost does not grow with the number of keys.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import statistics
import time

from runjournal.adapters.builtin_modules.glossary import GlossaryModule
from runjournal.adapters.builtin_modules.markup import chunk_sentences, syntax_of
from runjournal.adapters.builtin_modules.terms import Term, TermKind
from runjournal.adapters.builtin_modules.text import clean_inline
from runjournal.domain.modules import Chunk, StageContext


def make_terms(n: int) -> list[Term]:
    half = n // 2
    code = [Term(f"cfg_{i}.opt", f"cfg_{i}.opt", 2, TermKind.CODE) for i in range(half)]
    words = [Term(f"word{i} thing", f"word{i} thing", 2, TermKind.BIGRAM) for i in range(n - half)]
    return code + words


def make_chunks(count: int) -> list[Chunk]:
    chunks = []
    for i in range(count):
        text = (
            f"\nSet ``cfg_{i}.opt`` for the word{i} thing, see :confval:`cfg_{i + 1}.opt`.\n"
            f"The word{i + 3} thing is a setting of the :term:`build` and ``cfg_{i}.opt``\n"
            "again, with more prose around it to make a paragraph of ordinary length.\n"
        )
        data = text.encode()
        digest = hashlib.sha256(data).hexdigest()
        chunks.append(Chunk(digest, "conf.rst", 0, len(data), text, digest))
    return chunks


def old_literal_counts(text: str, source: str, keys: list[str]) -> dict[str, int]:
    """builtin.glossary/1: one `re` pattern per key per chunk."""
    sentences = chunk_sentences(text, syntax_of(source, text), headings=True)
    plain = " ".join(clean_inline(s).casefold() for s in sentences)
    counts = {}
    for key in keys:
        found = len(re.findall(r"(?<![\w.])" + re.escape(key) + r"(?![\w])", plain))
        if found:
            counts[key] = found
    return counts


def timed(fn, repeat: int) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(repeat):
        re.purge()
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - w0)
    return statistics.median(cpus), statistics.median(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    chunks = make_chunks(args.chunks)
    print(f"{args.chunks} chunks, median of {args.repeat}; microseconds per chunk (cpu / wall)")
    print(f"{'terms':>6} {'builtin.glossary (now)':>24} {'one re per key (v1)':>22} {'ratio':>7}")
    for n in (64, 256, 512, 1024, 2048, 4096):
        terms = make_terms(n)
        ctx = StageContext(step="g", lane="corpus", consumed={"terms": {"conf.rst": terms}})
        module = GlossaryModule()
        module.extract(chunks[0], ctx)  # the lane's matchers, built once
        literal = [t.key for t in terms if t.kind is TermKind.CODE]
        now = timed(lambda: [module.extract(c, ctx) for c in chunks], args.repeat)  # noqa: B023
        old = timed(
            lambda: [old_literal_counts(c.text, c.source, literal) for c in chunks],  # noqa: B023
            args.repeat,
        )
        per = [x / len(chunks) * 1e6 for x in (*now, *old)]
        print(
            f"{n:>6} {per[0]:>11.0f} / {per[1]:>9.0f} {per[2]:>10.0f} / {per[3]:>9.0f} "
            f"{per[2] / per[0]:>6.1f}x"
        )


if __name__ == "__main__":
    main()
