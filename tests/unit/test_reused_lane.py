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
from runjournal.domain.llm import LLMUsage
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


USAGES = [None, LLMUsage(calls=1, attempts=1, prompt_tokens=90, completion_tokens=3)]
USAGES.append(LLMUsage(calls=1, attempts=2, prompt_tokens=70_000, completion_tokens=1, cost=0.5))


def _record(
    chunk: str, lid: str, warnings: list[str], size: int, usage: LLMUsage | None = None
) -> CheckpointRecord:
    payload = (chunk.encode() * (size // 64 + 1))[:size]
    return CheckpointRecord(
        codec_id="c",
        lane_identity=lid,
        digests=StageDigests(COMPONENTS, chunk, DEPS),
        output_sha256=hashlib.sha256(payload).hexdigest(),
        payload=payload,
        warnings=warnings,
        usage=usage,
    )


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    records=st.lists(
        st.tuples(
            st.sampled_from(LIDS),
            st.sampled_from([[], ["w"], ["a longer warning"]]),
            st.sampled_from([9, 3000]),
            # an LLM extract's usage: a tail of its own size (issue 29: such extracts
            # repeat the first's header too, but for their header size and tail)
            st.sampled_from(USAGES),
        ),
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
            for key, (lid, warnings, size, usage) in zip(keys, records, strict=True):
                recorder.write(key, _record(key.chunk, lid, warnings, size, usage))
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


def test_llm_extracts_repeat_the_first_header_and_a_damaged_tail_is_still_found(
    tmp_path, monkeypatch
) -> None:
    """Extracts with a tail (an LLM extract's usage) are checked against the lane's first
    by their own trailing digest, without a full open (issue 29); a byte flipped in one's
    tail (its digest no longer holds) makes the lane walk."""
    from runjournal.adapters.checkpoints import EnvelopeCodec

    with FsRoot.open(tmp_path / "cache", create=True) as root:
        store = PackedStore(root)
        try:
            workspace = Workspace(root, "p", packed=store)
            recorder = CheckpointRecorder(workspace)
            keys = [CheckpointKey("s", "docs/a.md", Stage.EXTRACT, c, SCOPE) for c in CHUNKS]
            for i, key in enumerate(keys):
                usage = LLMUsage(calls=1, attempts=1, prompt_tokens=10**i, completion_tokens=i)
                recorder.write(key, _record(key.chunk, LIDS[0], ["w"] * (i % 2), 300, usage))
            opened = []
            real_open = EnvelopeCodec.open

            def counting(self, *args, **kwargs):
                opened.append(1)
                return real_open(self, *args, **kwargs)

            monkeypatch.setattr(EnvelopeCodec, "open", counting)
            codecs, payloads = ["c"] * len(keys), [False] * len(keys)
            got = CheckpointLoader(workspace).load_lane(keys, codecs, payloads)
            assert len(opened) == 1
            loaded = [CheckpointLoader(workspace).load(k, "c", payload=False) for k in keys]
            assert got == [x.record for x in loaded]
            assert [r.usage.prompt_tokens for r in got] == [10**i for i in range(len(keys))]
            name = Workspace.checkpoint_name(keys[3])
            data = bytearray(store.get(name) or b"")
            data[data.index(b"w", 147)] ^= 0x01  # in the tail (after the fixed 147 bytes)
            store.put(name, bytes(data))
            assert CheckpointLoader(workspace).load_lane(keys, codecs, payloads) is None
            assert CheckpointLoader(workspace).load(keys[3], "c").state is CheckpointState.CORRUPT
        finally:
            store.close()


def test_one_decompressor_per_thread_reads_blocks_after_a_damaged_one() -> None:
    """Sealed blocks share this thread's zstd decompressor (issue 29): a frame that
    does not decompress leaves it fit for the next block."""
    import zstandard
    from runjournal.adapters.packed_store import _BLOCK, _MAGIC_BLOCK, _read_block_bytes

    raw = b"records " * 4000
    frame = zstandard.ZstdCompressor(level=3).compress(raw)
    good = _BLOCK.pack(_MAGIC_BLOCK, len(frame), len(raw)) + frame
    assert _read_block_bytes(good) == raw
    half = _BLOCK.pack(_MAGIC_BLOCK, len(frame) // 2, len(raw)) + frame[: len(frame) // 2]
    assert _read_block_bytes(half) is None
    assert _read_block_bytes(good) == raw
