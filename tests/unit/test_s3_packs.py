"""The pack format of an object-storage cache root (`adapters/s3_packs.py`,
docs/internals.md "Object-storage cache"): round trips, and truncated or torn packs
refused, never read as records."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.adapters.s3_packs import (
    PackError,
    decode_index,
    encode_pack,
    index_span,
    pack_key,
    parse_pack_key,
    records_of,
)

names = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x2FF, exclude_characters="\x7f"),
    min_size=1,
    max_size=40,
)
records = st.lists(
    st.tuples(names, st.one_of(st.none(), st.binary(max_size=300))), min_size=0, max_size=20
)
clocks = st.integers(min_value=0, max_value=(1 << 64) - 1)


@given(clocks, records)
def test_a_pack_round_trips(ts: int, batch: list[tuple[str, bytes | None]]) -> None:
    data = encode_pack(ts, batch)
    index = decode_index(data)
    assert index.ts == ts and index.size == len(data)
    assert [(r.name, r.removed) for r in index.records] == [(n, d is None) for n, d in batch]
    for record, (_name, body) in zip(index.records, batch, strict=True):
        got = data[record.offset : record.offset + record.size]
        assert got == (body or b"")
        assert record.sha256 == hashlib.sha256(got).hexdigest()
    _index, whole = records_of(data)
    expected: dict[str, bytes] = {}
    for name, body in batch:  # the last record of a name wins within a pack
        if body is None:
            expected.pop(name, None)
        else:
            expected[name] = body
    assert whole == expected
    key = pack_key(ts, data)
    assert parse_pack_key(key) == (ts, hashlib.sha256(data).hexdigest())


@settings(max_examples=200)
@given(clocks, records.filter(bool), st.data())
def test_a_truncated_pack_is_refused(
    ts: int, batch: list[tuple[str, bytes | None]], data: st.DataObject
) -> None:
    pack = encode_pack(ts, batch)
    cut = data.draw(st.integers(min_value=0, max_value=len(pack) - 1))
    short = pack[:cut]
    with pytest.raises(PackError):
        records_of(short)
    if cut < index_span(pack):
        with pytest.raises(PackError):
            decode_index(short)


@settings(max_examples=200)
@given(clocks, records.filter(bool), st.data())
def test_a_torn_pack_is_refused_or_its_record_fails_its_digest(
    ts: int, batch: list[tuple[str, bytes | None]], data: st.DataObject
) -> None:
    pack = encode_pack(ts, batch)
    at = data.draw(st.integers(min_value=0, max_value=len(pack) - 1))
    flip = data.draw(st.integers(min_value=1, max_value=255))
    torn = pack[:at] + bytes([pack[at] ^ flip]) + pack[at + 1 :]
    if at < index_span(pack):  # the header or the index: refused as a whole
        with pytest.raises(PackError):
            records_of(torn)
        return
    index, whole = records_of(torn)  # a record's bytes: that record is not returned
    hit = next(r for r in index.records if r.offset <= at < r.offset + r.size)
    assert whole.get(hit.name) != torn[hit.offset : hit.offset + hit.size] or any(
        r.name == hit.name and r.offset > hit.offset for r in index.records
    )
    assert hashlib.sha256(torn[hit.offset : hit.offset + hit.size]).hexdigest() != hit.sha256


@pytest.mark.parametrize(
    "key",
    [
        "packs/0123",
        "packs/0123456789abcdef-" + "g" * 64,
        "other/0123456789abcdef-" + "a" * 64,
        "packs/x/0123456789abcdef-" + "a" * 64,
    ],
)
def test_keys_that_are_not_packs(key: str) -> None:
    assert parse_pack_key(key) is None


def test_trailing_bytes_are_refused() -> None:
    pack = encode_pack(1, [("a", b"x")])
    with pytest.raises(PackError):
        records_of(pack + b"more")
