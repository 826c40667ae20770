"""Envelope version 3: a fixed binary header naming a shared components entry
(docs/internals.md "Envelope format"), and versions 2 and 1 still read beside it."""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.adapters.checkpoints import (
    COMPONENTS_DIR,
    ENVELOPE_VERSION,
    RAW_PAYLOAD_MAX,
    SMALL_FRAME_MIN,
    CheckpointLoader,
    CheckpointRecorder,
    Compression,
    EnvelopeCodec,
    EnvelopeRejected,
    SharedComponents,
    Workspace,
    _scope_digest,
    decode_shared,
    envelope_facts,
)
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.packed_store import PackedStore
from runjournal.domain.decisions import CheckpointState, PredecessorState, Stage, StageDigests
from runjournal.domain.identity import LaneComponents
from runjournal.domain.llm import LLMUsage
from runjournal.domain.ports import CheckpointKey, CheckpointRecord, Provenance
from support.checkpoint_records import CODEC, IDENTITY, record_maker

PIPELINE = "glossary"
STEP = "terms"
LANE = "docs/a b.md"
CHUNK = hashlib.sha256(b"docs/a b.md\x00hello").hexdigest()
OTHER_CHUNK = hashlib.sha256(b"docs/a b.md\x00world").hexdigest()
EXTRACT = CheckpointKey(STEP, LANE, Stage.EXTRACT, CHUNK)
MERGE = CheckpointKey(STEP, LANE, Stage.MERGE)
NORMALIZE = CheckpointKey(STEP, LANE, Stage.NORMALIZE)
COMPONENTS = LaneComponents(*(hashlib.sha256(c.encode()).hexdigest() for c in "ab"), *[""] * 5)

hexdigest = st.text("0123456789abcdef", min_size=64, max_size=64)
maybe_digest = st.one_of(st.just(""), hexdigest)
texts = st.text(max_size=40)


make_record = record_maker(COMPONENTS)


def provenance_for(payload: bytes, key: CheckpointKey = NORMALIZE) -> Provenance:
    """The provenance the runner gives a normalize: the stage's own step, lane and payload."""
    return Provenance(
        step=key.step,
        lane=key.lane,
        module_fingerprint="builtin.terms@1",
        kind="terms",
        schema="terms/v1",
        media_type="application/json",
        sha256=hashlib.sha256(payload).hexdigest(),
        size=len(payload),
    )


def file_of(ws_path: Path, key: CheckpointKey) -> Path:
    return ws_path / Workspace.checkpoint_name(key)


codec = EnvelopeCodec()
BIG = b'{"terms":[' + b'"repeated term",' * 500 + b'"end"]}'


def lookup_of(*shared: bytes | None):
    """A shared-components lookup over the given entries (what the loader reads)."""
    entries = {hashlib.sha256(s).digest(): s for s in shared if s is not None}

    def lookup(ref: bytes) -> SharedComponents | None:
        data = entries.get(ref)
        return None if data is None else decode_shared(data, ref)

    return lookup


def open3(envelope: bytes, key: CheckpointKey, shared: bytes | None):
    return codec.open(envelope, key, lookup_of(shared))


def resign3(envelope: bytes, key: CheckpointKey) -> bytes:
    """Recompute a version 3 trailing digest, so only the checks after it can object."""
    body = envelope[:-32]
    return body + _scope_digest(key, body)


def with_header(envelope: bytes, key: CheckpointKey, header: bytes) -> bytes:
    """The envelope with another header (its length updated), re-signed for `key`."""
    size = struct.unpack_from(">I", envelope, 6)[0]
    body = envelope[:6] + struct.pack(">I", len(header)) + header + envelope[10 + size : -32]
    return body + _scope_digest(key, body)


def header_of(envelope: bytes) -> bytes:
    size = struct.unpack_from(">I", envelope, 6)[0]
    return envelope[10 : 10 + size]


usages = st.one_of(
    st.none(),
    st.builds(
        LLMUsage,
        calls=st.integers(0, 2**31),
        attempts=st.integers(1, 2**31),
        prompt_tokens=st.integers(0, 2**40),
        completion_tokens=st.integers(0, 2**40),
        cost=st.floats(0, 1e6, allow_nan=False),
        cached_tokens=st.integers(0, 2**40),
    ),
)


@st.composite
def v3_records(draw: st.DrawFn) -> tuple[CheckpointKey, CheckpointRecord]:
    """A record of the shape the runner writes (digests empty or 64 hex), with a
    provenance that is the stage's own, another, or none, and maybe LLM usage."""
    key = draw(st.sampled_from([EXTRACT, MERGE, NORMALIZE]))
    payload = draw(st.one_of(st.binary(max_size=300), st.just(BIG)))
    other = st.builds(
        Provenance,
        step=st.sampled_from([STEP, "other"]),
        lane=texts,
        module_fingerprint=texts,
        kind=texts,
        schema=texts,
        media_type=texts,
        sha256=hexdigest,
        size=st.integers(0, 2**40),
    )
    record = make_record(
        payload,
        codec_id=draw(texts),
        lane_identity=draw(maybe_digest),
        warnings=draw(st.lists(st.text(max_size=60), max_size=3)),
        provenance=draw(st.one_of(st.none(), other)),
        digests=StageDigests(
            LaneComponents(*(draw(maybe_digest) for _ in range(7))),
            draw(maybe_digest),
            draw(maybe_digest),
        ),
    )
    own = Provenance(
        step=key.step,
        lane=key.lane,
        module_fingerprint=draw(texts),
        kind=draw(texts),
        schema=draw(texts),
        media_type=draw(texts),
        sha256=hashlib.sha256(payload).hexdigest(),
        size=len(payload),
    )
    provenance = draw(st.sampled_from([None, own, record.provenance]))
    digests = record.digests
    if key.chunk and draw(st.booleans()):
        digests = StageDigests(digests.components, key.chunk, digests.dependencies)
    return key, msgspec.structs.replace(
        record,
        provenance=provenance,
        digests=digests,
        usage=draw(usages),
    )


class TestIndexFacts:
    """`envelope_facts`: what the packed index keeps of an envelope (docs/internals.md
    "Decision facts in the index"), read back by `open_facts` as `open` reads it."""

    @settings(max_examples=300, deadline=None)
    @given(case=v3_records(), compress=st.booleans())
    def test_facts_round_trip(self, case, compress: bool) -> None:
        key, record = case
        sealed = codec.seal(key, record, compress=compress)
        facts = envelope_facts(sealed.data)
        assert facts is not None and facts[0] == ENVELOPE_VERSION
        assert facts[1:] == header_of(sealed.data)
        lookup = lookup_of(sealed.shared)
        from_facts = codec.open_facts(facts, key, lookup)
        header, _ = codec.open(sealed.data, key, lookup, payload=False)
        assert from_facts == header
        assert from_facts.digests == record.digests
        assert (from_facts.usage or None) == (record.usage or None)
        assert from_facts.warnings == record.warnings
        assert from_facts.provenance == record.provenance
        with pytest.raises(EnvelopeRejected):  # its shared components are needed too
            codec.open_facts(facts, key, lookup_of())

    def test_no_facts_for_another_version(self) -> None:
        record = make_record()
        assert envelope_facts(codec.encode(NORMALIZE, record)) is None
        assert envelope_facts(b"RJCK") is None
        sealed = codec.seal(NORMALIZE, record)
        facts = envelope_facts(sealed.data)
        assert facts is not None
        for bad in (b"\x02" + facts[1:], facts[:20], b""):
            with pytest.raises(EnvelopeRejected):
                codec.open_facts(bad, NORMALIZE, lookup_of(sealed.shared))


class TestRoundTrip:
    @settings(max_examples=300, deadline=None)
    @given(case=v3_records())
    def test_round_trip(self, case: tuple[CheckpointKey, CheckpointRecord]) -> None:
        key, record = case
        sealed = codec.seal(key, record)
        assert int.from_bytes(sealed.data[4:6], "big") == ENVELOPE_VERSION == 3
        assert sealed.shared_name == f"{COMPONENTS_DIR}/{hashlib.sha256(sealed.shared).hexdigest()}"
        header, payload = open3(sealed.data, key, sealed.shared)
        assert payload == record.payload
        assert header.codec_id == record.codec_id
        assert header.lane_identity == record.lane_identity
        assert header.digests == record.digests
        assert header.output_sha256 == record.output_sha256
        assert header.warnings == record.warnings
        assert header.provenance == record.provenance
        assert (header.usage or None) == (record.usage or None)
        assert header.raw_size == len(record.payload)
        assert (header.step, header.lane, header.stage, header.chunk) == (
            key.step,
            key.lane,
            Stage(key.stage),
            key.chunk,
        )
        if len(record.payload) > RAW_PAYLOAD_MAX:
            assert header.compression is Compression.ZSTD
        elif len(record.payload) <= SMALL_FRAME_MIN:
            assert header.compression is Compression.NONE

    @settings(max_examples=100, deadline=None)
    @given(case=v3_records())
    def test_encoding_is_deterministic(self, case: tuple[CheckpointKey, CheckpointRecord]) -> None:
        key, record = case
        assert codec.seal(key, record) == EnvelopeCodec().seal(key, record)

    @settings(max_examples=100, deadline=None)
    @given(
        lane_identity=st.one_of(maybe_digest, texts),
        input_digest=st.one_of(maybe_digest, texts),
        dependencies=st.one_of(maybe_digest, texts),
    )
    def test_digests_without_a_fixed_form_fall_back_to_version_2(
        self, lane_identity: str, input_digest: str, dependencies: str
    ) -> None:
        record = make_record(
            lane_identity=lane_identity,
            digests=StageDigests(COMPONENTS, input_digest, dependencies),
        )
        sealed = codec.seal(MERGE, record)
        fits = all(
            not d or (len(d) == 64 and set(d) <= set("0123456789abcdef"))
            for d in (lane_identity, input_digest, dependencies)
        )
        assert int.from_bytes(sealed.data[4:6], "big") == (3 if fits else 2)
        assert (sealed.shared is None) is not fits
        header, payload = open3(sealed.data, MERGE, sealed.shared)
        assert (header.lane_identity, header.digests) == (record.lane_identity, record.digests)
        assert payload == record.payload

    def test_an_extract_header_is_a_few_fixed_fields(self) -> None:
        record = make_record(b"[]", warnings=[], digests=StageDigests(COMPONENTS, CHUNK, "3" * 64))
        sealed = codec.seal(EXTRACT, record)
        # flags, shared ref, lane identity, D, output digest, two sizes: the input is the
        # key's chunk id and is not stored
        assert len(header_of(sealed.data)) == 1 + 32 * 4 + 8
        assert len(sealed.data) == 10 + 137 + 2 + 32
        v2 = codec.encode(EXTRACT, record)
        assert len(v2) > 4 * len(sealed.data)

    def test_a_small_payload_is_compressed_only_when_that_saves_a_quarter(self) -> None:
        repetitive = b'{"text":"journal","key":"journal","kind":"bigram","count":2}' * 4
        assert SMALL_FRAME_MIN < len(repetitive) <= RAW_PAYLOAD_MAX
        noise = os.urandom(SMALL_FRAME_MIN + 50)
        tiny = b'{"a":"a","b":"a","c":"a","d":"a"}' * 3
        assert len(tiny) <= SMALL_FRAME_MIN
        for payload, compressed in ((repetitive, True), (noise, False), (tiny, False)):
            sealed = codec.seal(MERGE, make_record(payload))
            header, opened = open3(sealed.data, MERGE, sealed.shared)
            assert opened == payload
            assert (header.compression is Compression.ZSTD) is compressed
            if compressed:
                assert header.payload_size * 4 <= len(payload) * 3

    def test_a_record_of_the_same_step_shares_its_components_entry(self) -> None:
        a = codec.seal(EXTRACT, make_record(b"[1]", provenance=provenance_for(b"[1]", EXTRACT)))
        b = codec.seal(MERGE, make_record(b"[2]", provenance=provenance_for(b"[2]", MERGE)))
        c = codec.seal(MERGE, make_record(b"[2]", codec_id="another"))
        assert a.shared_name == b.shared_name != c.shared_name


class TestVerification:
    """Every check of docs/internals.md "Verification order and verdicts", on version 3."""

    @pytest.mark.parametrize("payload", [b"[1,2,3]", BIG], ids=["as it is", "zstd"])
    def test_every_bit_flip_is_corrupt(self, payload: bytes) -> None:
        record = make_record(payload, warnings=[])
        sealed = codec.seal(MERGE, record)
        assert len(sealed.data) < 1200
        for index in range(len(sealed.data)):
            for bit in range(8):
                flipped = bytearray(sealed.data)
                flipped[index] ^= 1 << bit
                with pytest.raises(EnvelopeRejected) as caught:
                    open3(bytes(flipped), MERGE, sealed.shared)
                assert caught.value.state is CheckpointState.CORRUPT, (index, bit)

    def test_every_bit_flip_of_the_shared_entry_is_corrupt(self) -> None:
        sealed = codec.seal(MERGE, make_record())
        ref = hashlib.sha256(sealed.shared).digest()
        for index in range(len(sealed.shared)):
            flipped = bytearray(sealed.shared)
            flipped[index] ^= 0x01
            with pytest.raises(EnvelopeRejected) as caught:
                codec.open(sealed.data, MERGE, lambda r, f=bytes(flipped): decode_shared(f, r))
            assert caught.value.state is CheckpointState.CORRUPT, index
        assert codec.open(sealed.data, MERGE, lambda r: decode_shared(sealed.shared, r))
        assert ref == bytes.fromhex(sealed.shared_name.rsplit("/", 1)[1])

    def test_a_missing_shared_entry_is_corrupt(self) -> None:
        sealed = codec.seal(MERGE, make_record())
        for lookup in (None, lookup_of()):
            with pytest.raises(EnvelopeRejected) as caught:
                codec.open(sealed.data, MERGE, lookup)
            assert caught.value.state is CheckpointState.CORRUPT

    @pytest.mark.parametrize(
        "other",
        [
            CheckpointKey(STEP, LANE, Stage.EXTRACT, OTHER_CHUNK),
            CheckpointKey(STEP, "docs/other.md", Stage.EXTRACT, CHUNK),
            CheckpointKey("other", LANE, Stage.EXTRACT, CHUNK),
            CheckpointKey(STEP, LANE, Stage.MERGE),
        ],
        ids=["chunk", "lane", "step", "stage"],
    )
    def test_an_envelope_opened_at_another_position_is_corrupt(self, other) -> None:
        sealed = codec.seal(EXTRACT, make_record())
        assert open3(sealed.data, EXTRACT, sealed.shared)
        with pytest.raises(EnvelopeRejected) as caught:
            open3(sealed.data, other, sealed.shared)
        assert caught.value.state is CheckpointState.CORRUPT

    def test_truncations_are_corrupt(self) -> None:
        sealed = codec.seal(NORMALIZE, make_record(provenance=provenance_for(b"x")))
        for length in range(len(sealed.data)):
            with pytest.raises(EnvelopeRejected) as caught:
                open3(sealed.data[:length], NORMALIZE, sealed.shared)
            assert caught.value.state is CheckpointState.CORRUPT, length

    def test_an_intact_envelope_of_an_unknown_version_is_schema_unsupported(self) -> None:
        sealed = codec.seal(MERGE, make_record())
        newer = bytearray(sealed.data)
        newer[4:6] = (ENVELOPE_VERSION + 1).to_bytes(2, "big")
        body = bytes(newer[:-32])
        with pytest.raises(EnvelopeRejected) as caught:
            open3(body + hashlib.sha256(body).digest(), MERGE, sealed.shared)
        assert caught.value.state is CheckpointState.SCHEMA_UNSUPPORTED

    def test_a_version_3_body_signed_without_its_position_is_corrupt(self) -> None:
        sealed = codec.seal(MERGE, make_record())
        body = sealed.data[:-32]
        with pytest.raises(EnvelopeRejected) as caught:
            open3(body + hashlib.sha256(body).digest(), MERGE, sealed.shared)
        assert caught.value.state is CheckpointState.CORRUPT

    @staticmethod
    def _mutations(header: bytes) -> dict[str, bytes]:
        flags = header[0]
        out_at = 1 + 32 + 32  # flags, ref, lane identity; the input's 32 bytes, then output
        return {
            "unknown flag": bytes((flags | 0x80,)) + header[1:],
            "both input flags": bytes((flags | 0x04 | 0x08,)) + header[1:],
            "input named by a chunk a merge has not": bytes(((flags & ~0x08) | 0x04,))
            + header[1:33]
            + header[33:65]
            + header[97:],
            "lane identity flag dropped": bytes((flags & ~0x02,)) + header[1:],
            "header cut short": header[:20],
            "extra bytes without a tail": header + b"\x90",
            "wrong shared ref": header[:1] + b"\x00" * 32 + header[33:],
            "output digest": header[: out_at + 32] + b"\x00" * 32 + header[out_at + 64 :],
            "payload size": header[:-8] + struct.pack(">II", 1, 1),
            "raw size": header[:-4] + struct.pack(">I", 3),
            "producer without one": bytes((flags | 0x20,)) + header[1:],
            "undecodable tail": bytes((flags | 0x40,)) + header[1:] + b"\xc1",
            "tail of another shape": bytes((flags | 0x40,)) + header[1:] + b"\x93\x01\x02\x03",
        }

    def test_each_post_digest_check_rejects(self) -> None:
        # merge: lane identity and input stored, no D, no tail
        record = make_record(b"[1,2]", warnings=[])
        sealed = codec.seal(MERGE, record)
        header = header_of(sealed.data)
        assert header[0] == 0x02 | 0x08
        for name, changed in self._mutations(header).items():
            tampered = with_header(sealed.data, MERGE, changed)
            with pytest.raises(EnvelopeRejected) as caught:
                open3(tampered, MERGE, sealed.shared)
            assert caught.value.state is CheckpointState.CORRUPT, name

    def test_a_payload_that_is_not_zstd_is_corrupt(self) -> None:
        sealed = codec.seal(MERGE, make_record(os.urandom(RAW_PAYLOAD_MAX + 1)))
        size = struct.unpack_from(">I", sealed.data, 6)[0]
        start = 10 + size
        garbage = bytes(len(sealed.data) - 32 - start)
        tampered = resign3(sealed.data[:start] + garbage + sealed.data[-32:], MERGE)
        with pytest.raises(EnvelopeRejected) as caught:
            open3(tampered, MERGE, sealed.shared)
        assert caught.value.state is CheckpointState.CORRUPT

    def test_the_payload_digest_is_checked(self) -> None:
        sealed = codec.seal(MERGE, make_record(b"[1,2,3]"))
        tampered = bytearray(sealed.data)
        tampered[-33] ^= 0x01  # the payload's last byte, then signed again
        with pytest.raises(EnvelopeRejected) as caught:
            open3(resign3(bytes(tampered), MERGE), MERGE, sealed.shared)
        assert caught.value.state is CheckpointState.CORRUPT

    @settings(max_examples=200, deadline=None)
    @given(header=st.binary(max_size=200), payload=st.binary(max_size=40))
    def test_signed_arbitrary_headers_never_raise_anything_else(
        self, header: bytes, payload: bytes
    ) -> None:
        sealed = codec.seal(MERGE, make_record())
        body = b"RJCK" + (3).to_bytes(2, "big") + struct.pack(">I", len(header)) + header
        body += payload
        try:
            open3(body + _scope_digest(MERGE, body), MERGE, sealed.shared)
        except EnvelopeRejected as rejected:
            assert rejected.state is CheckpointState.CORRUPT


@pytest.fixture
def cache(tmp_path: Path):
    with FsRoot.open(tmp_path / "cache", create=True) as root:
        packed = PackedStore(root)
        try:
            yield root, packed
        finally:
            packed.close()


class TestThroughTheStore:
    def test_the_recorder_writes_version_3_and_one_shared_entry(self, cache) -> None:
        root, packed = cache
        workspace = Workspace.in_cache(root, PIPELINE, packed=packed)
        recorder = CheckpointRecorder(workspace)
        chunks = [hashlib.sha256(bytes([i])).hexdigest() for i in range(20)]
        for chunk in chunks:
            key = CheckpointKey(STEP, LANE, Stage.EXTRACT, chunk)
            recorder.write(key, make_record(chunk.encode()))
        names = packed.names(f"workspaces/{PIPELINE}/{COMPONENTS_DIR}/")
        assert len(names) == 1
        loader = CheckpointLoader(workspace)
        for chunk in chunks:
            key = CheckpointKey(STEP, LANE, Stage.EXTRACT, chunk)
            data = packed.get(f"workspaces/{PIPELINE}/" + Workspace.checkpoint_name(key))
            assert int.from_bytes(data[4:6], "big") == 3
            loaded = loader.load(key, CODEC)
            assert loaded.state is CheckpointState.PRESENT
            assert loaded.record == make_record(chunk.encode())

    def test_a_lost_shared_entry_makes_its_envelopes_corrupt_and_a_rewrite_heals(
        self, cache
    ) -> None:
        root, packed = cache
        workspace = Workspace.in_cache(root, PIPELINE, packed=packed)
        CheckpointRecorder(workspace).write(NORMALIZE, make_record())
        [shared] = packed.names(f"workspaces/{PIPELINE}/{COMPONENTS_DIR}/")
        packed.remove([shared])
        assert CheckpointLoader(workspace).load(NORMALIZE, CODEC).state is CheckpointState.CORRUPT
        restored = CheckpointLoader(workspace).load_accepted_artifact(STEP, LANE, IDENTITY, CODEC)
        assert restored.state is PredecessorState.CORRUPT
        packed.put(shared, b"damaged")
        assert CheckpointLoader(workspace).load(NORMALIZE, CODEC).state is CheckpointState.CORRUPT
        CheckpointRecorder(workspace).write(NORMALIZE, make_record())  # a recomputation
        assert CheckpointLoader(workspace).load(NORMALIZE, CODEC).state is CheckpointState.PRESENT

    @pytest.mark.parametrize("version", [1, 2])
    def test_older_envelopes_are_still_read(self, cache, version: int) -> None:
        root, packed = cache
        workspace = Workspace.in_cache(root, PIPELINE, packed=packed)
        recorder = CheckpointRecorder(workspace)
        recorder.write(NORMALIZE, make_record())  # the manifest, a v3 file
        record = make_record(BIG, provenance=provenance_for(BIG))
        old = bytearray(codec.encode(NORMALIZE, record))
        assert int.from_bytes(old[4:6], "big") == 2
        old[4:6] = version.to_bytes(2, "big")  # a compressed v2 header is a v1 header
        body = bytes(old[:-32])
        name = f"workspaces/{PIPELINE}/" + Workspace.checkpoint_name(NORMALIZE)
        packed.put(name, body + hashlib.sha256(body).digest())
        loaded = CheckpointLoader(workspace).load(NORMALIZE, CODEC)
        assert loaded.state is CheckpointState.PRESENT and loaded.record == record

    def test_a_version_3_file_moved_to_another_scope_is_corrupt(self, tmp_path: Path) -> None:
        ws = tmp_path / "workspaces" / PIPELINE
        with FsRoot.open(ws, create=True) as root:
            workspace = Workspace(root, PIPELINE)
            recorder = CheckpointRecorder(workspace)
            recorder.write(EXTRACT, make_record())
            recorder.write(MERGE, make_record())
            other = CheckpointKey(STEP, LANE, Stage.EXTRACT, OTHER_CHUNK)
            file_of(ws, other).write_bytes(file_of(ws, EXTRACT).read_bytes())
            file_of(ws, NORMALIZE).write_bytes(file_of(ws, MERGE).read_bytes())
            loader = CheckpointLoader(workspace)
            assert loader.load(EXTRACT, CODEC).state is CheckpointState.PRESENT
            assert loader.load(other, CODEC).state is CheckpointState.CORRUPT
            assert loader.load(NORMALIZE, CODEC).state is CheckpointState.CORRUPT
