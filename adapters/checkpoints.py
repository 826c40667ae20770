"""The checkpoint store: workspace, envelope, loader and recorder
(docs/internals.md "Checkpoint store").

One workspace per pipeline under the cache root holds `workspace.json` and one envelope
per checkpoint (a packed entry, or a file of the layout before it), stored under what the
stage is (its step identity, D and lane identity), so results of another configuration
are kept beside the current ones; version 3 envelopes name the components their step's
stage shares, stored once as `components/<sha256>`.
The loader turns every file into a typed verdict and never raises for bad content; the
recorder persists envelopes atomically through the confined filesystem. They are separate
collaborators: a resume without recording builds only the loader, a run without resume
only the recorder.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import functools
import hashlib
import struct
import threading
from collections.abc import Callable
from typing import NamedTuple

import msgspec
import zstandard
from runjournal.adapters.dir_handles import DEFAULT_CAPACITY, DirectoryHandles
from runjournal.adapters.fsroot import FsError, FsNotFound, FsRoot
from runjournal.adapters.packed_store import Found, PackedStore
from runjournal.domain.checkpoint_scope import cached_step_identity, scope_of
from runjournal.domain.decisions import CheckpointState, PredecessorState, Stage, StageDigests
from runjournal.domain.identity import LaneComponents
from runjournal.domain.lazy_pattern import LazyPattern
from runjournal.domain.llm import LLMUsage
from runjournal.domain.names import is_valid_pipeline_name, is_valid_step_id, safe_lane_id
from runjournal.domain.ports import (
    CheckpointKey,
    CheckpointRecord,
    CheckpointWriteError,
    LoadedCheckpoint,
    Provenance,
    RestoredArtifact,
    StoreScope,
)

__all__ = [
    "COMPONENTS_DIR",
    "ENVELOPE_VERSION",
    "MAGIC",
    "MAX_RAW_SIZE",
    "RAW_PAYLOAD_MAX",
    "WORKSPACE_MANIFEST",
    "WORKSPACE_SCHEMA_VERSION",
    "CheckpointLoader",
    "CheckpointRecorder",
    "Compression",
    "EnvelopeCodec",
    "EnvelopeHeader",
    "EnvelopeRejected",
    "Sealed",
    "SharedComponents",
    "Workspace",
    "WorkspaceState",
    "decode_shared",
    "shared_name",
]

MAGIC = b"RJCK"
# What is written: version 3, a fixed binary header referring to the step's shared
# components entry; versions 2 and 1 (self-contained msgpack headers) are still read, and
# version 2 is still written for a record whose digests do not fit version 3's fixed
# fields (docs/internals.md "Envelope format").
ENVELOPE_VERSION = 3
_SELF_CONTAINED = 2
_READ_VERSIONS = frozenset({1, _SELF_CONTAINED, ENVELOPE_VERSION})
# `components/<sha256 hex>`: the shared components entries version 3 envelopes refer to.
COMPONENTS_DIR = "components"
# A payload up to this size is stored as it is (version 2, `compression` "none"): its file
# takes one block either way, and decompressing a frame this small costs more cpu than
# reading and hashing the whole file (docs/internals.md "Envelope format").
RAW_PAYLOAD_MAX = 2048
# Version 3 also compresses a payload between these sizes when its frame is at least a
# quarter smaller: on the glossary example that halves the payloads' bytes for about
# 1.5 us of decompression per such checkpoint (docs/internals.md "Envelope format").
SMALL_FRAME_MIN = 128
RAW_IN_BLOCKS_MAX = 256 << 10
"""Payloads up to this are stored as they are when the packed store compresses its
sealed segments' records together (docs/internals.md "Envelope format")."""
WORKSPACE_SCHEMA_VERSION = 3  # a frozen wire field (docs/internals.md "`workspace.json`")
WORKSPACE_MANIFEST = "workspace.json"
ZSTD_LEVEL = 3
# A payload larger than this is refused as corrupt instead of being allocated.
MAX_RAW_SIZE = 1 << 31

# magic (4 bytes), envelope version (u16 BE), header length (u32 BE)
_PREFIX = struct.Struct(">4sHI")
_VERSION_END = 6
_DIGEST_SIZE = 32
_OVERHEAD = _PREFIX.size + _DIGEST_SIZE
_CHUNK_ID = LazyPattern(r"[0-9a-f]{64}")
_STEP_IDENTITY = LazyPattern(r"[0-9a-f]{32}")
_SUFFIX = ".ckpt"
# `latest.<stage>`: the scope the lane's stage was last written under,
# `<step identity>/<D dir>/<lane identity>`.
LATEST = "latest"
_NO_DEPENDENCIES = "0"  # the D directory of a lane that consumes nothing


# --------------------------------------------------------------------------- workspace


@functools.lru_cache(maxsize=4096)
def _lane_dir(step: str, lane: str) -> str:
    """`steps/<step>/<safe lane>`; cached because every stage of a lane asks again."""
    if not is_valid_step_id(step):
        raise ValueError(f"invalid step id {step!r}")
    if not isinstance(lane, str) or not lane:
        raise ValueError("a checkpoint lane id must be a non-empty string")
    return f"steps/{step}/{safe_lane_id(lane)}"


@functools.lru_cache(maxsize=4096)
def scope_dir(step: str, lane: str, scope: StoreScope) -> str:
    """`steps/<step>/<safe lane>/<step identity>/<D dir>`; refuses values unfit for a path.

    Cached (a lane's stages ask again for every chunk); a refusal raises and is not cached.
    """
    if not _STEP_IDENTITY.fullmatch(scope.step_identity):
        raise ValueError("a checkpoint scope needs a 32-hex step identity")
    deps = scope.dependencies
    if deps and not _CHUNK_ID.fullmatch(deps):
        raise ValueError("a checkpoint scope's dependencies digest must be 64 hex or empty")
    return f"{_lane_dir(step, lane)}/{scope.step_identity}/{deps or _NO_DEPENDENCIES}"


def _record_of(record: CheckpointRecord, scope: StoreScope, stage: Stage) -> bool:
    """`_matches` for a record about to be written."""
    own = scope_of(record)
    if own.step_identity != scope.step_identity:
        return False
    if stage is Stage.EXTRACT:
        return own.dependencies == scope.dependencies
    return own.lane_identity == scope.lane_identity


def _pointer_scope(text: str) -> StoreScope | None:
    """A `latest` pointer's scope; None for anything that is not one."""
    parts = text.split("/")
    if len(parts) != 3:
        return None
    sid, ddir, lid = parts
    if not _STEP_IDENTITY.fullmatch(sid) or not _CHUNK_ID.fullmatch(lid):
        return None
    if ddir != _NO_DEPENDENCIES and not _CHUNK_ID.fullmatch(ddir):
        return None
    return StoreScope(sid, "" if ddir == _NO_DEPENDENCIES else ddir, lid)


def _pointer_text(scope: StoreScope) -> str:
    return f"{scope.step_identity}/{scope.dependencies or _NO_DEPENDENCIES}/{scope.lane_identity}"


_BINARY_POINTER = b"\x00"


def _pointer_bytes(scope: StoreScope) -> bytes:
    """A pointer as written: `\\x00`, then the step identity (16 bytes), the lane identity
    (32) and D (32, absent when empty): half the text form, which is still read, and
    written for a scope that has no such form (docs/internals.md "Layout")."""
    if _pointer_scope(_pointer_text(scope)) != scope:
        return _pointer_text(scope).encode("ascii")  # not a scope the runner writes
    return b"".join(
        (
            _BINARY_POINTER,
            bytes.fromhex(scope.step_identity),
            bytes.fromhex(scope.lane_identity),
            bytes.fromhex(scope.dependencies),
        )
    )


def _pointer_of(data: bytes) -> StoreScope | None:
    """A `latest` pointer's scope, binary or text; None for anything that is not one."""
    if data[:1] == _BINARY_POINTER:
        if len(data) not in (49, 81):
            return None
        return StoreScope(data[1:17].hex(), data[49:].hex(), data[17:49].hex())
    try:
        return _pointer_scope(data.decode("ascii"))
    except UnicodeDecodeError:
        return None


def _matches(header: EnvelopeHeader, scope: StoreScope, stage: Stage) -> bool:
    """Whether an envelope is of `scope`: the step identity; for extract its own D (the
    scope's D); for merge and normalize the lane identity (their scope's D also covers the
    stages before them, which the header does not carry: the runner compares their input)."""
    if cached_step_identity(header.digests.components) != scope.step_identity:
        return False
    if stage is Stage.EXTRACT:
        return header.digests.dependencies == scope.dependencies
    return header.lane_identity == scope.lane_identity


class WorkspaceState(enum.Enum):
    """What `workspace.json` says about the files beside it."""

    OK = "ok"
    ABSENT = "absent"  # nothing recorded yet (or the manifest was deleted)
    UNSUPPORTED = "unsupported"  # a readable manifest of another schema version
    CORRUPT = "corrupt"  # unreadable, not the expected shape, or another pipeline's


_json_encoder = msgspec.json.Encoder(order="deterministic")


class Workspace:
    """The checkpoint files of one pipeline, beneath a confined root.

    `root` is the workspace directory itself (``<cache root>/workspaces/<pipeline>/``),
    or, through :meth:`in_cache`, the cache root with the workspace as a name prefix, so
    that nothing is created until the recorder writes.

    Shared by the job threads (loader) and the checkpoint writer threads (recorder): its
    only state is `_dirs`, which lends handles under its own lock (docs/internals.md
    "Objects shared between threads").
    """

    def __init__(
        self,
        root: FsRoot,
        pipeline: str,
        *,
        prefix: str = "",
        open_dirs: int = DEFAULT_CAPACITY,
        packed: PackedStore | None = None,
    ) -> None:
        if not is_valid_pipeline_name(pipeline):
            raise ValueError(f"invalid pipeline name {pipeline!r}")
        self._root = root
        self._pipeline = pipeline
        self._prefix = prefix
        # With a packed store, checkpoints and pointers are written there and looked up
        # there first; files are the layout before it, still read (docs/internals.md
        # "Packed store"). Whether any such file exists is asked once.
        self._packed = packed
        self._files: bool | None = None if packed is not None else True
        # An object-storage cache keeps `workspace.json` as an entry too (the bucket is
        # the cache: docs/internals.md "Object-storage cache").
        self._entries_only = bool(getattr(packed, "holds_manifests", False))
        self.remote = self._entries_only  # its writes wait on the network
        # A packed store that compresses records in blocks: payloads are left as they are
        # (they compress better together: docs/internals.md "Packed store").
        self.raw_payloads = bool(getattr(packed, "compresses_blocks", False))
        # Directory handles opened through the confined walk, reused for reads: a lane's
        # checkpoints live in one or two directories, so a resume walks each path once.
        self._dirs = DirectoryHandles(root, open_dirs)

    @classmethod
    def in_cache(
        cls,
        cache_root: FsRoot,
        pipeline: str,
        *,
        open_dirs: int = DEFAULT_CAPACITY,
        packed: PackedStore | None = None,
    ) -> Workspace:
        """The workspace `workspaces/<pipeline>/` beneath `cache_root` (created lazily);
        with `packed` (the cache root's packed store) its checkpoints live there."""
        if not is_valid_pipeline_name(pipeline):
            raise ValueError(f"invalid pipeline name {pipeline!r}")
        prefix = f"workspaces/{pipeline}/"
        return cls(cache_root, pipeline, prefix=prefix, open_dirs=open_dirs, packed=packed)

    @property
    def pipeline(self) -> str:
        return self._pipeline

    @staticmethod
    def checkpoint_name(key: CheckpointKey) -> str:
        """The file of `key` relative to the workspace; refuses a key unfit for a path.

        With a scope: `<scope dir>/extract/<chunk>.ckpt` or `<scope dir>/<lane
        identity>/<stage>.ckpt`; without one, the position of the layout before scopes
        (`<lane dir>/extract/<chunk>.ckpt`, `<lane dir>/<stage>.ckpt`), still read.
        """
        stage = key.stage if type(key.stage) is Stage else Stage(key.stage)
        if stage is Stage.EXTRACT:
            if not isinstance(key.chunk, str) or not _CHUNK_ID.fullmatch(key.chunk):
                raise ValueError("an extract checkpoint needs a 64-hex chunk id")
        elif key.chunk:
            raise ValueError(f"a {stage.value} checkpoint has no chunk id")
        if key.scope is None:
            base = _lane_dir(key.step, key.lane)
        else:
            base = scope_dir(key.step, key.lane, key.scope)
            if stage is not Stage.EXTRACT:
                if not _CHUNK_ID.fullmatch(key.scope.lane_identity):
                    raise ValueError("a checkpoint scope needs a 64-hex lane identity")
                base += f"/{key.scope.lane_identity}"
        if stage is Stage.EXTRACT:
            return f"{base}/extract/{key.chunk}{_SUFFIX}"
        return f"{base}/{stage.value}{_SUFFIX}"

    def read_lane(self, step: str, lane: str) -> None:
        """With a packed store, read the index entries of the lane's checkpoints and
        pointers in one query before its loads (docs/internals.md "Packed store")."""
        if self._packed is not None:
            # on an error each load asks the index itself, and reports what it finds
            with contextlib.suppress(FsError, ValueError):
                self._packed.read_lane(self._prefix + _lane_dir(step, lane))

    @staticmethod
    def pointer_name(step: str, lane: str, stage: Stage) -> str:
        """The lane's `latest.<stage>` pointer: the scope the stage was last written under."""
        return f"{_lane_dir(step, lane)}/{LATEST}.{Stage(stage).value}"

    def latest_scope(self, step: str, lane: str, stage: Stage) -> StoreScope | None:
        """The scope the lane's stage was last written under (None: none or unreadable)."""
        try:
            data = self.read(self.pointer_name(step, lane, stage))
        except FsError:
            return None
        return _pointer_of(data)

    def listdir(self, name: str) -> list[str]:
        """Entry names of a workspace directory (packed and file entries together); empty
        when it does not exist."""
        names: list[str] = []
        if self._has_files():
            try:
                names = self._root.listdir(self._prefix + name)
            except FsNotFound:
                names = []
        if self._packed is None:
            return names
        return sorted(set(names).union(self._packed.children(self._prefix + name)))

    def _has_files(self) -> bool:
        """Whether checkpoint files of the layout before the packed store may exist here
        (their `steps/` directory), asked once per workspace object."""
        if self._files is None:
            try:
                self._files = self._root.exists(self._prefix + "steps")
            except FsError:
                self._files = True  # let the reads say what is wrong
        return self._files

    def stored_dependencies(self, step: str, lane: str, identity: str) -> list[str]:
        """The D values the lane has checkpoints under for step identity `identity`."""
        if not _STEP_IDENTITY.fullmatch(identity):
            return []
        out = []
        for name in self.listdir(f"{_lane_dir(step, lane)}/{identity}"):
            if name == _NO_DEPENDENCIES:
                out.append("")
            elif _CHUNK_ID.fullmatch(name):
                out.append(name)
        return out

    def normalize_candidates(self, step: str, lane: str, lane_identity: str) -> list[str]:
        """Every stored normalize file of `lane_identity` (any step identity or D), sorted."""
        if not _CHUNK_ID.fullmatch(lane_identity):
            return []
        lane_dir = _lane_dir(step, lane)
        out = []
        for sid in self.listdir(lane_dir):
            if not _STEP_IDENTITY.fullmatch(sid):
                continue
            for ddir in self.listdir(f"{lane_dir}/{sid}"):
                name = f"{lane_dir}/{sid}/{ddir}/{lane_identity}/normalize{_SUFFIX}"
                if ddir == _NO_DEPENDENCIES or _CHUNK_ID.fullmatch(ddir):
                    out.append(name)
        return out

    def manifest_bytes(self) -> bytes:
        """Canonical `workspace.json`: no timestamps, so rewriting it changes nothing."""
        return _json_encoder.encode(
            {"workspace_schema_version": WORKSPACE_SCHEMA_VERSION, "pipeline": self._pipeline}
        )

    def manifest_state(self) -> WorkspaceState:
        """Read and judge `workspace.json` (any I/O error but not-found is CORRUPT)."""
        try:
            data = self.read(WORKSPACE_MANIFEST)
        except FsNotFound:
            return WorkspaceState.ABSENT
        except FsError:
            return WorkspaceState.CORRUPT
        try:
            value = msgspec.json.decode(data)
        except msgspec.DecodeError:
            return WorkspaceState.CORRUPT
        if not isinstance(value, dict):
            return WorkspaceState.CORRUPT
        version = value.get("workspace_schema_version")
        if not isinstance(version, int) or isinstance(version, bool):
            return WorkspaceState.CORRUPT
        if version != WORKSPACE_SCHEMA_VERSION:
            return WorkspaceState.UNSUPPORTED
        if value.get("pipeline") != self._pipeline:
            return WorkspaceState.CORRUPT
        return WorkspaceState.OK

    def lookup_many(self, names: list[str]) -> list[Found | None] | None:
        """The packed index rows of `names` with their facts (`PackedStore.lookup_many`),
        None for a name without one; None when this workspace's store has no such rows
        (no packed store, an object-storage cache)."""
        lookup = getattr(self._packed, "lookup_many", None)
        if lookup is None:
            return None
        prefix = self._prefix
        found: list[Found | None] = lookup([prefix + name for name in names])
        return found

    def read_found(self, rows: list[Found | None]) -> list[bytes | None]:
        """The records of rows `lookup_many` gave (`PackedStore.read_found`)."""
        assert self._packed is not None
        read: list[bytes | None] = self._packed.read_found(rows)  # type: ignore[attr-defined]
        return read

    def read_many(self, names: list[str]) -> list[bytes | None]:
        """The packed entries of `names` read together (`PackedStore.get_many`); None
        for each one to `read` on its own (not packed, or no packed store here)."""
        get_many = getattr(self._packed, "get_many", None)
        if get_many is None:
            return [None] * len(names)
        prefix = self._prefix
        return get_many([prefix + name for name in names])

    def read(self, name: str) -> bytes:
        """The bytes of `name`: its packed entry, else its file; FsNotFound when neither."""
        full = self._prefix + name
        if self._packed is not None and (name != WORKSPACE_MANIFEST or self._entries_only):
            data = self._packed.get(full)
            if data is not None:
                return data
            if not self._has_files():
                raise FsNotFound(full, errno.ENOENT)
        directory, _, leaf = full.rpartition("/")
        if not directory:
            return self._root.read_bytes(leaf)
        return self._dirs.read_bytes(directory, leaf)  # FsNotFound when absent: not cached

    def close(self) -> None:
        """Close the directory handles (one a thread still reads closes when it is done)."""
        self._dirs.close()

    def write(
        self, name: str, data: bytes, *, durable: bool = True, facts: bytes | None = None
    ) -> None:
        """Atomic, 0600 in 0700 directories (the FsRoot guarantees); durable at once, or
        at the next :meth:`sync` with ``durable=False``. With a packed store, everything
        but `workspace.json` is a packed entry (always durable at the next sync), and
        `facts` (`envelope_facts`) go into its index row where the store keeps them."""
        if self._packed is not None and (
            self._entries_only or (name != WORKSPACE_MANIFEST and not durable)
        ):
            if facts is not None and getattr(self._packed, "keeps_facts", False):
                self._packed.put(self._prefix + name, data, facts)
            else:
                self._packed.put(self._prefix + name, data)
            return
        self._root.write_bytes(self._prefix + name, data, overwrite=True, durable=durable)

    def write_entries(
        self, items: list[tuple[str, bytes]], facts: list[bytes | None] | None = None
    ) -> None:
        """`write(name, data, durable=False)` of each, in order; with a packed store that
        takes them together, their index rows in one transaction (a checkpoint and its
        lane pointer: docs/internals.md "Recorder"). `facts`: each item's, as `write`."""
        put_many = getattr(self._packed, "put_many", None)
        if put_many is not None and WORKSPACE_MANIFEST not in (name for name, _ in items):
            entries = [(self._prefix + name, data) for name, data in items]
            if facts is not None and getattr(self._packed, "keeps_facts", False):
                put_many(entries, facts)
            else:
                put_many(entries)
            return
        for i, (name, data) in enumerate(items):
            self.write(name, data, durable=False, facts=facts[i] if facts else None)

    def sync(self) -> None:
        """The group barrier of the writes: the pending records of an object-storage
        cache's store written as a pack (docs/internals.md "Object-storage cache"), then
        one `syncfs` of the cache root's file system."""
        flush = getattr(self._packed, "flush", None)
        if flush is not None:
            flush()
        self._root.sync()


# --------------------------------------------------------------------------- envelope


class Compression(enum.StrEnum):
    """How an envelope stores its payload."""

    ZSTD = "zstd"  # one zstandard frame (every version 1 envelope)
    NONE = "none"  # the payload's bytes as they are (versions 2 and 3, small payloads)


class EnvelopeHeader(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The envelope's facts; the scope fields make a file moved to another scope corrupt.

    The header of versions 1 and 2 as stored; for version 3, built from its fixed fields,
    its shared components entry and the key (whose position its trailing digest covers).

    `usage` (what producing the payload cost in LLM calls) and `compression` are the only
    fields with a default: left out when absent or zstd, so the header of a compressed
    envelope without LLM calls has the bytes it had in version 1.
    """

    step: str
    lane: str
    stage: Stage
    chunk: str
    codec_id: str
    lane_identity: str
    digests: StageDigests
    output_sha256: str
    warnings: list[str]
    provenance: Provenance | None
    payload_size: int
    raw_size: int
    usage: LLMUsage | None = None
    compression: Compression = Compression.ZSTD


class EnvelopeRejected(Exception):
    """An envelope that cannot be trusted; `state` is the typed verdict."""

    def __init__(self, state: CheckpointState, why: str) -> None:
        super().__init__(why)
        self.state = state


def _corrupt(why: str) -> EnvelopeRejected:
    return EnvelopeRejected(CheckpointState.CORRUPT, why)


class _Zstd(threading.local):
    """zstd contexts are not thread-safe: one pair per thread, reused across calls."""

    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        self.decompressor = zstandard.ZstdDecompressor()


class _Producer(msgspec.Struct, frozen=True, array_like=True):
    """What a normalize's provenance says about its producer beyond the stage itself."""

    module_fingerprint: str
    kind: str
    schema: str
    media_type: str


class SharedComponents(msgspec.Struct, frozen=True, array_like=True):
    """What every checkpoint of one step's stage shares, stored once per workspace as the
    entry `components/<sha256 hex>`: version 3 envelopes name it by the sha256 of its
    bytes (docs/internals.md "Envelope format")."""

    components: LaneComponents
    codec_id: str
    producer: _Producer | None = None


class _Usage(msgspec.Struct, frozen=True, array_like=True):
    calls: int
    attempts: int
    prompt_tokens: int
    completion_tokens: int
    cost: float
    cached_tokens: int


class _Tail(msgspec.Struct, frozen=True, array_like=True):
    """A version 3 header's optional part: what most checkpoints do not have."""

    warnings: list[str]
    provenance: Provenance | None
    usage: _Usage | None


class Sealed(NamedTuple):
    """An encoded envelope and, for version 3, the shared components entry it names
    (`shared_name` relative to the workspace, written before the envelope)."""

    data: bytes
    shared_name: str | None = None
    shared: bytes | None = None


SharedLookup = Callable[[bytes], SharedComponents | None]

# Version 3 header flags (docs/internals.md "Envelope format").
_F_ZSTD = 0x01
_F_LANE = 0x02  # lane identity present (else empty)
_F_INPUT_CHUNK = 0x04  # input is the key's chunk id (an extract's), not stored
_F_INPUT = 0x08  # input present (else empty, or the chunk with _F_INPUT_CHUNK)
_F_DEPS = 0x10  # dependencies present (else empty)
_F_PRODUCER = 0x20  # provenance: the stage's own, its producer from the shared entry
_F_TAIL = 0x40  # a msgpack tail follows the fixed fields
_F_KNOWN = 0x7F
_SIZES = struct.Struct(">II")
_V3_FIXED = 1 + _DIGEST_SIZE + _DIGEST_SIZE + _SIZES.size  # flags, ref, output, sizes
# how many of lane identity, input and D a header stores, by those flags
_STORED_DIGESTS = [bin(f & (_F_LANE | _F_INPUT | _F_DEPS)).count("1") for f in range(_F_DEPS * 2)]
_HEX64 = LazyPattern(r"[0-9a-f]{64}")


def _fits(digest: str) -> bool:
    """Whether a digest field has a fixed-size version 3 form (empty or 64 lowercase hex)."""
    return not digest or bool(_HEX64.fullmatch(digest))


@functools.lru_cache(maxsize=4096)
def _scope_prefix(step: str, lane: str, stage: str) -> bytes:
    """What a version 3 envelope's trailing sha256 covers before its bytes: its position,
    each part length-prefixed, so a record moved to another position fails its digest."""
    parts = [p.encode("utf-8") for p in (step, lane, stage)]
    return b"RJCK3" + b"".join(len(p).to_bytes(4, "big") + p for p in parts)


# a stage's value without the enum's descriptor (about 1 us a call: once per checkpoint)
_STAGE_VALUES = {stage: stage.value for stage in Stage}


def _scope_digest(key: CheckpointKey, body: memoryview | bytes) -> bytes:
    stage = _STAGE_VALUES.get(key.stage) if type(key.stage) is Stage else Stage(key.stage).value
    chunk = key.chunk.encode("utf-8")
    h = hashlib.sha256(_scope_prefix(key.step, key.lane, stage))
    h.update(len(chunk).to_bytes(4, "big") + chunk)
    h.update(body)
    return h.digest()


def shared_name(ref: bytes) -> str:
    """The workspace entry of a shared components digest."""
    return f"{COMPONENTS_DIR}/{ref.hex()}"


def decode_shared(data: bytes, ref: bytes) -> SharedComponents | None:
    """A shared components entry's content, None unless it is intact (its sha256 is `ref`)."""
    if hashlib.sha256(data).digest() != ref:
        return None
    try:
        return _shared_decoder.decode(data)
    except msgspec.DecodeError:
        return None


_shared_decoder = msgspec.msgpack.Decoder(SharedComponents)
_tail_decoder = msgspec.msgpack.Decoder(_Tail)
_EMPTY_TAIL = _Tail([], None, None)


def envelope_facts(data: bytes) -> bytes | None:
    """What the packed index keeps of a version 3 envelope beside its place: its version
    byte and its header's bytes (lane identity, input, D, the shared components' digest,
    output digest, sizes, warnings and usage: every fact a reuse decision reads), so a
    resume that trusts the index decides without reading the record (docs/internals.md
    "Decision facts in the index"); None for any other envelope."""
    if len(data) < _OVERHEAD or data[: len(MAGIC)] != MAGIC:
        return None
    _magic, version, header_size = _PREFIX.unpack_from(data)
    if version != ENVELOPE_VERSION or _PREFIX.size + header_size > len(data) - _DIGEST_SIZE:
        return None
    return bytes((ENVELOPE_VERSION,)) + data[_PREFIX.size : _PREFIX.size + header_size]


class EnvelopeCodec:
    """Encodes and verifies checkpoint envelopes (layout in docs/internals.md "Envelope format")."""

    def __init__(self) -> None:
        self._encoder = msgspec.msgpack.Encoder(order="deterministic")
        self._decoder = msgspec.msgpack.Decoder(EnvelopeHeader)
        self._zstd = _Zstd()

    def encode(self, key: CheckpointKey, record: CheckpointRecord) -> bytes:
        """The self-contained version 2 envelope of `record` (what `seal` falls back to)."""
        payload = bytes(record.payload)
        if hashlib.sha256(payload).hexdigest() != record.output_sha256:
            raise ValueError("record.output_sha256 is not the sha256 of record.payload")
        if len(payload) <= RAW_PAYLOAD_MAX:
            stored, compression = payload, Compression.NONE
        else:
            stored, compression = self._zstd.compressor.compress(payload), Compression.ZSTD
        header = self._encoder.encode(
            EnvelopeHeader(
                step=key.step,
                lane=key.lane,
                stage=Stage(key.stage),
                chunk=key.chunk,
                codec_id=record.codec_id,
                lane_identity=record.lane_identity,
                digests=record.digests,
                output_sha256=record.output_sha256,
                warnings=list(record.warnings),
                provenance=record.provenance,
                payload_size=len(stored),
                raw_size=len(payload),
                usage=record.usage or None,
                compression=compression,
            )
        )
        body = b"".join((_PREFIX.pack(MAGIC, _SELF_CONTAINED, len(header)), header, stored))
        return body + hashlib.sha256(body).digest()

    def seal(
        self, key: CheckpointKey, record: CheckpointRecord, *, compress: bool = True
    ) -> Sealed:
        """What the recorder writes: a version 3 envelope and its shared components entry;
        a version 2 envelope when a digest field has no fixed-size form. Without
        `compress`, a payload up to `RAW_IN_BLOCKS_MAX` is stored as it is (the store
        compresses it with its neighbours)."""
        digests = record.digests
        if not (
            _fits(record.lane_identity) and _fits(digests.input) and _fits(digests.dependencies)
        ):
            return Sealed(self.encode(key, record))
        payload = bytes(record.payload)
        output = hashlib.sha256(payload).digest()
        if output.hex() != record.output_sha256:
            raise ValueError("record.output_sha256 is not the sha256 of record.payload")
        flags, stored = 0, payload
        if not compress and len(payload) <= RAW_IN_BLOCKS_MAX:
            pass
        elif len(payload) > SMALL_FRAME_MIN:
            frame = self._zstd.compressor.compress(payload)
            if len(payload) > RAW_PAYLOAD_MAX or 4 * len(frame) <= 3 * len(payload):
                stored, flags = frame, _F_ZSTD
        provenance, producer = record.provenance, None
        if (
            provenance is not None
            and provenance.step == key.step
            and provenance.lane == key.lane
            and provenance.sha256 == record.output_sha256
            and provenance.size == len(payload)
        ):
            producer = _Producer(
                provenance.module_fingerprint,
                provenance.kind,
                provenance.schema,
                provenance.media_type,
            )
            provenance, flags = None, flags | _F_PRODUCER
        shared = self._encoder.encode(
            SharedComponents(digests.components, record.codec_id, producer)
        )
        ref = hashlib.sha256(shared).digest()
        fields = [ref]
        if record.lane_identity:
            flags |= _F_LANE
            fields.append(bytes.fromhex(record.lane_identity))
        if digests.input and digests.input == key.chunk:
            flags |= _F_INPUT_CHUNK
        elif digests.input:
            flags |= _F_INPUT
            fields.append(bytes.fromhex(digests.input))
        if digests.dependencies:
            flags |= _F_DEPS
            fields.append(bytes.fromhex(digests.dependencies))
        fields.append(output)
        fields.append(_SIZES.pack(len(stored), len(payload)))
        usage = record.usage or None
        if record.warnings or provenance is not None or usage is not None:
            flags |= _F_TAIL
            row = None if usage is None else _Usage(**msgspec.structs.asdict(usage))
            fields.append(self._encoder.encode(_Tail(list(record.warnings), provenance, row)))
        header = bytes((flags,)) + b"".join(fields)
        body = b"".join((_PREFIX.pack(MAGIC, ENVELOPE_VERSION, len(header)), header, stored))
        return Sealed(body + _scope_digest(key, body), shared_name(ref), shared)

    def open(
        self,
        data: bytes,
        key: CheckpointKey,
        shared: SharedLookup | None = None,
        *,
        payload: bool = True,
    ) -> tuple[EnvelopeHeader, bytes]:
        """Verify `data` as the envelope of `key`; return its header and payload.

        Raises EnvelopeRejected only. The trailing digest (at a fixed place whatever the
        version; for version 3 over the key's position too) is checked first, so any flipped
        byte, the version's included, is CORRUPT, and so is a version 3 envelope of another
        position (docs/internals.md "Verification order and verdicts"); an intact envelope of
        an unknown version is SCHEMA_UNSUPPORTED; then the structure, the scope, the shared
        components (found through `shared`; none found is CORRUPT) and the payload digest
        are checked, and any failure is CORRUPT. The codec id is left to the caller (its
        verdict differs between the loader's two lookups).

        `payload=False` (version 3 only): the payload is neither decompressed nor hashed
        and `b""` is returned for it; the trailing digest still covers its stored bytes. For
        a reuse decision that never uses the payload (docs/internals.md "Payloads a
        resume does not use").
        """
        size = len(data)
        if size < len(MAGIC) or data[: len(MAGIC)] != MAGIC:
            raise _corrupt("bad magic")
        if size < _OVERHEAD:
            raise _corrupt("truncated")
        view = memoryview(data)
        body_end = size - _DIGEST_SIZE
        version = int.from_bytes(data[len(MAGIC) : _VERSION_END], "big")
        if version == ENVELOPE_VERSION:
            digest = _scope_digest(key, view[:body_end])
        else:
            digest = hashlib.sha256(view[:body_end]).digest()
        if digest != data[body_end:]:
            raise _corrupt("digest mismatch")
        if version not in _READ_VERSIONS:
            raise EnvelopeRejected(CheckpointState.SCHEMA_UNSUPPORTED, "unknown version")
        header_size = _PREFIX.unpack_from(data)[2]
        payload_start = _PREFIX.size + header_size
        if payload_start > body_end:
            raise _corrupt("header length out of range")
        if version == ENVELOPE_VERSION:
            return self._open_v3(data, view, key, payload_start, body_end, shared, payload)
        try:
            header = self._decoder.decode(view[_PREFIX.size : payload_start])
        except msgspec.DecodeError as exc:
            raise _corrupt("undecodable header") from exc
        if header.payload_size != body_end - payload_start:
            raise _corrupt("payload size mismatch")
        if (header.step, header.lane, header.stage, header.chunk) != (
            key.step,
            key.lane,
            key.stage,
            key.chunk,
        ):
            raise _corrupt("scope mismatch")
        if header.compression is Compression.NONE:
            if version == 1:
                raise _corrupt("a version 1 payload is always compressed")
            if header.raw_size != header.payload_size:
                raise _corrupt("raw size mismatch")
            payload = data[payload_start:body_end]
        else:
            payload = self._decompress(view[payload_start:body_end], header.raw_size)
        if hashlib.sha256(payload).hexdigest() != header.output_sha256:
            raise _corrupt("payload digest mismatch")
        return header, payload

    def _open_v3(
        self,
        data: bytes,
        view: memoryview,
        key: CheckpointKey,
        payload_start: int,
        body_end: int,
        shared: SharedLookup | None,
        want_payload: bool = True,
    ) -> tuple[EnvelopeHeader, bytes]:
        """The fixed header of a version 3 envelope whose digest (and position) held."""
        header, flags = self._parse_v3(view, _PREFIX.size, payload_start, key, shared)
        if header.payload_size != body_end - payload_start:
            raise _corrupt("payload size mismatch")
        if flags & _F_ZSTD:
            payload = (
                self._decompress(view[payload_start:body_end], header.raw_size)
                if want_payload
                else b""
            )
        else:
            payload = data[payload_start:body_end] if want_payload else b""
        if want_payload and hashlib.sha256(payload).hexdigest() != header.output_sha256:
            raise _corrupt("payload digest mismatch")
        return header, payload

    def open_facts(
        self, facts: bytes, key: CheckpointKey, shared: SharedLookup | None
    ) -> EnvelopeHeader:
        """The header of `key`'s version 3 envelope from its index facts (`envelope_facts`:
        the header's bytes as the recorder wrote them), its payload not read: what a
        resume that trusts the index decides from (docs/internals.md "Decision facts in
        the index"). Raises EnvelopeRejected (CORRUPT) as `open` does for the header."""
        if len(facts) < 1 + _V3_FIXED or facts[0] != ENVELOPE_VERSION:
            raise _corrupt("facts of another form")
        return self._parse_v3(memoryview(facts), 1, len(facts), key, shared)[0]

    def _parse_v3(
        self,
        view: memoryview,
        start: int,
        end: int,
        key: CheckpointKey,
        shared: SharedLookup | None,
    ) -> tuple[EnvelopeHeader, int]:
        """A version 3 header held in `view[start:end]` (an envelope's, or its index
        facts), checked as far as it can be without the payload: flags, lengths, the
        tail, the shared components, the producer, a raw payload's sizes."""
        header_size = end - start
        if header_size < _V3_FIXED:
            raise _corrupt("header too short")
        pos = start
        flags = view[pos]
        if flags & ~_F_KNOWN or (flags & _F_INPUT_CHUNK and flags & _F_INPUT):
            raise _corrupt("unknown header flags")
        fixed = _V3_FIXED + _DIGEST_SIZE * _STORED_DIGESTS[flags & (_F_LANE | _F_INPUT | _F_DEPS)]
        if header_size < fixed or (header_size != fixed and not flags & _F_TAIL):
            raise _corrupt("header length mismatch")
        pos += 1
        ref = bytes(view[pos : pos + _DIGEST_SIZE])
        pos += _DIGEST_SIZE
        found: list[str] = []
        for flag in (_F_LANE, _F_INPUT, _F_DEPS):
            if flags & flag:
                found.append(view[pos : pos + _DIGEST_SIZE].hex())
                pos += _DIGEST_SIZE
            else:
                found.append("")
        lane_identity, input_digest, dependencies = found
        if flags & _F_INPUT_CHUNK:
            if not key.chunk:
                raise _corrupt("input named by a chunk id the key does not have")
            input_digest = key.chunk
        output = view[pos : pos + _DIGEST_SIZE].hex()
        pos += _DIGEST_SIZE
        payload_size, raw_size = _SIZES.unpack_from(view, pos)
        pos += _SIZES.size
        tail = _EMPTY_TAIL
        if flags & _F_TAIL:
            try:
                tail = _tail_decoder.decode(view[pos:end])
            except msgspec.DecodeError as exc:
                raise _corrupt("undecodable header tail") from exc
        common = shared(ref) if shared is not None else None
        if common is None:
            raise _corrupt("shared components missing or damaged")
        provenance = tail.provenance
        if flags & _F_PRODUCER:
            producer = common.producer
            if producer is None or provenance is not None:
                raise _corrupt("provenance without its producer")
            provenance = Provenance(
                step=key.step,
                lane=key.lane,
                module_fingerprint=producer.module_fingerprint,
                kind=producer.kind,
                schema=producer.schema,
                media_type=producer.media_type,
                sha256=output,
                size=raw_size,
            )
        if flags & _F_ZSTD:
            compression = Compression.ZSTD
        else:
            compression = Compression.NONE
            if raw_size != payload_size:
                raise _corrupt("raw size mismatch")
        usage = None if tail.usage is None else LLMUsage(**msgspec.structs.asdict(tail.usage))
        header = EnvelopeHeader(
            step=key.step,
            lane=key.lane,
            stage=key.stage if type(key.stage) is Stage else Stage(key.stage),
            chunk=key.chunk,
            codec_id=common.codec_id,
            lane_identity=lane_identity,
            digests=StageDigests(common.components, input_digest, dependencies),
            output_sha256=output,
            warnings=tail.warnings if flags & _F_TAIL else [],
            provenance=provenance,
            payload_size=payload_size,
            raw_size=raw_size,
            usage=usage,
            compression=compression,
        )
        return header, flags

    def _decompress(self, compressed: memoryview, raw_size: int) -> bytes:
        if not 0 <= raw_size <= MAX_RAW_SIZE:
            raise _corrupt("raw size out of range")
        try:
            if zstandard.frame_content_size(compressed) != raw_size:
                raise _corrupt("frame size mismatch")
            payload = self._zstd.decompressor.decompress(compressed, max_output_size=raw_size)
        except zstandard.ZstdError as exc:
            raise _corrupt("undecompressable payload") from exc
        if len(payload) != raw_size:
            raise _corrupt("raw size mismatch")
        return payload


def _record(header: EnvelopeHeader, payload: bytes) -> CheckpointRecord:
    return CheckpointRecord(
        codec_id=header.codec_id,
        lane_identity=header.lane_identity,
        digests=header.digests,
        output_sha256=header.output_sha256,
        payload=payload,
        warnings=list(header.warnings),
        provenance=header.provenance,
        usage=header.usage,
    )


def _lane_names(keys: list[CheckpointKey]) -> list[str]:
    """`Workspace.checkpoint_name` of each of a lane's keys: an extract of the same
    position and scope as the first extract's is that name with its own chunk id, checked
    as `checkpoint_name` checks it (ValueError for a key unfit for a path)."""
    names: list[str] = []
    base: tuple[str, str, StoreScope | None] | None = None
    head = ""
    match = _CHUNK_ID.compiled().fullmatch
    for key in keys:
        chunk = key.chunk
        if (
            base is not None
            and key.stage is Stage.EXTRACT
            and (key.step, key.lane, key.scope) == base
        ):
            if not isinstance(chunk, str) or match(chunk) is None:
                raise ValueError("an extract checkpoint needs a 64-hex chunk id")
            names.append(head + chunk + _SUFFIX)
            continue
        name = Workspace.checkpoint_name(key)
        if base is None and key.stage is Stage.EXTRACT:
            base = (key.step, key.lane, key.scope)
            head = name[: len(name) - len(chunk) - len(_SUFFIX)]
        names.append(name)
    return names


def _repeated(
    first: CheckpointRecord, key: CheckpointKey, output: bytes, tail: memoryview | None
) -> CheckpointRecord | None:
    """The record of an extract whose header repeats its lane's `first` but for its
    output and `tail` (`_Template`, `_FactsTemplate`); None when the tail does not decode
    or holds a provenance (the record is then opened in full)."""
    warnings: list[str] = []
    usage = None
    if tail is not None:
        try:
            decoded = _tail_decoder.decode(tail)
        except msgspec.DecodeError:
            return None
        if decoded.provenance is not None:
            return None
        warnings = decoded.warnings
        if decoded.usage is not None:
            usage = LLMUsage(**msgspec.structs.asdict(decoded.usage))
    return CheckpointRecord(
        codec_id=first.codec_id,
        lane_identity=first.lane_identity,
        digests=StageDigests(first.digests.components, key.chunk, first.digests.dependencies),
        output_sha256=output.hex(),
        payload=b"",
        warnings=warnings,
        usage=usage,
    )


class _Template(NamedTuple):
    """A lane's first extract envelope, verified by `EnvelopeCodec.open`, as the bytes
    every other extract of the lane repeats: magic and version, then flags, the shared
    components' digest, lane identity and D (`fixed`; the header size between them may
    differ when there is a tail). An extract whose envelope repeats exactly those bytes
    has that header but for its output, sizes and tail, and its input is its own chunk id
    (`_F_INPUT_CHUNK`), so after its own trailing digest (over its key's position), its
    sizes and its tail (warnings and usage: an LLM extract's, issue 29) are checked it is
    that record with its chunk, output and tail (`CheckpointLoader.load_lane`, payload
    unread)."""

    lead: bytes  # magic and version
    fixed: bytes  # flags up to the output digest
    header_size: int  # the first's: every other's without a tail
    flags: int
    first: CheckpointRecord
    scope: StoreScope  # the first's: a key of another scope is opened in full

    @classmethod
    def of(cls, data: bytes, record: CheckpointRecord, scope: StoreScope) -> _Template | None:
        header_size = _PREFIX.unpack_from(data)[2]
        flags = data[_PREFIX.size]
        if flags & (_F_PRODUCER | _F_INPUT) or not flags & _F_INPUT_CHUNK:
            return None  # a provenance or a stored input: each is opened in full
        if record.provenance is not None:
            return None
        end = _PREFIX.size + _V3_FIXED - _DIGEST_SIZE - _SIZES.size
        end += _DIGEST_SIZE * _STORED_DIGESTS[flags & (_F_LANE | _F_DEPS)]
        return cls(data[:_VERSION_END], data[_PREFIX.size : end], header_size, flags, record, scope)

    def record(self, data: bytes, key: CheckpointKey) -> CheckpointRecord | None:
        """`data` as the record of `key` when it repeats the template and is intact;
        None: open it in full (which then says what is wrong)."""
        fixed = self.fixed
        at = _PREFIX.size + len(fixed)  # the output digest
        body_end = len(data) - _DIGEST_SIZE
        if (
            body_end < at + _DIGEST_SIZE + _SIZES.size
            or not data.startswith(self.lead)
            or not data.startswith(fixed, _PREFIX.size)
        ):
            return None
        header_size = _PREFIX.unpack_from(data)[2]
        tailed = self.flags & _F_TAIL
        if header_size != self.header_size and not tailed:
            return None
        payload_start = _PREFIX.size + header_size
        tail_start = at + _DIGEST_SIZE + _SIZES.size
        if payload_start > body_end or payload_start < tail_start + (1 if tailed else 0):
            return None
        if _scope_digest(key, memoryview(data)[:body_end]) != data[body_end:]:
            return None
        payload_size, raw_size = _SIZES.unpack_from(data, at + _DIGEST_SIZE)
        if payload_size != body_end - payload_start:
            return None
        if not self.flags & _F_ZSTD and raw_size != payload_size:
            return None
        tail = memoryview(data)[tail_start:payload_start] if tailed else None
        return _repeated(self.first, key, data[at : at + _DIGEST_SIZE], tail)


class _FactsTemplate(NamedTuple):
    """A lane's first extract facts, decided by `EnvelopeCodec.open_facts`, as the bytes
    every other extract's facts of the lane repeat (the version, flags, the shared
    components' digest, lane identity and D): an extract whose facts repeat them has that
    header but for its output, sizes and tail, its input its own chunk id, as `_Template`
    says of envelopes (docs/internals.md "Decision facts in the index")."""

    lead: bytes
    flags: int
    first: CheckpointRecord
    scope: StoreScope

    @classmethod
    def of(cls, facts: bytes, record: CheckpointRecord, scope: StoreScope) -> _FactsTemplate | None:
        flags = facts[1]
        if flags & (_F_PRODUCER | _F_INPUT) or not flags & _F_INPUT_CHUNK:
            return None
        if record.provenance is not None:
            return None
        end = 2 + _DIGEST_SIZE * (1 + _STORED_DIGESTS[flags & (_F_LANE | _F_DEPS)])
        return cls(facts[:end], flags, record, scope)

    def record(self, facts: bytes, key: CheckpointKey) -> CheckpointRecord | None:
        """`facts` as the record of `key` when they repeat the template; None: decide
        them in full (which then says what is wrong)."""
        lead = self.lead
        at = len(lead)
        tail_start = at + _DIGEST_SIZE + _SIZES.size
        tailed = self.flags & _F_TAIL
        if not facts.startswith(lead) or len(facts) < tail_start + (1 if tailed else 0):
            return None
        if not tailed and len(facts) != tail_start:
            return None
        payload_size, raw_size = _SIZES.unpack_from(facts, at + _DIGEST_SIZE)
        if not self.flags & _F_ZSTD and raw_size != payload_size:
            return None
        tail = memoryview(facts)[tail_start:] if tailed else None
        return _repeated(self.first, key, facts[at : at + _DIGEST_SIZE], tail)


# --------------------------------------------------------------------------- loader


class CheckpointLoader:
    """Reads checkpoints for --resume / --recompute; never writes, never raises on content."""

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace
        self._codec = EnvelopeCodec()
        self._manifest: WorkspaceState | None = None
        self._manifest_lock = threading.Lock()
        # Asked by every job thread: the first answer is kept, under a lock held while it is
        # read (docs/internals.md "Objects shared between threads").
        self._pointer_lock = threading.Lock()
        self._pointers: dict[tuple[str, str, Stage], StoreScope | None] = {}
        # Shared components entries read so far, by digest: a step's stage has one, read
        # once per invocation. Only intact entries are kept (the recorder may write a
        # missing one later in the run); a dict's get and set are atomic, and two threads
        # reading the same entry at once both keep an equal value.
        self._shared: dict[bytes, SharedComponents] = {}
        self._lanes_read: set[tuple[str, str]] = set()  # `Workspace.read_lane` done
        # `trust_index_facts`: `load_lane` decides a record whose payload it does not use
        # from its index facts, without reading it
        self._trust_facts = False

    def trust_index_facts(self) -> None:
        """Let `load_lane` take a record's index facts (its header as the recorder wrote
        it, `envelope_facts`) for the record when it does not use its payload, instead
        of reading the record and checking its trailing digest: `input_check = "stat"`
        trusts the cache's own facts as it trusts an input's stat facts, and a payload
        used is still read and verified by its digest (docs/internals.md "Decision
        facts in the index")."""
        self._trust_facts = True

    def _shared_components(self, ref: bytes) -> SharedComponents | None:
        """The shared components entry named `ref`; None when absent, unreadable or not
        intact (the envelope naming it is then CORRUPT)."""
        found = self._shared.get(ref)
        if found is not None:
            return found
        try:
            data = self._workspace.read(shared_name(ref))
        except FsError:
            return None
        found = decode_shared(data, ref)
        if found is not None:
            self._shared[ref] = found
        return found

    def _manifest_state(self) -> WorkspaceState:
        # A verdict is kept for the whole invocation, except ABSENT: the recorder may create
        # the manifest mid-run. A foreign or damaged workspace stays untrusted even after the
        # recorder has replaced its manifest, so one run never mixes the two verdicts.
        # Job threads ask at once: the verdict is read under a lock, so all see the same.
        if self._manifest is not None:
            return self._manifest
        with self._manifest_lock:
            if self._manifest is not None:
                return self._manifest
            state = self._workspace.manifest_state()
            if state is not WorkspaceState.ABSENT:
                self._manifest = state
            return state

    def _read(self, name: str) -> bytes | None:
        """The file's bytes, None when absent; an untrustworthy read is EnvelopeRejected."""
        try:
            return self._workspace.read(name)
        except FsNotFound:
            return None
        except FsError as exc:  # EACCES, EIO, a symlink or FIFO planted on the path...
            raise _corrupt("unreadable") from exc

    # `load(..., payload=False)` is understood (the runner asks it of this loader only)
    defers_payloads = True

    def load(self, key: CheckpointKey, codec_id: str, *, payload: bool = True) -> LoadedCheckpoint:
        """MISSING, PRESENT (with the record), CORRUPT, SCHEMA_UNSUPPORTED or CODEC_MISMATCH.

        `payload=False`: a version 3 record's payload is not decompressed nor hashed, and
        the record holds `b""` for it; whoever uses it loads it again with `payload=True`
        (docs/internals.md "Payloads a resume does not use").

        A scoped key is found by what it is: its own file, else a file of the old layout
        of the same scope. When neither exists, the verdict on the lane's most recently
        written checkpoint at that position is returned instead (its `latest` pointer, then
        the old layout), so the runner can name what changed: that record is of another
        scope and is never reused (docs/internals.md "Checkpoint store").
        """
        manifest = self._manifest_state()
        if manifest is WorkspaceState.UNSUPPORTED:
            Workspace.checkpoint_name(key)  # an unfit key still raises
            return LoadedCheckpoint(state=CheckpointState.SCHEMA_UNSUPPORTED)
        if manifest is WorkspaceState.CORRUPT:
            Workspace.checkpoint_name(key)
            return LoadedCheckpoint(state=CheckpointState.CORRUPT)
        lane = (key.step, key.lane)
        if lane not in self._lanes_read:  # one index read for the lane's loads
            self._lanes_read.add(lane)
            self._workspace.read_lane(*lane)
        scope = key.scope
        if scope is None:
            found = self._load_at(
                Workspace.checkpoint_name(key), key, codec_id, manifest, None, payload
            )
            return found[0] if found else LoadedCheckpoint(state=CheckpointState.MISSING)
        own = self._load_at(Workspace.checkpoint_name(key), key, codec_id, manifest, scope, payload)
        if own is not None:
            return own[0]
        position = key.position
        legacy = self._load_at(
            Workspace.checkpoint_name(position), position, codec_id, manifest, None, payload
        )
        if legacy is not None and legacy[1] is not None and _matches(legacy[1], scope, key.stage):
            return legacy[0]
        latest = self._latest(key.step, key.lane, Stage(key.stage))
        if latest is not None and latest != scope:
            other = msgspec.structs.replace(key, scope=latest)
            try:
                name = Workspace.checkpoint_name(other)
            except ValueError:
                name = None
            found = (
                self._load_at(name, other, codec_id, manifest, latest, payload) if name else None
            )
            if found is not None:
                return found[0]
        return legacy[0] if legacy is not None else LoadedCheckpoint(state=CheckpointState.MISSING)

    def load_lane(
        self, keys: list[CheckpointKey], codecs: list[str], payloads: list[bool]
    ) -> list[CheckpointRecord] | None:
        """Each key's record when every one is PRESENT under its own scope, else None: a
        lane reused as a whole (domain/runner/reused_lane.py; docs/internals.md "Reusing
        a lane as a whole"). The records are read together (`Workspace.read_many`: one
        index query per directory, reads in segment order) and each is verified as `load`
        verifies it (its trailing digest over the key's position, its header, the
        scope, the codec; its payload's digest when `payloads` asks for it); a name the
        batch does not give is loaded on its own. None never says why: the lane's walk
        then loads and decides each stage, and says it."""
        if self._manifest_state() is not WorkspaceState.OK:
            return None
        rows: list[Found | None] | None = None
        try:
            names = _lane_names(keys)
            if self._trust_facts:
                rows = self._workspace.lookup_many(names)
            if rows is None:
                datas = self._workspace.read_many(names)
            else:  # only the records whose payload is used, or that have no facts
                datas = self._workspace.read_found(
                    [
                        row if row is not None and (payload or row.facts is None) else None
                        for row, payload in zip(rows, payloads, strict=True)
                    ]
                )
        except (FsError, ValueError):
            return None
        out: list[CheckpointRecord] = []
        shared = self._shared_components
        template: _Template | None = None
        facts_template: _FactsTemplate | None = None
        codec_of = self._codec
        for i, (key, data, codec, payload) in enumerate(
            zip(keys, datas, codecs, payloads, strict=True)
        ):
            scope = key.scope
            if scope is None:
                return None
            facts = rows[i].facts if rows is not None and rows[i] is not None else None  # type: ignore[union-attr]
            if facts is not None and not payload:
                if facts_template is not None and key.chunk and scope == facts_template.scope:
                    found = facts_template.record(facts, key)
                    if found is not None:
                        out.append(found)
                        continue
                try:
                    header = codec_of.open_facts(facts, key, shared)
                except EnvelopeRejected:
                    return None
                if header.codec_id != codec or not _matches(header, scope, key.stage):
                    return None
                record = _record(header, b"")
                if facts_template is None and key.chunk:
                    facts_template = _FactsTemplate.of(facts, record, scope)
                out.append(record)
                continue
            if data is None:
                loaded = self.load(key, codec, payload=payload)
                if loaded.record is None or loaded.state is not CheckpointState.PRESENT:
                    return None
                out.append(loaded.record)
                continue
            if template is not None and not payload and key.chunk and scope == template.scope:
                found = template.record(data, key)
                if found is not None:
                    out.append(found)
                    continue
            try:
                header, body = self._codec.open(data, key, shared, payload=payload)
            except EnvelopeRejected:
                return None
            if header.codec_id != codec or not _matches(header, scope, key.stage):
                return None
            record = _record(header, body)
            if template is None and not payload and key.chunk:
                template = _Template.of(data, record, scope)
            out.append(record)
        return out

    def _latest(self, step: str, lane: str, stage: Stage) -> StoreScope | None:
        """The stage's `latest` pointer as it was when this loader first asked (so the
        run's own writes do not move what it compares with, and `plan` reads the same)."""
        where = (step, lane, stage)
        with self._pointer_lock:
            if where not in self._pointers:
                self._pointers[where] = self._workspace.latest_scope(step, lane, stage)
            return self._pointers[where]

    def _load_at(
        self,
        name: str,
        key: CheckpointKey,
        codec_id: str,
        manifest: WorkspaceState,
        scope: StoreScope | None = None,
        payload: bool = True,
    ) -> tuple[LoadedCheckpoint, EnvelopeHeader | None] | None:
        """The verdict on one file and its header; None when there is no file.

        With `scope`, an envelope that is not of that scope is CORRUPT: a file copied or
        moved to another scope's place is never taken for it.
        """
        try:
            data = self._read(name)
            if data is None:
                return None
            if manifest is WorkspaceState.ABSENT:
                raise _corrupt("checkpoint without a workspace manifest")
            # compares the position only
            header, body = self._codec.open(data, key, self._shared_components, payload=payload)
            if scope is not None and not _matches(header, scope, key.stage):
                raise _corrupt("scope mismatch")
        except EnvelopeRejected as rejected:
            return LoadedCheckpoint(state=rejected.state), None
        if header.codec_id != codec_id:
            return LoadedCheckpoint(state=CheckpointState.CODEC_MISMATCH), header
        record = _record(header, body)
        return LoadedCheckpoint(state=CheckpointState.PRESENT, record=record), header

    def load_accepted_artifact(
        self, step: str, lane: str, lane_identity: str, codec_id: str
    ) -> RestoredArtifact:
        """A required producer's normalize artifact for --recompute
        (docs/operations.md "Selective recomputation").

        Reads only normalize files (never extract or merge, never dependency
        fingerprints); requires a schema-v3 workspace and the exact, non-empty lane
        identity. Every stored normalize of that lane identity is a candidate, whatever
        its D (the lane's latest first), then the latest of another identity and the old
        layout's file (which give IDENTITY_MISMATCH). Provenance is returned, not judged:
        the runner checks it.
        """
        key = CheckpointKey(step, lane, Stage.NORMALIZE)
        legacy = Workspace.checkpoint_name(key)
        manifest = self._manifest_state()
        if manifest in (WorkspaceState.UNSUPPORTED, WorkspaceState.CORRUPT):
            return RestoredArtifact(state=PredecessorState.CORRUPT)
        names = self._workspace.normalize_candidates(step, lane, lane_identity)
        latest = self._latest(step, lane, Stage.NORMALIZE)
        if latest is not None:
            latest_name = Workspace.checkpoint_name(msgspec.structs.replace(key, scope=latest))
            if latest_name in names:
                names.remove(latest_name)
                names.insert(0, latest_name)
            else:
                names.append(latest_name)
        names.append(legacy)
        first: RestoredArtifact | None = None
        for name in names:
            verdict = self._accepted_at(name, key, lane_identity, codec_id, manifest)
            if verdict is None:
                continue
            if verdict.state is PredecessorState.RESTORED:
                return verdict
            first = first or verdict
        return first or RestoredArtifact(state=PredecessorState.MISSING)

    def _accepted_at(
        self,
        name: str,
        key: CheckpointKey,
        lane_identity: str,
        codec_id: str,
        manifest: WorkspaceState,
    ) -> RestoredArtifact | None:
        try:
            data = self._read(name)
            if data is None:
                return None
            if manifest is WorkspaceState.ABSENT:
                raise _corrupt("checkpoint without a workspace manifest")
            header, payload = self._codec.open(data, key, self._shared_components)
        except EnvelopeRejected:
            # A schema failure of a required predecessor is predecessor_corrupt (docs/operations.md
            # "Reason codes").
            return RestoredArtifact(state=PredecessorState.CORRUPT)
        if not lane_identity or header.lane_identity != lane_identity:
            return RestoredArtifact(state=PredecessorState.IDENTITY_MISMATCH)
        if header.codec_id != codec_id:
            return RestoredArtifact(state=PredecessorState.CORRUPT)
        return RestoredArtifact(state=PredecessorState.RESTORED, record=_record(header, payload))

    def stored_dependencies(self, step: str, lane: str, identity: str) -> list[str]:
        """The D values the lane has checkpoints under for a step identity (for `plan`)."""
        return self._workspace.stored_dependencies(step, lane, identity)


# --------------------------------------------------------------------------- recorder


def _write_error(key: CheckpointKey, exc: OSError) -> CheckpointWriteError:
    detail = exc.detail if isinstance(exc, FsError) else (exc.strerror or "I/O error")
    error = CheckpointWriteError(f"checkpoint for {_scope(key)} was not written: {detail}")
    error.__cause__ = exc
    return error


def _scope(key: CheckpointKey) -> str:
    lane = repr(key.lane)
    if len(lane) > 120:
        lane = lane[:117] + "..."
    where = f"step {key.step!r} lane {lane} stage {Stage(key.stage).value}"
    if key.chunk:
        where += f" chunk {key.chunk[:12]}"
    return where


class CheckpointRecorder:
    """Persists checkpoints atomically; the only writer under `workspaces/`.

    Envelopes are written without an fsync each and made durable in groups: `sync` (the
    journal session calls it before it commits a batch) is one `syncfs` for every
    envelope written since the last one (docs/internals.md "Group durability"). A file a
    crash loses or tears before that fails its digest and is recomputed.
    """

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace
        self._codec = EnvelopeCodec()
        self._manifest_written = False
        self._lock = threading.Lock()
        # `_pointed` and the pointer files are read and written by every writer thread:
        # one lock over the check, the file and the entry. Held for I/O only the first
        # time a lane's stage is written, and when its scope changes
        # (docs/internals.md "Objects shared between threads").
        self._pointer_lock = threading.Lock()
        self._pointed: dict[tuple[str, str, Stage], StoreScope] = {}
        # Shared components entries written by this recorder (content-addressed: written
        # once per invocation, before the first envelope naming each).
        self._shared_lock = threading.Lock()
        self._shared: set[str] = set()
        self._unsynced = 0
        self._count_lock = threading.Lock()
        self.sync_errors: list[str] = []

    def _ensure_manifest(self) -> None:
        """Write `workspace.json` before the first envelope unless it is already exact.

        A manifest of another schema (or an unreadable one) is replaced: the workspace
        is a cache, and the files this recorder writes are schema v3.
        """
        if self._manifest_written:
            return
        with self._lock:
            if self._manifest_written:
                return
            expected = self._workspace.manifest_bytes()
            try:
                current: bytes | None = self._workspace.read(WORKSPACE_MANIFEST)
            except FsNotFound:
                current = None
            if current != expected:
                self._workspace.write(WORKSPACE_MANIFEST, expected)
            self._manifest_written = True

    def write(self, key: CheckpointKey, record: CheckpointRecord) -> tuple[str, int]:
        """Persist `record` for `key`; returns (sha256, size) of the file written.

        A scoped key must be the record's own scope (a caller bug otherwise): the file then
        lands where a lookup of what the stage is finds it, and the lane's `latest` pointer
        names that scope (docs/internals.md "Checkpoint store").
        """
        result = self.write_many([(key, record)])[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def write_many(
        self, items: list[tuple[CheckpointKey, CheckpointRecord]]
    ) -> list[tuple[str, int] | BaseException]:
        """`write` of each (key, record), their entries written together: with a packed
        store, the envelopes and the lane pointers they move in one index transaction
        (the checkpoint write pool's queue, docs/internals.md "Recorder"). Per item, its
        (sha256, size) or what its `write` would have raised; a failed write fails every
        item it carried."""
        out: list[tuple[str, int] | BaseException | None] = [None] * len(items)
        entries: list[tuple[str, bytes]] = []
        facts: list[bytes | None] = []  # each envelope's (`envelope_facts`)
        members: list[tuple[int, CheckpointKey, str, int]] = []
        moves: dict[tuple[str, str, Stage], StoreScope] = {}
        for i, (key, record) in enumerate(items):
            try:
                if key.scope is not None and not _record_of(record, key.scope, Stage(key.stage)):
                    raise ValueError("a checkpoint key's scope is not the record's own")
                name = Workspace.checkpoint_name(key)
                raw = self._workspace.raw_payloads
                sealed = self._codec.seal(key.position, record, compress=not raw)
                self._ensure_manifest()
                if sealed.shared_name is not None and sealed.shared is not None:
                    self._ensure_shared(sealed.shared_name, sealed.shared)
            except OSError as exc:
                out[i] = _write_error(key, exc)
                continue
            except Exception as exc:
                out[i] = exc
                continue
            data = sealed.data
            entries.append((name, data))
            facts.append(envelope_facts(data) if sealed.shared_name is not None else None)
            members.append((i, key, hashlib.sha256(data).hexdigest(), len(data)))
            if key.scope is not None:
                where = (key.step, key.lane, Stage(key.stage))
                if self._pointed.get(where) != key.scope:  # set once per where: no lock
                    moves[where] = key.scope
        try:
            if moves:
                with self._pointer_lock:
                    pointers = self._pointers(moves)
                    self._workspace.write_entries(
                        entries + pointers, facts + [None] * len(pointers)
                    )
                    self._pointed.update(moves)
            elif len(entries) == 1:
                self._workspace.write(*entries[0], durable=False, facts=facts[0])
            elif entries:
                self._workspace.write_entries(entries, facts)
        except OSError as exc:
            for i, key, _, _ in members:
                out[i] = _write_error(key, exc)
            return out  # type: ignore[return-value]
        with self._count_lock:
            self._unsynced += len(members)
        for i, _, sha, size in members:
            out[i] = (sha, size)
        return out  # type: ignore[return-value]

    def _pointers(self, moves: dict[tuple[str, str, Stage], StoreScope]) -> list[tuple[str, bytes]]:
        """The `latest` pointers to write for `moves` (under the pointer lock): those not
        already naming their scope (a pointer of either form naming it stays as it is)."""
        out = []
        for (step, lane, stage), scope in moves.items():
            if self._pointed.get((step, lane, stage)) == scope:
                continue
            pointer = Workspace.pointer_name(step, lane, stage)
            try:
                current: bytes | None = self._workspace.read(pointer)
            except FsNotFound:
                current = None
            if current is None or _pointer_of(current) != scope:
                out.append((pointer, _pointer_bytes(scope)))
        return out

    @property
    def writes_wait_on_network(self) -> bool:
        """Whether a write is a network put (an object-storage cache): such writes want
        threads; a local packed store's are a few microseconds of disk each."""
        return self._workspace.remote

    def _ensure_shared(self, name: str, data: bytes) -> None:
        """Write a shared components entry once per invocation, before the envelopes that
        name it (durable with them at the next sync; a rewrite of the same bytes in the
        packed store writes nothing)."""
        if name in self._shared:
            return
        with self._shared_lock:
            if name in self._shared:
                return
            self._workspace.write(name, data, durable=False)
            self._shared.add(name)

    def sync(self) -> None:
        """Make every envelope written so far durable (one `syncfs`); never raises.

        A failure is kept in `sync_errors` (the run reports it, exit 3): the envelopes may
        then be lost by a crash, which their digests detect.
        """
        with self._count_lock:
            pending, self._unsynced = self._unsynced, 0
        if not pending:
            return
        try:
            self._workspace.sync()
        except OSError as exc:
            detail = exc.detail if isinstance(exc, FsError) else (exc.strerror or "I/O error")
            self.sync_errors.append(f"{pending} checkpoint(s) may not be durable: {detail}")
        except RuntimeError as exc:  # an object store's pack not written (ObjectStoreUnavailable)
            self.sync_errors.append(f"{pending} checkpoint(s) may not be durable: {exc}")
