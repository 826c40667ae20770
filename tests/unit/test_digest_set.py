"""`DigestSet` (projections/llm_usage.py): a set of keys held as 16-byte digests in one
open-addressing table, so an LLM usage fold's keys (one a call and one an attempt, for
the whole run, in each fold that has them) cost about 24 to 48 bytes each, not about 90
as `bytes` in a `set` (issue 29: peak RSS at most 300 MB at a million decisions)."""

from __future__ import annotations

import gc
import tracemalloc

from runjournal.projections.llm_usage import DigestSet

KEYS = 30_000
PER_KEY = 60  # bytes a key may take; about 90 as a set of 16-byte `bytes`


def _key(i: int, attempt: int = 1) -> tuple[str, str, str, str, int, int]:
    return ("ask", f"docs/d{i % 977:05d}.md", "extract", f"{i:064x}", 1, attempt)


def test_membership_is_a_sets() -> None:
    keys = DigestSet()
    for i in range(5_000):
        keys.add(_key(i))
        if i % 3 == 0:
            keys.add(_key(i))  # again: counted once
    assert len(keys) == 5_000
    assert all(_key(i) in keys for i in range(5_000))
    assert not any(_key(i, attempt=2) in keys for i in range(5_000))
    assert _key(5_000) not in keys
    assert "not a tuple" not in keys


def test_a_key_takes_a_few_dozen_bytes() -> None:
    keys = [_key(i) for i in range(KEYS)]
    gc.collect()
    tracemalloc.start()
    try:
        held = DigestSet()
        for key in keys:
            held.add(key)
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(held) == KEYS
    assert size / KEYS < PER_KEY, f"{size / KEYS:.0f} B a key"
