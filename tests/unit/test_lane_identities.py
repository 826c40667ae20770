"""`LaneIdentities` (domain/identity.py): a run's lane identities held as raw digests
(issue 29: peak RSS) give the invocation identity the list of hex strings gave."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st
from runjournal.domain.identity import LaneIdentities, digest_of, invocation_identity

_hex = st.binary(min_size=32, max_size=32).map(bytes.hex)
_any = st.one_of(_hex, st.text(max_size=70), _hex.map(str.upper))


@given(st.lists(_hex, max_size=40))
def test_raw_digests_give_the_invocation_identity_of_their_hex(ids: list[str]) -> None:
    ids = ids + ids[:2]  # a lane identity may repeat (two documents of the same bytes)
    held = LaneIdentities(ids)
    assert held.identity() == invocation_identity(held) == digest_of(sorted(ids))
    assert len(held) == len(ids)


@given(st.lists(_any, max_size=20))
def test_any_other_identity_is_kept_as_it_is(ids: list[str]) -> None:
    held = LaneIdentities()
    for identity in ids:
        held.append(identity)
    assert held.identity() == digest_of(sorted(ids)) and len(held) == len(ids)


def test_many_lanes_stream_past_one_batch() -> None:
    ids = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(10_000)]
    assert LaneIdentities(ids).identity() == digest_of(sorted(ids))
