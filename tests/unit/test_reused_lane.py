"""`PackedStore.get_many`, what a lane reused as a whole reads its records with
(docs/internals.md "Reusing a lane as a whole"): for any names, what `get` gives each
one that is a record of a segment, None for the others, whatever the order, the
directories, overwrites, large objects and sealed segments.
"""

from __future__ import annotations

import hashlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.packed_store import PackedStore

DIRS = ["ws/p/steps/a/scope/extract", "ws/p/steps/a/scope/" + "ab" * 32, "ws/p/steps/b"]
LEAVES = [hashlib.sha256(bytes([i])).hexdigest() + ".ckpt" for i in range(6)] + ["merge.ckpt"]
NAMES = [f"{d}/{leaf}" for d in DIRS for leaf in LEAVES]


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    writes=st.lists(
        st.tuples(st.sampled_from(NAMES), st.integers(0, 3), st.sampled_from([40, 300, 5000])),
        max_size=25,
    ),
    asked=st.lists(st.sampled_from([*NAMES, "ws/p/none/x.ckpt"]), max_size=20),
    seal=st.booleans(),
)
def test_get_many_gives_what_get_gives(tmp_path_factory, writes, asked, seal) -> None:
    path = tmp_path_factory.mktemp("packed")
    with FsRoot.open(path / "cache", create=True) as root:
        # a small large-object threshold and seal bound: both kinds of entries show up
        store = PackedStore(root, large=4096, seal_min=1 if seal else None)
        try:
            for name, version, size in writes:
                seed = hashlib.sha256(f"{name}/{version}".encode()).digest()
                store.put(name, (seed * (size // 32 + 1))[:size])
            reader = PackedStore(root, large=4096, seal_min=1 if seal else None)
            try:
                got = reader.get_many(list(asked))
                last = {name: size for name, _, size in writes}  # the last write wins
                for name, data in zip(asked, got, strict=True):
                    if name in last and last[name] < 4096:  # a record of a segment
                        assert data is not None and data == reader.get(name), name
                    elif data is not None:  # never bytes another name does not give
                        assert data == reader.get(name), name
                    else:
                        assert name not in last or last[name] >= 4096, name
            finally:
                reader.close()
        finally:
            store.close()
