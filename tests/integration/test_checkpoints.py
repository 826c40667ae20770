"""The checkpoint store: envelope, workspace manifest, loader verdicts and recorder writes."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import struct
import threading
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runjournal.adapters import fsroot
from runjournal.adapters.checkpoints import (
    ENVELOPE_VERSION,
    MAGIC,
    RAW_PAYLOAD_MAX,
    WORKSPACE_MANIFEST,
    CheckpointLoader,
    CheckpointRecorder,
    Compression,
    EnvelopeCodec,
    EnvelopeRejected,
    Workspace,
    WorkspaceState,
)
from runjournal.adapters.fsroot import FsIOError, FsRoot, NoSpace, PermissionDeniedError
from runjournal.domain.decisions import CheckpointState, PredecessorState, Stage, StageDigests
from runjournal.domain.identity import LaneComponents
from runjournal.domain.ports import (
    CheckpointKey,
    CheckpointRecord,
    CheckpointWriteError,
    Provenance,
)
from support.checkpoint_records import CODEC, IDENTITY, record_maker
from support.faulty_fs import Fault, faulty_root_class

PIPELINE = "glossary"
STEP = "terms"
LANE = "docs/a b.md"
CHUNK = hashlib.sha256(b"docs/a b.md\x00hello").hexdigest()
OTHER_CHUNK = hashlib.sha256(b"docs/a b.md\x00world").hexdigest()
EXTRACT = CheckpointKey(STEP, LANE, Stage.EXTRACT, CHUNK)
MERGE = CheckpointKey(STEP, LANE, Stage.MERGE)
NORMALIZE = CheckpointKey(STEP, LANE, Stage.NORMALIZE)

COMPONENTS = LaneComponents(*(hashlib.sha256(c.encode()).hexdigest() for c in "abcdefg"))


make_record = record_maker(COMPONENTS)


def provenance_for(record_payload: bytes) -> Provenance:
    return Provenance(
        step=STEP,
        lane=LANE,
        module_fingerprint="builtin.terms@1",
        kind="terms",
        schema="terms/v1",
        media_type="application/json",
        sha256=hashlib.sha256(record_payload).hexdigest(),
        size=len(record_payload),
    )


def resign(envelope: bytes) -> bytes:
    """Recompute the trailing digest, so only the checks after it can object."""
    body = envelope[:-32]
    return body + hashlib.sha256(body).digest()


def rebuild(envelope: bytes, **header_changes: object) -> bytes:
    """Re-encode the header with changed fields and re-sign the envelope."""
    header_size = struct.unpack_from(">I", envelope, 6)[0]
    header = msgspec.msgpack.decode(envelope[10 : 10 + header_size])
    header.update(header_changes)
    encoded = msgspec.msgpack.encode(header)
    body = envelope[:6] + struct.pack(">I", len(encoded)) + encoded
    body += envelope[10 + header_size : -32]
    return body + hashlib.sha256(body).digest()


def tree(path: Path) -> dict[str, tuple[int, int, bytes | None]]:
    """Every entry below `path` with its mode, mtime and (for files) content."""
    out: dict[str, tuple[int, int, bytes | None]] = {}
    for entry in sorted(path.rglob("*")):
        info = entry.lstat()
        data = entry.read_bytes() if stat.S_ISREG(info.st_mode) else None
        out[str(entry.relative_to(path))] = (info.st_mode, info.st_mtime_ns, data)
    return out


@pytest.fixture
def ws_path(tmp_path: Path) -> Path:
    return tmp_path / "workspaces" / PIPELINE


@pytest.fixture
def faults() -> list[Fault]:
    """Faults of the workspace's fake root (`support.faulty_fs`), read at each call."""
    return []


@pytest.fixture
def root(ws_path: Path, faults: list[Fault]):
    with faulty_root_class(faults).open(ws_path, create=True) as opened:
        yield opened


@pytest.fixture
def workspace(root: FsRoot) -> Workspace:
    return Workspace(root, PIPELINE)


@pytest.fixture
def recorder(workspace: Workspace) -> CheckpointRecorder:
    return CheckpointRecorder(workspace)


@pytest.fixture
def loader(workspace: Workspace) -> CheckpointLoader:
    return CheckpointLoader(workspace)


def file_of(ws_path: Path, key: CheckpointKey) -> Path:
    return ws_path / Workspace.checkpoint_name(key)


codec = EnvelopeCodec()

hexdigest = st.text("0123456789abcdef", min_size=64, max_size=64)
maybe_digest = st.one_of(st.just(""), hexdigest)
texts = st.text(max_size=40)


@st.composite
def records(draw: st.DrawFn) -> CheckpointRecord:
    payload = draw(st.binary(max_size=2048))
    components = LaneComponents(*(draw(maybe_digest) for _ in range(7)))
    provenance = draw(
        st.one_of(
            st.none(),
            st.builds(
                Provenance,
                step=st.just(STEP),
                lane=texts,
                module_fingerprint=texts,
                kind=texts,
                schema=texts,
                media_type=texts,
                sha256=hexdigest,
                size=st.integers(0, 2**40),
            ),
        )
    )
    return make_record(
        payload,
        codec_id=draw(texts),
        lane_identity=draw(maybe_digest),
        warnings=draw(st.lists(st.text(max_size=60), max_size=5)),
        provenance=provenance,
        digests=StageDigests(components, draw(maybe_digest), draw(maybe_digest)),
    )


class TestEnvelope:
    @settings(max_examples=200, deadline=None)
    @given(record=records(), key=st.sampled_from([EXTRACT, MERGE, NORMALIZE]))
    def test_round_trip(self, record: CheckpointRecord, key: CheckpointKey) -> None:
        envelope = codec.encode(key, record)
        assert envelope[:4] == MAGIC
        header, payload = codec.open(envelope, key)
        assert payload == record.payload
        assert header.codec_id == record.codec_id
        assert header.lane_identity == record.lane_identity
        assert header.digests == record.digests
        assert header.warnings == record.warnings
        assert header.provenance == record.provenance
        assert header.raw_size == len(record.payload)

    @settings(max_examples=200, deadline=None)
    @given(record=records())
    def test_encoding_is_deterministic(self, record: CheckpointRecord) -> None:
        assert codec.encode(NORMALIZE, record) == EnvelopeCodec().encode(NORMALIZE, record)

    @pytest.mark.parametrize(
        "payload",
        [b"[1,2,3]", b'{"terms":[' + b'"repeated term",' * 500 + b'"end"]}'],
        ids=["stored as it is", "zstd frame"],
    )
    def test_every_bit_flip_is_rejected_by_type(self, payload: bytes) -> None:
        envelope = codec.encode(MERGE, make_record(payload, warnings=[]))
        assert len(envelope) < 1200
        for index in range(len(envelope)):
            for bit in range(8):
                flipped = bytearray(envelope)
                flipped[index] ^= 1 << bit
                with pytest.raises(EnvelopeRejected) as caught:
                    codec.open(bytes(flipped), MERGE)
                # The digest comes first: any flipped byte, the version's too, is corrupt.
                assert caught.value.state is CheckpointState.CORRUPT, (index, bit)

    def test_every_byte_flip_on_disk_is_a_verdict_never_an_exception(
        self, recorder: CheckpointRecorder, loader: CheckpointLoader, ws_path: Path
    ) -> None:
        recorder.write(NORMALIZE, make_record(b'"x"', warnings=[]))
        path = file_of(ws_path, NORMALIZE)
        good = path.read_bytes()
        for index in range(len(good)):
            flipped = bytearray(good)
            flipped[index] ^= 0xFF
            path.write_bytes(bytes(flipped))
            state = loader.load(NORMALIZE, CODEC).state
            assert state is CheckpointState.CORRUPT, index
            restored = loader.load_accepted_artifact(STEP, LANE, IDENTITY, CODEC)
            assert restored.state is PredecessorState.CORRUPT
            assert restored.record is None
        path.write_bytes(good)
        assert loader.load(NORMALIZE, CODEC).state is CheckpointState.PRESENT

    def test_truncation_at_every_length_is_corrupt(
        self, recorder: CheckpointRecorder, loader: CheckpointLoader, ws_path: Path
    ) -> None:
        recorder.write(MERGE, make_record(b"[]"))
        path = file_of(ws_path, MERGE)
        good = path.read_bytes()
        for length in range(len(good)):
            path.write_bytes(good[:length])
            loaded = loader.load(MERGE, CODEC)
            assert loaded.state is CheckpointState.CORRUPT, length
            assert loaded.record is None

    def test_trailing_garbage_is_corrupt(
        self, recorder: CheckpointRecorder, loader: CheckpointLoader, ws_path: Path
    ) -> None:
        recorder.write(MERGE, make_record())
        path = file_of(ws_path, MERGE)
        path.write_bytes(path.read_bytes() + b"\x00")
        assert loader.load(MERGE, CODEC).state is CheckpointState.CORRUPT

    @settings(max_examples=200, deadline=None)
    @given(data=st.binary(max_size=300), with_magic=st.booleans())
    def test_arbitrary_bytes_never_raise(self, data: bytes, with_magic: bool) -> None:
        if with_magic:
            data = MAGIC + ENVELOPE_VERSION.to_bytes(2, "big") + data
        with pytest.raises(EnvelopeRejected) as caught:
            codec.open(data, MERGE)
        assert caught.value.state in (CheckpointState.CORRUPT, CheckpointState.SCHEMA_UNSUPPORTED)

    @settings(max_examples=200, deadline=None)
    @given(
        header=st.dictionaries(
            st.sampled_from(["step", "lane", "stage", "chunk", "payload_size", "raw_size", "x"]),
            st.one_of(st.integers(-(2**63), 2**64 - 1), st.text(max_size=5), st.none()),
            max_size=4,
        )
    )
    def test_signed_but_wrong_headers_are_corrupt(self, header: dict[str, object]) -> None:
        envelope = codec.encode(MERGE, make_record())
        tampered = rebuild(envelope, **header)
        if tampered == envelope:
            return
        with pytest.raises(EnvelopeRejected) as caught:
            codec.open(tampered, MERGE)
        assert caught.value.state is CheckpointState.CORRUPT

    @pytest.mark.parametrize(
        "change",
        [
            {"output_sha256": "0" * 64},
            {"raw_size": 3},
            {"payload_size": 1},
            {"stage": "normalize"},
            {"lane": "docs/other.md"},
            {"digests": "not a struct"},
            {"surprise": 1},
        ],
    )
    def test_each_post_digest_check_rejects(self, change: dict[str, object]) -> None:
        envelope = codec.encode(MERGE, make_record())
        with pytest.raises(EnvelopeRejected) as caught:
            codec.open(rebuild(envelope, **change), MERGE)
        assert caught.value.state is CheckpointState.CORRUPT

    def test_header_length_beyond_the_file_is_corrupt(self) -> None:
        envelope = bytearray(codec.encode(MERGE, make_record()))
        envelope[6:10] = struct.pack(">I", 2**32 - 1)
        with pytest.raises(EnvelopeRejected) as caught:
            codec.open(resign(bytes(envelope)), MERGE)
        assert caught.value.state is CheckpointState.CORRUPT

    def test_payload_that_is_not_zstd_is_corrupt(self) -> None:
        envelope = codec.encode(MERGE, make_record(os.urandom(RAW_PAYLOAD_MAX + 1)))
        header_size = struct.unpack_from(">I", envelope, 6)[0]
        start = 10 + header_size
        garbage = bytes(len(envelope) - 32 - start)
        with pytest.raises(EnvelopeRejected) as caught:
            codec.open(resign(envelope[:start] + garbage + envelope[-32:]), MERGE)
        assert caught.value.state is CheckpointState.CORRUPT

    def test_unknown_version_is_schema_unsupported(
        self, recorder: CheckpointRecorder, loader: CheckpointLoader, ws_path: Path
    ) -> None:
        recorder.write(MERGE, make_record())
        path = file_of(ws_path, MERGE)
        envelope = bytearray(path.read_bytes())
        envelope[4:6] = (ENVELOPE_VERSION + 1).to_bytes(2, "big")
        path.write_bytes(resign(bytes(envelope)))
        assert loader.load(MERGE, CODEC).state is CheckpointState.SCHEMA_UNSUPPORTED

    def test_encode_refuses_a_record_whose_digest_is_not_its_payload(self) -> None:
        record = msgspec.structs.replace(make_record(), output_sha256="0" * 64)
        with pytest.raises(ValueError):
            codec.encode(MERGE, record)

    def test_payload_is_compressed(self) -> None:
        payload = b'{"terms":[' + b'"repeated term",' * 500 + b'"end"]}'
        assert len(payload) > RAW_PAYLOAD_MAX
        assert len(codec.encode(MERGE, make_record(payload))) < len(payload) // 4


class TestEnvelopeVersions:
    """Version 2 stores small payloads as they are; version 1 files are still read."""

    big = b'{"terms":[' + b'"repeated term",' * 500 + b'"end"]}'

    def test_a_small_payload_is_stored_as_it_is(self) -> None:
        payload = b'{"terms":["alpha","beta"]}' * 40
        assert len(payload) <= RAW_PAYLOAD_MAX
        envelope = codec.encode(MERGE, make_record(payload))
        assert int.from_bytes(envelope[4:6], "big") == 2
        assert envelope[-32 - len(payload) : -32] == payload
        header, opened = codec.open(envelope, MERGE)
        assert header.compression is Compression.NONE and opened == payload
        assert header.payload_size == header.raw_size == len(payload)

    def test_a_payload_over_the_limit_is_one_zstd_frame(self) -> None:
        envelope = codec.encode(MERGE, make_record(self.big))
        header, opened = codec.open(envelope, MERGE)
        assert header.compression is Compression.ZSTD and opened == self.big
        assert b"\x28\xb5\x2f\xfd" in envelope  # the zstd frame's magic

    def test_a_version_1_envelope_is_still_read(
        self, recorder: CheckpointRecorder, loader: CheckpointLoader, ws_path: Path
    ) -> None:
        recorder.write(MERGE, make_record(self.big))
        path = file_of(ws_path, MERGE)
        v1 = bytearray(codec.encode(MERGE, make_record(self.big)))
        v1[4:6] = (1).to_bytes(2, "big")  # a compressed v2 header is a v1 header
        path.write_bytes(resign(bytes(v1)))
        loaded = loader.load(MERGE, CODEC)
        assert loaded.state is CheckpointState.PRESENT
        assert loaded.record is not None and loaded.record.payload == self.big

    def test_a_version_1_envelope_never_stores_a_raw_payload(self) -> None:
        v2 = codec.encode(MERGE, make_record(b"[1,2,3]"))
        v1 = bytearray(v2)
        v1[4:6] = (1).to_bytes(2, "big")
        with pytest.raises(EnvelopeRejected) as caught:
            codec.open(resign(bytes(v1)), MERGE)
        assert caught.value.state is CheckpointState.CORRUPT

    def test_a_raw_payload_of_another_size_is_corrupt(self) -> None:
        envelope = codec.encode(MERGE, make_record(b"[1,2,3]"))
        for change in ({"raw_size": 6}, {"compression": "zstd"}, {"compression": "lz4"}):
            with pytest.raises(EnvelopeRejected) as caught:
                codec.open(rebuild(envelope, **change), MERGE)
            assert caught.value.state is CheckpointState.CORRUPT, change


class TestLoad:
    def test_present_round_trip_through_the_files(
        self, recorder: CheckpointRecorder, loader: CheckpointLoader
    ) -> None:
        record = make_record(warnings=["a", "b"], provenance=provenance_for(b"x"))
        for key in (EXTRACT, MERGE, NORMALIZE):
            recorder.write(key, record)
            loaded = loader.load(key, CODEC)
            assert loaded.state is CheckpointState.PRESENT
            assert loaded.record == record

    def test_missing(self, recorder: CheckpointRecorder, loader: CheckpointLoader) -> None:
        assert loader.load(MERGE, CODEC).state is CheckpointState.MISSING
        recorder.write(EXTRACT, make_record())
        loaded = loader.load(CheckpointKey(STEP, LANE, Stage.EXTRACT, OTHER_CHUNK), CODEC)
        assert loaded.state is CheckpointState.MISSING
        assert loaded.record is None
        assert loader.load(CheckpointKey("other", LANE, Stage.MERGE), CODEC).state is (
            CheckpointState.MISSING
        )

    def test_codec_mismatch(self, recorder: CheckpointRecorder, loader: CheckpointLoader) -> None:
        recorder.write(MERGE, make_record())
        loaded = loader.load(MERGE, CODEC + "-v2")
        assert loaded.state is CheckpointState.CODEC_MISMATCH
        assert loaded.record is None

    def test_a_file_moved_to_another_scope_is_corrupt(
        self, recorder: CheckpointRecorder, loader: CheckpointLoader, ws_path: Path
    ) -> None:
        recorder.write(MERGE, make_record())
        recorder.write(EXTRACT, make_record())
        other = CheckpointKey(STEP, LANE, Stage.EXTRACT, OTHER_CHUNK)
        file_of(ws_path, other).write_bytes(file_of(ws_path, EXTRACT).read_bytes())
        file_of(ws_path, NORMALIZE).write_bytes(file_of(ws_path, MERGE).read_bytes())
        assert loader.load(other, CODEC).state is CheckpointState.CORRUPT
        assert loader.load(NORMALIZE, CODEC).state is CheckpointState.CORRUPT

    def test_rewrite_replaces_the_lane_identity(
        self, recorder: CheckpointRecorder, loader: CheckpointLoader
    ) -> None:
        recorder.write(MERGE, make_record(lane_identity="a" * 64))
        recorder.write(MERGE, make_record(lane_identity="b" * 64))
        record = loader.load(MERGE, CODEC).record
        assert record is not None
        assert record.lane_identity == "b" * 64

    @pytest.mark.parametrize("error", [PermissionDeniedError, FsIOError, fsroot.SymlinkRefused])
    def test_io_errors_other_than_not_found_are_corrupt(
        self,
        recorder: CheckpointRecorder,
        loader: CheckpointLoader,
        root: FsRoot,
        faults: list[Fault],
        error: type[fsroot.FsError],
    ) -> None:
        recorder.write(MERGE, make_record())
        faults.append(
            Fault(
                "read_bytes", lambda r, name: name.endswith(".ckpt"), lambda n: error(n, errno.EIO)
            )
        )
        assert loader.load(MERGE, CODEC).state is CheckpointState.CORRUPT
        restored = loader.load_accepted_artifact(STEP, LANE, IDENTITY, CODEC)
        assert restored.state is PredecessorState.CORRUPT

    def test_planted_symlink_and_directory_are_corrupt(
        self, recorder: CheckpointRecorder, loader: CheckpointLoader, ws_path: Path, tmp_path: Path
    ) -> None:
        recorder.write(MERGE, make_record())
        outside = tmp_path / "outside.ckpt"
        outside.write_bytes(file_of(ws_path, MERGE).read_bytes())
        file_of(ws_path, NORMALIZE).symlink_to(outside)
        assert loader.load(NORMALIZE, CODEC).state is CheckpointState.CORRUPT
        (file_of(ws_path, EXTRACT)).mkdir(parents=True)
        assert loader.load(EXTRACT, CODEC).state is CheckpointState.CORRUPT

    def test_symlinked_lane_directory_is_corrupt(
        self, recorder: CheckpointRecorder, loader: CheckpointLoader, ws_path: Path, tmp_path: Path
    ) -> None:
        recorder.write(MERGE, make_record())
        lane_dir = file_of(ws_path, MERGE).parent
        moved = tmp_path / "elsewhere"
        lane_dir.rename(moved)
        lane_dir.symlink_to(moved, target_is_directory=True)
        assert loader.load(MERGE, CODEC).state is CheckpointState.CORRUPT

    def test_loader_writes_nothing(
        self,
        recorder: CheckpointRecorder,
        loader: CheckpointLoader,
        ws_path: Path,
        faults: list[Fault],
    ) -> None:
        recorder.write(EXTRACT, make_record())
        recorder.write(NORMALIZE, make_record())
        file_of(ws_path, MERGE).write_bytes(b"RJCK garbage")
        before = tree(ws_path)
        for method in ("write_bytes", "append_line", "mkdir", "remove", "remove_tree"):
            faults.append(
                Fault(method, lambda r, n: True, lambda n: AssertionError(f"the loader wrote {n}"))
            )
        other = CheckpointKey(STEP, LANE, Stage.EXTRACT, OTHER_CHUNK)
        for key in (EXTRACT, MERGE, NORMALIZE, other, CheckpointKey("new", "x", Stage.MERGE)):
            loader.load(key, CODEC)
            loader.load(key, "other-codec")
        loader.load_accepted_artifact(STEP, LANE, IDENTITY, CODEC)
        loader.load_accepted_artifact("new", "corpus", IDENTITY, CODEC)
        assert tree(ws_path) == before

    def test_loader_on_an_absent_workspace_creates_nothing(self, tmp_path: Path) -> None:
        cache = tmp_path / "cache"
        with FsRoot.open(cache, create=True) as cache_root:
            loader = CheckpointLoader(Workspace.in_cache(cache_root, PIPELINE))
            assert loader.load(MERGE, CODEC).state is CheckpointState.MISSING
            restored = loader.load_accepted_artifact(STEP, LANE, IDENTITY, CODEC)
            assert restored.state is PredecessorState.MISSING
        assert list(cache.iterdir()) == []

    def test_threads_share_one_loader_and_recorder(
        self, recorder: CheckpointRecorder, loader: CheckpointLoader
    ) -> None:
        keys = [
            CheckpointKey(STEP, f"lane-{i}", Stage.EXTRACT, hashlib.sha256(bytes([i])).hexdigest())
            for i in range(16)
        ]
        errors: list[BaseException] = []

        def work(key: CheckpointKey) -> None:
            try:
                payload = key.lane.encode() * 50
                recorder.write(key, make_record(payload))
                loaded = loader.load(key, CODEC)
                assert loaded.state is CheckpointState.PRESENT
                assert loaded.record is not None
                assert loaded.record.payload == payload
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(key,)) for key in keys]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)
        assert errors == []


class TestWorkspace:
    def test_layout(self, recorder: CheckpointRecorder, ws_path: Path) -> None:
        for key in (EXTRACT, MERGE, NORMALIZE):
            recorder.write(key, make_record())
        names = sorted(str(p.relative_to(ws_path)) for p in ws_path.rglob("*") if p.is_file())
        safe = next((ws_path / "steps" / STEP).iterdir()).name
        assert safe.startswith("docs__a_b.md-") and len(safe) == len("docs__a_b.md-") + 8
        # one shared components entry: the three records have the same S and codec id
        shared = codec.seal(MERGE, make_record()).shared_name
        assert names == sorted(
            [
                WORKSPACE_MANIFEST,
                shared,
                f"steps/{STEP}/{safe}/extract/{CHUNK}.ckpt",
                f"steps/{STEP}/{safe}/merge.ckpt",
                f"steps/{STEP}/{safe}/normalize.ckpt",
            ]
        )

    def test_corpus_lane_keeps_its_name(self) -> None:
        key = CheckpointKey(STEP, "corpus", Stage.NORMALIZE)
        assert Workspace.checkpoint_name(key) == f"steps/{STEP}/corpus/normalize.ckpt"

    def test_manifest_is_canonical_and_written_once(
        self,
        recorder: CheckpointRecorder,
        root: FsRoot,
        ws_path: Path,
        faults: list[Fault],
    ) -> None:
        written: list[str] = []
        # A spy through the fake root: it records every write and fails none.
        faults.append(
            Fault("write_bytes", lambda r, name: written.append(name) is not None, AssertionError)
        )
        for key in (EXTRACT, MERGE, NORMALIZE, MERGE):
            recorder.write(key, make_record())
        assert written.count(WORKSPACE_MANIFEST) == 1
        assert written[0] == WORKSPACE_MANIFEST
        expected = b'{"pipeline":"glossary","workspace_schema_version":3}'
        assert (ws_path / WORKSPACE_MANIFEST).read_bytes() == expected
        # A second recorder on a good workspace leaves the manifest alone.
        written.clear()
        CheckpointRecorder(Workspace(root, PIPELINE)).write(MERGE, make_record())
        assert WORKSPACE_MANIFEST not in written

    @pytest.mark.parametrize(
        ("content", "state"),
        [
            (b'{"workspace_schema_version":2,"pipeline":"glossary"}', WorkspaceState.UNSUPPORTED),
            (b'{"workspace_schema_version":4}', WorkspaceState.UNSUPPORTED),
            (b'{"workspace_schema_version":3,"pipeline":"other"}', WorkspaceState.CORRUPT),
            (b'{"workspace_schema_version":"3","pipeline":"glossary"}', WorkspaceState.CORRUPT),
            (b'{"workspace_schema_version":true,"pipeline":"glossary"}', WorkspaceState.CORRUPT),
            (b"[3]", WorkspaceState.CORRUPT),
            (b"{not json", WorkspaceState.CORRUPT),
            (b"", WorkspaceState.CORRUPT),
        ],
    )
    def test_manifest_verdicts(
        self, workspace: Workspace, ws_path: Path, content: bytes, state: WorkspaceState
    ) -> None:
        assert workspace.manifest_state() is WorkspaceState.ABSENT
        (ws_path / WORKSPACE_MANIFEST).write_bytes(content)
        assert workspace.manifest_state() is state

    def test_schema_v2_workspace_makes_every_load_unsupported(
        self, recorder: CheckpointRecorder, workspace: Workspace, ws_path: Path
    ) -> None:
        recorder.write(MERGE, make_record())
        recorder.write(NORMALIZE, make_record())
        (ws_path / WORKSPACE_MANIFEST).write_bytes(
            b'{"pipeline":"glossary","workspace_schema_version":2}'
        )
        loader = CheckpointLoader(workspace)
        for key in (EXTRACT, MERGE, NORMALIZE):
            assert loader.load(key, CODEC).state is CheckpointState.SCHEMA_UNSUPPORTED
        restored = loader.load_accepted_artifact(STEP, LANE, IDENTITY, CODEC)
        assert restored.state is PredecessorState.CORRUPT

    def test_garbled_manifest_makes_every_load_corrupt(
        self, recorder: CheckpointRecorder, workspace: Workspace, ws_path: Path
    ) -> None:
        recorder.write(MERGE, make_record())
        (ws_path / WORKSPACE_MANIFEST).write_bytes(b"\x00\x01")
        loader = CheckpointLoader(workspace)
        assert loader.load(MERGE, CODEC).state is CheckpointState.CORRUPT
        assert loader.load(EXTRACT, CODEC).state is CheckpointState.CORRUPT

    def test_checkpoint_without_manifest_is_corrupt(
        self, recorder: CheckpointRecorder, workspace: Workspace, ws_path: Path
    ) -> None:
        recorder.write(NORMALIZE, make_record())
        (ws_path / WORKSPACE_MANIFEST).unlink()
        loader = CheckpointLoader(workspace)
        assert loader.load(NORMALIZE, CODEC).state is CheckpointState.CORRUPT
        assert loader.load(MERGE, CODEC).state is CheckpointState.MISSING
        restored = loader.load_accepted_artifact(STEP, LANE, IDENTITY, CODEC)
        assert restored.state is PredecessorState.CORRUPT

    def test_loader_sees_a_manifest_the_recorder_creates_mid_run(
        self, workspace: Workspace
    ) -> None:
        loader = CheckpointLoader(workspace)
        assert loader.load(MERGE, CODEC).state is CheckpointState.MISSING
        CheckpointRecorder(workspace).write(MERGE, make_record())
        assert loader.load(MERGE, CODEC).state is CheckpointState.PRESENT

    def test_recorder_takes_over_an_unsupported_workspace(
        self, workspace: Workspace, ws_path: Path
    ) -> None:
        (ws_path / WORKSPACE_MANIFEST).write_bytes(b'{"workspace_schema_version":2}')
        CheckpointRecorder(workspace).write(MERGE, make_record())
        assert workspace.manifest_state() is WorkspaceState.OK
        assert CheckpointLoader(workspace).load(MERGE, CODEC).state is CheckpointState.PRESENT

    @pytest.mark.parametrize(
        "key",
        [
            CheckpointKey("../x", LANE, Stage.MERGE),
            CheckpointKey("", LANE, Stage.MERGE),
            CheckpointKey("a/b", LANE, Stage.MERGE),
            CheckpointKey(STEP, "", Stage.MERGE),
            CheckpointKey(STEP, LANE, Stage.MERGE, CHUNK),
            CheckpointKey(STEP, LANE, Stage.EXTRACT),
            CheckpointKey(STEP, LANE, Stage.EXTRACT, CHUNK.upper()),
            CheckpointKey(STEP, LANE, Stage.EXTRACT, CHUNK[:-1]),
            CheckpointKey(STEP, LANE, Stage.EXTRACT, "../../../../" + CHUNK[12:]),
            CheckpointKey(STEP, LANE, Stage.EXTRACT, CHUNK + "\n"),
        ],
    )
    def test_unfit_keys_are_refused_before_any_path(
        self,
        key: CheckpointKey,
        recorder: CheckpointRecorder,
        loader: CheckpointLoader,
        ws_path: Path,
    ) -> None:
        with pytest.raises(ValueError):
            recorder.write(key, make_record())
        with pytest.raises(ValueError):
            loader.load(key, CODEC)
        assert list(ws_path.iterdir()) == []

    def test_odd_lane_ids_stay_inside_the_lane_directory(
        self, recorder: CheckpointRecorder, loader: CheckpointLoader, ws_path: Path
    ) -> None:
        for lane in ("../../etc", ".hidden", "a\x00b", "/abs/path", "x" * 400, "é/ü"):
            key = CheckpointKey(STEP, lane, Stage.MERGE)
            recorder.write(key, make_record())
            assert loader.load(key, CODEC).state is CheckpointState.PRESENT
        lane_dirs = list((ws_path / "steps" / STEP).iterdir())
        assert len(lane_dirs) == 6
        assert all(d.is_dir() and not d.name.startswith(".") for d in lane_dirs)

    def test_files_are_0600_and_directories_0700(
        self, recorder: CheckpointRecorder, ws_path: Path
    ) -> None:
        old = os.umask(0o022)
        try:
            for key in (EXTRACT, MERGE, NORMALIZE):
                recorder.write(key, make_record())
        finally:
            os.umask(old)
        entries = list(ws_path.rglob("*"))
        assert len(entries) == 10  # with `components/` and its one shared entry
        for entry in [ws_path, *entries]:
            mode = stat.S_IMODE(entry.lstat().st_mode)
            assert mode == (0o700 if entry.is_dir() else 0o600), entry

    def test_in_cache_creates_the_workspace_on_first_write(self, tmp_path: Path) -> None:
        cache = tmp_path / "cache"
        with FsRoot.open(cache, create=True) as cache_root:
            workspace = Workspace.in_cache(cache_root, PIPELINE)
            CheckpointRecorder(workspace).write(NORMALIZE, make_record())
            assert CheckpointLoader(workspace).load(NORMALIZE, CODEC).state is (
                CheckpointState.PRESENT
            )
        ws = cache / "workspaces" / PIPELINE
        assert (ws / WORKSPACE_MANIFEST).is_file()
        assert stat.S_IMODE((cache / "workspaces").stat().st_mode) == 0o700
        assert stat.S_IMODE(ws.stat().st_mode) == 0o700

    @pytest.mark.parametrize("name", ["", "a/b", "..", "x" * 65, "a b"])
    def test_invalid_pipeline_names_are_refused(self, root: FsRoot, name: str) -> None:
        with pytest.raises(ValueError):
            Workspace(root, name)
        with pytest.raises(ValueError):
            Workspace.in_cache(root, name)


class TestLoadAcceptedArtifact:
    def test_restored_with_only_the_normalize_file(
        self,
        recorder: CheckpointRecorder,
        loader: CheckpointLoader,
        workspace: Workspace,
        ws_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        payload = b'{"terms":["alpha"]}'
        record = make_record(payload, warnings=["kept"], provenance=provenance_for(payload))
        recorder.write(NORMALIZE, record)
        assert not file_of(ws_path, MERGE).exists()
        assert not file_of(ws_path, EXTRACT).parent.exists()
        read: list[str] = []
        real = Workspace.read

        def spying(self: Workspace, name: str) -> bytes:
            read.append(name)
            return real(self, name)

        monkeypatch.setattr(Workspace, "read", spying)
        restored = loader.load_accepted_artifact(STEP, LANE, IDENTITY, CODEC)
        assert restored.state is PredecessorState.RESTORED
        assert restored.record == record
        assert restored.record.provenance == provenance_for(payload)
        # the lane's `latest` pointer names which normalize file to try first; no extract
        # or merge file is read
        pointer = Workspace.pointer_name(STEP, LANE, Stage.NORMALIZE)
        shared = codec.seal(NORMALIZE, record).shared_name
        assert set(read) - {pointer} == {
            WORKSPACE_MANIFEST,
            Workspace.checkpoint_name(NORMALIZE),
            shared,
        }

    def test_dependency_fingerprints_are_not_compared(
        self, recorder: CheckpointRecorder, loader: CheckpointLoader
    ) -> None:
        digests = StageDigests(COMPONENTS, "3" * 64, "4" * 64)
        recorder.write(NORMALIZE, make_record(digests=digests))
        restored = loader.load_accepted_artifact(STEP, LANE, IDENTITY, CODEC)
        assert restored.state is PredecessorState.RESTORED

    def test_missing(self, recorder: CheckpointRecorder, loader: CheckpointLoader) -> None:
        assert loader.load_accepted_artifact(STEP, LANE, IDENTITY, CODEC).state is (
            PredecessorState.MISSING
        )
        recorder.write(MERGE, make_record())  # a merge file is no accepted artifact
        recorder.write(EXTRACT, make_record())
        restored = loader.load_accepted_artifact(STEP, LANE, IDENTITY, CODEC)
        assert restored.state is PredecessorState.MISSING
        assert restored.record is None

    def test_identity_mismatch(
        self, recorder: CheckpointRecorder, loader: CheckpointLoader
    ) -> None:
        recorder.write(NORMALIZE, make_record())
        restored = loader.load_accepted_artifact(STEP, LANE, "9" * 64, CODEC)
        assert restored.state is PredecessorState.IDENTITY_MISMATCH
        assert restored.record is None

    def test_empty_identity_never_matches(
        self, recorder: CheckpointRecorder, loader: CheckpointLoader
    ) -> None:
        recorder.write(NORMALIZE, make_record())
        assert loader.load_accepted_artifact(STEP, LANE, "", CODEC).state is (
            PredecessorState.IDENTITY_MISMATCH
        )
        recorder.write(NORMALIZE, make_record(lane_identity=""))
        assert loader.load_accepted_artifact(STEP, LANE, "", CODEC).state is (
            PredecessorState.IDENTITY_MISMATCH
        )
        # ...while ordinary resume still reads it (it never compares the identity).
        assert loader.load(NORMALIZE, CODEC).state is CheckpointState.PRESENT

    def test_corrupt(
        self, recorder: CheckpointRecorder, loader: CheckpointLoader, ws_path: Path
    ) -> None:
        recorder.write(NORMALIZE, make_record())
        path = file_of(ws_path, NORMALIZE)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x10
        path.write_bytes(bytes(data))
        restored = loader.load_accepted_artifact(STEP, LANE, IDENTITY, CODEC)
        assert restored.state is PredecessorState.CORRUPT
        assert restored.record is None

    def test_codec_or_schema_failure_is_corrupt(
        self, recorder: CheckpointRecorder, loader: CheckpointLoader, ws_path: Path
    ) -> None:
        recorder.write(NORMALIZE, make_record())
        restored = loader.load_accepted_artifact(STEP, LANE, IDENTITY, "another-codec")
        assert restored.state is PredecessorState.CORRUPT
        path = file_of(ws_path, NORMALIZE)
        envelope = bytearray(path.read_bytes())
        envelope[4:6] = (ENVELOPE_VERSION + 1).to_bytes(2, "big")
        path.write_bytes(resign(bytes(envelope)))
        restored = loader.load_accepted_artifact(STEP, LANE, IDENTITY, CODEC)
        assert restored.state is PredecessorState.CORRUPT

    def test_refuses_an_unfit_step(self, loader: CheckpointLoader) -> None:
        with pytest.raises(ValueError):
            loader.load_accepted_artifact("../etc", LANE, IDENTITY, CODEC)


class TestRecorderFailures:
    def _fail_envelope_writes(self, monkeypatch: pytest.MonkeyPatch, code: int) -> None:
        """The real atomic write runs: half the bytes go out, then the disk fails."""
        real = fsroot._write_all

        def failing(fd: int, data: bytes) -> None:
            if bytes(data[:4]) == MAGIC:
                real(fd, data[: len(data) // 2])
                raise OSError(code, os.strerror(code))
            real(fd, data)

        monkeypatch.setattr(fsroot, "_write_all", failing)

    def test_no_space_raises_and_leaves_no_partial_file(
        self,
        recorder: CheckpointRecorder,
        root: FsRoot,
        ws_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        self._fail_envelope_writes(monkeypatch, errno.ENOSPC)
        with pytest.raises(CheckpointWriteError) as caught:
            recorder.write(EXTRACT, make_record())
        message = str(caught.value)
        assert "\n" not in message
        assert STEP in message and "extract" in message and "no space" in message
        assert str(ws_path) not in message and "/tmp" not in message
        assert isinstance(caught.value.__cause__, NoSpace)
        assert not file_of(ws_path, EXTRACT).exists()
        assert root.sweep_temp_files(dry_run=True) == []
        assert CheckpointLoader(Workspace(root, PIPELINE)).load(EXTRACT, CODEC).state is (
            CheckpointState.MISSING
        )

    def test_failed_overwrite_keeps_the_previous_checkpoint(
        self,
        recorder: CheckpointRecorder,
        loader: CheckpointLoader,
        root: FsRoot,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        recorder.write(MERGE, make_record(lane_identity="a" * 64))
        self._fail_envelope_writes(monkeypatch, errno.EIO)
        with pytest.raises(CheckpointWriteError):
            recorder.write(MERGE, make_record(lane_identity="b" * 64))
        loaded = loader.load(MERGE, CODEC)
        assert loaded.state is CheckpointState.PRESENT
        assert loaded.record is not None
        assert loaded.record.lane_identity == "a" * 64
        assert root.sweep_temp_files(dry_run=True) == []

    def test_write_bytes_raising_no_space(
        self, recorder: CheckpointRecorder, ws_path: Path, faults: list[Fault]
    ) -> None:
        faults.append(Fault("write_bytes", lambda r, n: True, lambda n: NoSpace(n, errno.ENOSPC)))
        with pytest.raises(CheckpointWriteError, match="no space"):
            recorder.write(NORMALIZE, make_record())
        assert list(ws_path.iterdir()) == []

    def test_manifest_failure_is_a_write_error_and_is_retried(
        self, recorder: CheckpointRecorder, ws_path: Path, faults: list[Fault]
    ) -> None:
        faults.append(
            Fault("write_bytes", lambda r, n: True, lambda n: fsroot.ReadOnlyFs(n, errno.EROFS))
        )
        with pytest.raises(CheckpointWriteError, match="read-only"):
            recorder.write(MERGE, make_record())
        faults.clear()
        recorder.write(MERGE, make_record())
        assert (ws_path / WORKSPACE_MANIFEST).is_file()

    def test_returns_digest_and_size_of_the_file(
        self, recorder: CheckpointRecorder, ws_path: Path
    ) -> None:
        sha, size = recorder.write(NORMALIZE, make_record())
        data = file_of(ws_path, NORMALIZE).read_bytes()
        assert (sha, size) == (hashlib.sha256(data).hexdigest(), len(data))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(record=records())
def test_round_trip_through_recorder_and_loader(
    record: CheckpointRecord, recorder: CheckpointRecorder, loader: CheckpointLoader
) -> None:
    recorder.write(NORMALIZE, record)
    loaded = loader.load(NORMALIZE, record.codec_id)
    assert loaded.state is CheckpointState.PRESENT
    assert loaded.record == record
