"""What a lane reused as a whole reads its records with (docs/internals.md "Reusing a lane
as a whole"):

- `PackedStore.get_many`: for any names, what `get` gives each one that is a record of a
  segment, None for the others, whatever the order, the directories, overwrites, large
  objects and sealed segments.
- `CheckpointLoader.load_lane`: every record `load` gives when each key's is PRESENT
  (lane identities, tails and payload sizes mixed, so extracts that repeat the first's
  header and those that do not), None when any one is damaged or missing.
"""

from __future__ import annotations

import hashlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runjournal.adapters.checkpoints import CheckpointLoader, CheckpointRecorder, Workspace
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.packed_store import PackedStore
from runjournal.domain.decisions import CheckpointState, Stage, StageDigests
from runjournal.domain.identity import LaneComponents, step_identity
from runjournal.domain.ports import CheckpointKey, CheckpointRecord, StoreScope

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


# --- `CheckpointLoader.load_lane` against `load`, record by record

COMPONENTS = LaneComponents(*(hashlib.sha256(c.encode()).hexdigest() for c in "abcdefg"))
LIDS = ["1" * 64, "2" * 64]
DEPS = "3" * 64
SCOPE = StoreScope(step_identity(COMPONENTS), DEPS, LIDS[0])
CHUNKS = [hashlib.sha256(bytes([i, 1])).hexdigest() for i in range(6)]


def _record(chunk: str, lid: str, warnings: list[str], size: int) -> CheckpointRecord:
    payload = (chunk.encode() * (size // 64 + 1))[:size]
    return CheckpointRecord(
        codec_id="c",
        lane_identity=lid,
        digests=StageDigests(COMPONENTS, chunk, DEPS),
        output_sha256=hashlib.sha256(payload).hexdigest(),
        payload=payload,
        warnings=warnings,
    )


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    records=st.lists(
        st.tuples(st.sampled_from(LIDS), st.sampled_from([[], ["w"]]), st.sampled_from([9, 3000])),
        min_size=len(CHUNKS),
        max_size=len(CHUNKS),
    ),
    damage=st.one_of(
        st.none(),
        st.tuples(st.sampled_from(["flip", "delete"]), st.integers(0, len(CHUNKS) - 1)),
    ),
    at=st.floats(0, 0.999),
    payload=st.booleans(),
)
def test_load_lane_gives_what_load_gives(tmp_path_factory, records, damage, at, payload) -> None:
    path = tmp_path_factory.mktemp("lane")
    with FsRoot.open(path / "cache", create=True) as root:
        store = PackedStore(root)
        try:
            workspace = Workspace(root, "p", packed=store)
            recorder = CheckpointRecorder(workspace)
            keys = [CheckpointKey("s", "docs/a.md", Stage.EXTRACT, c, SCOPE) for c in CHUNKS]
            for key, (lid, warnings, size) in zip(keys, records, strict=True):
                recorder.write(key, _record(key.chunk, lid, warnings, size))
            if damage is not None:
                how, i = damage
                name = Workspace.checkpoint_name(keys[i])
                if how == "delete":
                    store.remove([name])
                else:
                    data = bytearray(store.get(name) or b"")
                    data[int(at * len(data))] ^= 0x40
                    store.put(name, bytes(data))
            loaded = [CheckpointLoader(workspace).load(k, "c", payload=payload) for k in keys]
            got = CheckpointLoader(workspace).load_lane(
                keys, ["c"] * len(keys), [payload] * len(keys)
            )
            if all(x.state is CheckpointState.PRESENT for x in loaded):
                assert got == [x.record for x in loaded]
            else:
                assert got is None
        finally:
            store.close()
