"""The cache's entries on S3-compatible object storage (docs/internals.md "Object-storage
cache", docs/operations.md "Object-storage cache").

`cache_root = "s3://bucket/prefix"` keeps what the packed store keeps (checkpoint
envelopes, lane pointers, `workspace.json`, chunk plans, LLM replies) in a bucket, under
the same names, with the interface `PackedStore` offers its users (`get`, `put`, `names`,
`children`, `entries`, `remove`, `compact`). SQLite cannot live on object storage and
there is no rename there. A run's small entries are group-committed into packs:

    <prefix>/packs/<ts>-<sha256>          many records, the index in front
                                          (`s3_packs.py`), written once with
                                          `If-None-Match: *`; the newest record of a
                                          name wins (the writer's Lamport clock, then
                                          the key)
    <prefix>/refs/<name>                  a name of a rewritten kind (lane pointers,
                                          `workspace.json`), its bytes inline; or
                                          `RJS3 1`, a sha256 and a size naming
    <prefix>/objects/<sha[:2]>/<sha256>   the bytes of an entry over 1 MiB, of a Dask
                                          worker's write, or of the layout before packs

A reader lists the packs, reads the indexes it has not seen (kept in the mirror), and
checks every record against its sha256: a wrong, torn or missing record or object is
returned as b"" (the envelope's or plan's own digest then makes it `checkpoint_corrupt`,
recomputed, never used). Packs and objects are kept in a bounded read-through cache in
the local mirror directory (`<user cache dir>/s3/<identity>/s3-cache/`), verified again
when read, so a machine downloads each once.

Everything else the cache root holds as files (its lock file, stage leases' lock file,
LLM call logs) stays in the local mirror directory, whose `remote.json` names the bucket:
any code that opens a cache root's store through `open_store` gets this store for a
mirror. What must hold across machines is a side object in the bucket (`meta/`): the
journal registry, the cache lock's leases, stage leases (`stage_leases.BucketStageLeases`).
A Dask worker opens its own store of the bucket and writes checkpoints itself; the
coordinator checks each against its ref (`ref_of`) before journaling it.

Credentials and the endpoint come from the client's standard places (`AWS_*` variables,
instance metadata; an `AWS_PROFILE` through boto3 when it is installed); only the endpoint
URL and the bucket and prefix are recorded (the cache identity), never a key.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from runjournal.adapters.fsroot import AlreadyExists, FsError, FsIOError, FsNotFound, FsRoot
from runjournal.adapters.packed_store import Compaction, PackedEntry, PackedStore
from runjournal.adapters.s3_packs import (
    HEAD_BYTES,
    PACK_PREFIX,
    PackError,
    PackIndex,
    PackRecord,
    decode_index,
    encode_pack,
    index_span,
    pack_key,
    parse_pack_key,
    records_of,
)
from runjournal.domain.lazy_pattern import LazyPattern

__all__ = [
    "LOCAL_CACHE_BYTES",
    "REMOTE_MARKER",
    "ObjectStoreUnavailable",
    "RemoteCacheUnavailable",
    "S3PackedStore",
    "S3Url",
    "endpoint_from_env",
    "is_s3_url",
    "local_cache_root",
    "mirror_base",
    "mirror_dir",
    "open_store",
    "parse_s3_url",
    "prepare_mirror",
    "prepare_remote_cache",
    "remote_of",
    "s3_client_available",
]

SCHEME = "s3://"
REMOTE_MARKER = "remote.json"
_LOCAL_CACHE = "s3-cache"
_REFS = "refs"
_OBJECTS = "objects"
_META = "meta"
_REF_MAGIC = b"RJS3 1\n"
# A ref that carries its entry's bytes after the digest and size (a name of a rewritten
# kind up to `_INLINE` bytes: one PUT a write, one GET a read, no object).
_INLINE_MAGIC = b"RJS3 2\n"
_INLINE = 4096
# The local read-through cache's bound; the oldest objects go first past it.
LOCAL_CACHE_BYTES = 1 << 30
# Bounded waits: a request gives up after `_TIMEOUT`, retries (5xx, connection errors)
# stop after `_RETRIES` or `_RETRY_WINDOW`, whichever comes first.
_TIMEOUT = "30s"
_CONNECT_TIMEOUT = "5s"
_RETRIES = 3
_RETRY_WINDOW = timedelta(seconds=60)
# An object no ref names is deleted by `compact` only once this old: a writer puts the
# object before the ref that names it.
_ORPHAN_GRACE_S = 3600
_BUCKET = LazyPattern(r"^[a-z0-9][a-z0-9.\-_]{1,61}[a-z0-9]$")
_DIGEST = LazyPattern(r"[0-9a-f]{64}")
_LIST_WORKERS = 16
# Packs (docs/internals.md "Object-storage cache"): a run's small entries are group
# committed, a pack written once it holds `PACK_RECORDS` records or `PACK_BYTES` bytes, or
# `PACK_DELAY_S` after its first record, and always before what depends on it being seen
# (`flush`: a stage lease's release, the store's close at the run's end).
PACK_RECORDS = 1000
PACK_BYTES = 8 << 20
PACK_DELAY_S = 1.0
# Entries larger than this stay objects of their own, named by a ref.
PACK_LARGE = 1 << 20
# A reader that does not find a name in the packs it listed lists them again when its
# listing is older than this (a pack another machine wrote since), or when told to
# (`refresh`: a stage lease it waited for).
VIEW_TTL_S = 10.0
# A pack whose every record is superseded is deleted by `compact` once the packs that
# supersede it are this old (a reader that listed it and finds it gone lists again).
PACK_GRACE_S = 900
# Packs up to this size are read whole into the local read-through cache; larger ones by
# the range of each record.
_WHOLE_PACK = 32 << 20
_INDEX_FRONT = 64 << 10
_LOCAL_INDEXES = "s3-packs"
_HELD_PACKS = 8
_SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


@dataclass(frozen=True, slots=True)
class S3Url:
    """`s3://bucket/prefix`, checked."""

    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{SCHEME}{self.bucket}"


def is_s3_url(text: object) -> bool:
    return isinstance(text, str) and text.strip().lower().startswith(SCHEME)


def parse_s3_url(text: str) -> S3Url:
    """`s3://bucket[/prefix]`; ValueError naming what is wrong. No credentials, query or
    `..` segment is accepted (a URL is recorded, so it must carry nothing secret)."""
    raw = text.strip()
    if not raw.lower().startswith(SCHEME):
        raise ValueError("an s3://bucket/prefix URL")
    rest = raw[len(SCHEME) :]
    if any(c in rest for c in "@?#\\") or any(ord(c) < 0x20 for c in rest):
        raise ValueError("s3://bucket/prefix without credentials, query or fragment")
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.match(bucket):
        raise ValueError("s3://bucket/prefix with a valid bucket name")
    parts = [p for p in prefix.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise ValueError("s3://bucket/prefix without '.' or '..' segments")
    return S3Url(bucket, "/".join(parts))


def endpoint_from_env(env: Mapping[str, str]) -> str:
    """The S3 endpoint the client will use, as the standard variables give it ("" for
    AWS's own, chosen by region)."""
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"):
        value = env.get(name, "").strip()
        if value:
            return value.rstrip("/")
    return ""


def _identity(url: S3Url, endpoint: str) -> str:
    return hashlib.sha256(f"{endpoint}\n{url.bucket}\n{url.prefix}".encode()).hexdigest()[:20]


def mirror_dir(base: str, url: S3Url, endpoint: str) -> str:
    """The local directory that stands for an S3 cache root on this machine."""
    return os.path.join(base, "s3", _identity(url, endpoint))


def mirror_base() -> str:
    """The user cache directory, where mirror directories live (the default cache root)."""
    import platformdirs

    return os.path.realpath(os.path.expanduser(platformdirs.user_cache_dir("runjournal")))


def local_cache_root(cache_root: str, env: Mapping[str, str]) -> str:
    """The local directory of a recorded cache root: itself, or for `s3://...` this
    machine's mirror of it (the endpoint as `env` gives it)."""
    if not is_s3_url(cache_root):
        return cache_root
    return mirror_dir(mirror_base(), parse_s3_url(cache_root), endpoint_from_env(env))


def s3_client_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("obstore") is not None


class RemoteCacheUnavailable(FsError):
    """An `s3://` cache root this installation cannot use (the `s3` extra is missing):
    an FsError of the cache root, so a command reports it as one line (exit 2)."""


def prepare_remote_cache(config: Any, open_root: Callable[..., FsRoot]) -> None:
    """Make the mirror directory of a configuration whose `cache_root` is `s3://...`
    (`cache_remote`); RemoteCacheUnavailable without the client, FsError for a mirror
    that cannot be made."""
    if not s3_client_available():
        raise RemoteCacheUnavailable(
            config.cache_remote,
            errno.ENOPKG,
            "needs the s3 extra: pip install 'runjournal[s3]'",
        )
    # The client reads the credentials itself; their values are hidden wherever text is
    # redacted (an error message that quoted one), as an LLM key is (docs/internals.md
    # "Known secrets").
    from runjournal.adapters.secrets import remember_secrets

    remember_secrets(os.environ.get(name) for name in _SECRET_VARIABLES)
    prepare_mirror(open_root, config.cache_root, config.cache_remote, config.cache_endpoint or "")


def prepare_mirror(open_root: Callable[..., FsRoot], path: str, remote: str, endpoint: str) -> None:
    """Create the mirror directory and its `remote.json` (idempotent), the directory
    opened with `open_root` (the composition root's). Raises FsError."""
    url = parse_s3_url(remote)
    marker = json.dumps(
        {"url": url.url, "endpoint": endpoint}, sort_keys=True, separators=(",", ":")
    ).encode()
    with open_root(path, create=True) as root:
        try:
            current = root.read_bytes(REMOTE_MARKER)
        except FsNotFound:
            current = None
        if current != marker:
            root.write_bytes(REMOTE_MARKER, marker, overwrite=True, durable=True)


def remote_of(root: FsRoot) -> tuple[S3Url, str] | None:
    """The bucket a mirror directory stands for, with its endpoint; None for a plain
    cache root."""
    try:
        data = root.read_bytes(REMOTE_MARKER)
    except FsNotFound:
        return None
    try:
        value = json.loads(data)
        return parse_s3_url(value["url"]), str(value.get("endpoint") or "")
    except (ValueError, KeyError, TypeError) as exc:
        raise FsIOError(REMOTE_MARKER, errno.EINVAL, f"unreadable: {exc}") from None


def open_store(root: FsRoot) -> PackedStore | S3PackedStore:
    """The store of a cache root: its packed store, or the bucket its mirror names."""
    remote = remote_of(root)
    if remote is None:
        return PackedStore(root)
    return S3PackedStore(remote[0], remote[1], local=root, packs=True)


def _error(name: str, exc: BaseException) -> FsIOError:
    text = str(exc).strip().splitlines()
    detail = text[0] if text else type(exc).__name__
    return FsIOError(name, errno.EIO, f"object store: {detail[:300]}")


class ObjectStoreUnavailable(RuntimeError):
    """A write the object store refused or could not take after the client's bounded
    retries. Not an OSError on purpose: a local disk's failed checkpoint write lets the
    run go on (exit 3), but every later write to an unreachable bucket fails the same way,
    so the run stops with this one line (docs/operations.md "Object-storage cache")."""


def _encode_ref(digest: str, size: int) -> bytes:
    return _REF_MAGIC + f"{digest}\n{size}\n".encode()


def _encode_inline(digest: str, data: bytes) -> bytes:
    return _INLINE_MAGIC + f"{digest}\n{len(data)}\n".encode() + data


def _decode_inline(data: bytes) -> tuple[str, int, bytes] | None:
    """(sha256, size, bytes) of an inline ref; None when it is not one or does not
    verify (read as corrupt)."""
    parts = data[len(_INLINE_MAGIC) :].split(b"\n", 2)
    if len(parts) != 3:
        return None
    decoded = _decode_ref(_REF_MAGIC + parts[0] + b"\n" + parts[1] + b"\n")
    if decoded is None:
        return None
    digest, size = decoded
    body = parts[2]
    if len(body) != size or hashlib.sha256(body).hexdigest() != digest:
        return None
    return digest, size, body


def _decode_ref(data: bytes) -> tuple[str, int] | None:
    if data.startswith(_INLINE_MAGIC):
        inline = _decode_inline(data)
        return None if inline is None else inline[:2]
    if not data.startswith(_REF_MAGIC):
        return None
    lines = data[len(_REF_MAGIC) :].split(b"\n")
    if len(lines) != 3 or lines[2] != b"":
        return None
    try:
        digest = lines[0].decode("ascii")
        size = int(lines[1])
    except (UnicodeDecodeError, ValueError):
        return None
    if not _DIGEST.fullmatch(digest) or size < 0:
        return None
    return digest, size


def _object_key(digest: str) -> str:
    return f"{_OBJECTS}/{digest[:2]}/{digest}"


def _make_client(url: S3Url, endpoint: str) -> Any:
    """An obstore S3Store: credentials, region and endpoint from the environment (the
    client reads `AWS_*` and instance metadata itself); `AWS_PROFILE` through boto3."""
    from obstore.store import S3Store

    options: dict[str, Any] = {"timeout": _TIMEOUT, "connect_timeout": _CONNECT_TIMEOUT}
    if endpoint.startswith("http://"):
        options["allow_http"] = True
    kwargs: dict[str, Any] = {}
    if endpoint:
        kwargs["endpoint"] = endpoint
    if os.environ.get("AWS_PROFILE") and not os.environ.get("AWS_ACCESS_KEY_ID"):
        with contextlib.suppress(ImportError):
            import boto3
            from obstore.auth.boto3 import Boto3CredentialProvider

            kwargs["credential_provider"] = Boto3CredentialProvider(boto3.Session())
    return S3Store(
        url.bucket,
        prefix=url.prefix or None,
        client_options=options,
        retry_config={"max_retries": _RETRIES, "retry_timeout": _RETRY_WINDOW},
        **kwargs,
    )


class _Requests:
    """Requests this store made, by kind (`bench/bench_s3.py`, the tests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {"GET": 0, "PUT": 0, "LIST": 0, "DELETE": 0}

    def count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1


def rewritten(name: str) -> bool:
    """Whether `name` is of a kind a cache rewrites in place (`workspace.json`, a lane's
    `latest.<stage>` pointers): those keep a ref each, read fresh by every `get`; every
    other kind is written once per content and goes into packs."""
    leaf = name.rpartition("/")[2]
    return leaf == "workspace.json" or leaf.startswith("latest.")


class S3PackedStore:
    """Names to bytes in a bucket (see the module's docstring); shared by threads."""

    holds_manifests = True  # `workspace.json` is an entry too: the bucket is the cache

    def __init__(
        self,
        url: S3Url,
        endpoint: str,
        *,
        local: FsRoot | None = None,
        local_limit: int = LOCAL_CACHE_BYTES,
        client: Any = None,
        packs: bool = False,
    ) -> None:
        self.url = url
        self.endpoint = endpoint
        self._client = client
        self._client_lock = threading.Lock()
        self._local = local
        self._local_limit = local_limit
        self._local_size: int | None = None
        self._lock = threading.Lock()
        self._refs: dict[str, str] = {}  # name -> digest this process read or wrote
        self._bad: set[str] = set()  # digests whose object failed verification
        self._known = False
        # writing packs: on for a run's store (`open_store`), off for a Dask worker's,
        # whose writes stay refs the coordinator checks (`ref_of`); every store reads them
        self._packs_on = packs
        self._pending: dict[str, bytes] = {}  # group commit: records not yet in a pack
        self._pending_bytes = 0
        self._flushing: dict[str, bytes] = {}  # the batch being written
        self._flush_lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._failure: str | None = None  # a timed flush that failed, raised at the next
        self._view_lock = threading.RLock()
        self._indexes: dict[str, tuple[PackIndex, int]] = {}  # pack key -> index, written
        self._winners: dict[str, tuple[str, PackRecord]] = {}  # name -> pack key, record
        self._view_at: float | None = None  # monotonic time of the last listing
        self._stale = False
        self._clock = 0  # the newest pack clock seen or written (a Lamport clock)
        self._bad_records: set[tuple[str, int]] = set()
        self._held: OrderedDict[str, bytes] = OrderedDict()  # verified whole packs
        self._pack_locks: dict[str, threading.Lock] = {}
        self._after: list[Callable[[], None]] = []  # run once the pending records are seen
        self.requests = _Requests()

    # ------------------------------------------------------------------ client

    def _store(self) -> Any:
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = _make_client(self.url, self.endpoint)
        return self._client

    def _get_bytes(self, key: str) -> bytes | None:
        import obstore

        self.requests.count("GET")
        try:
            return bytes(obstore.get(self._store(), key).bytes())
        except FileNotFoundError:
            return None

    def _get_range(self, key: str, start: int, length: int) -> bytes | None:
        import obstore

        self.requests.count("GET")
        try:
            return bytes(obstore.get_range(self._store(), key, start=start, length=length))
        except FileNotFoundError:
            return None

    def _put_bytes(self, key: str, data: bytes, *, create: bool) -> None:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        self.requests.count("PUT")
        try:
            obstore.put(self._store(), key, data, mode="create" if create else "overwrite")
        except (AlreadyExistsError, PreconditionError):
            if not create:
                raise

    def _list(self, prefix: str) -> Iterator[dict[str, Any]]:
        import obstore

        self.requests.count("LIST")
        for n, chunk in enumerate(obstore.list(self._store(), prefix or None)):
            if n:
                self.requests.count("LIST")
            yield from chunk

    # ------------------------------------------------------------------ reading

    @property
    def exists(self) -> bool:
        """Whether the bucket holds any entry under the prefix."""
        if self._known:
            return True
        try:
            for base in (_REFS, PACK_PREFIX):
                for _ in self._list(base):
                    self._known = True
                    return True
        except Exception as exc:
            raise _error(self.url.url, exc) from None
        return False

    def get(self, name: str) -> bytes | None:
        """The bytes of `name`; None when there is no entry; b"" when what the bucket holds
        does not verify (the content's own digest then rejects it). FsIOError when the
        object store cannot be reached (after the client's bounded retries).

        A name of a kind that is rewritten reads its ref; any other its record in the
        newest pack that has one (a record that does not verify: the name's ref, if any),
        else its ref (a Dask worker's write, or the layout before packs)."""
        if rewritten(name):
            return self._ref_get(name)
        with self._lock:
            held = self._pending.get(name, self._flushing.get(name))
        if held is not None:
            return held
        self._load_view()
        found = self._pack_get(name)
        if found is None and self._view_old():
            self._load_view(refresh=True)
            found = self._pack_get(name)
        if found:
            return found
        data = self._ref_get(name)
        return b"" if data is None and found == b"" else data

    def _ref_get(self, name: str) -> bytes | None:
        try:
            ref = self._get_bytes(f"{_REFS}/{name}")
        except Exception as exc:
            raise _error(name, exc) from None
        if ref is None:
            return None
        if ref.startswith(_INLINE_MAGIC):
            inline = _decode_inline(ref)
            if inline is None:
                return b""
            with self._lock:
                self._refs[name] = inline[0]
            return inline[2]
        decoded = _decode_ref(ref)
        if decoded is None:
            return b""
        digest, size = decoded
        with self._lock:
            self._refs[name] = digest
            if digest in self._bad:
                return b""
        data = self._local_get(digest)
        if data is not None:
            return data
        try:
            data = self._get_bytes(_object_key(digest))
        except Exception as exc:
            raise _error(name, exc) from None
        if data is None:
            return b""  # a ref naming no object: read as corrupt, rewritten by the recompute
        if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
            self._reject(digest)
            return b""
        self._local_put(digest, data)
        return data

    def ref_of(self, name: str) -> tuple[str, int] | None:
        """(sha256, size) the ref of `name` names in the bucket, None without one (what a
        coordinator checks a worker's write against). FsIOError when unreachable."""
        try:
            ref = self._get_bytes(f"{_REFS}/{name}")
        except Exception as exc:
            raise _error(name, exc) from None
        return None if ref is None else _decode_ref(ref)

    def _reject(self, digest: str) -> None:
        """A wrong object: never used, and deleted so the recompute can write it again
        (a conditional put would otherwise keep the wrong bytes)."""
        import obstore

        with self._lock:
            self._bad.add(digest)
        self.requests.count("DELETE")
        with contextlib.suppress(Exception):
            obstore.delete(self._store(), _object_key(digest))

    def read_lane(self, prefix: str) -> None:
        """The packed store reads a lane's index entries ahead here; a bucket's pack
        indexes are all read at the first `get`, and each ref is read by its own `get`."""

    # ------------------------------------------------------------------ packs: reading

    def refresh(self) -> None:
        """List the packs again at the next miss (another run may have written the entry
        since: a stage lease this run waited for)."""
        self._stale = True

    def _view_old(self) -> bool:
        at = self._view_at
        return at is None or self._stale or time.monotonic() - at > VIEW_TTL_S

    def _load_view(self, *, refresh: bool = False) -> None:
        """List `packs/` (1,000 keys a request) and read the index of every pack not seen
        yet (from the mirror's `s3-packs/` when it holds it); the newest record of each
        name wins: the pack clock, then the key."""
        if self._view_at is not None and not refresh:
            return
        with self._view_lock:
            listed: dict[str, tuple[int, int]] = {}
            try:
                for meta in self._list(PACK_PREFIX):
                    key = str(meta["path"])
                    if parse_pack_key(key) is None:
                        continue
                    written = meta.get("last_modified")
                    listed[key] = (
                        int(meta.get("size") or 0),
                        int(written.timestamp() * 1e9) if written is not None else 0,
                    )
            except Exception as exc:
                raise _error(self.url.url, exc) from None
            new = [key for key in listed if key not in self._indexes]
            read = self._read_indexes([(key, listed[key][0]) for key in new])
            indexes = {
                key: (self._indexes[key][0], listed[key][1])
                for key in listed
                if key in self._indexes
            }
            for key, index in read.items():
                if index is not None:
                    indexes[key] = (index, listed[key][1])
            # a pack this store wrote is listed (S3 lists what was written: list-after-
            # write consistency); one not listed was deleted by `compact`
            self._indexes = indexes
            self._rebuild()
            self._view_at = time.monotonic()
            self._stale = False

    def _rebuild(self) -> None:
        winners: dict[str, tuple[str, PackRecord]] = {}
        order = sorted(self._indexes.items(), key=lambda item: (item[1][0].ts, item[0]))
        for key, (index, _written) in order:
            self._clock = max(self._clock, index.ts)
            for record in index.records:
                winners[record.name] = (key, record)
        self._winners = winners

    def _read_indexes(self, wanted: list[tuple[str, int]]) -> dict[str, PackIndex | None]:
        if not wanted:
            return {}
        from concurrent.futures import ThreadPoolExecutor

        def one(item: tuple[str, int]) -> tuple[str, PackIndex | None]:
            return item[0], self._read_index(*item)

        try:
            with ThreadPoolExecutor(min(_LIST_WORKERS, len(wanted))) as pool:
                return dict(pool.map(one, wanted))
        except FsError:
            raise
        except Exception as exc:
            raise _error(self.url.url, exc) from None

    def _read_index(self, key: str, size: int) -> PackIndex | None:
        """A pack's index: the mirror's copy, else the pack's front (one ranged GET, two
        for an index over 64 KiB). None for a pack that is gone or not whole."""
        parsed = parse_pack_key(key)
        assert parsed is not None
        local = f"{_LOCAL_INDEXES}/{key.rpartition('/')[2]}"
        front: bytes | None = None
        if self._local is not None:
            with contextlib.suppress(FsError):
                front = self._local.read_bytes(local)
        stored = front is not None
        try:
            if front is None:
                front = self._get_range(key, 0, min(size, _INDEX_FRONT)) if size else None
                if front is not None and len(front) >= HEAD_BYTES:
                    span = index_span(front)
                    if span > len(front) and span <= size:
                        front = self._get_range(key, 0, span)
            if front is None:
                return None
            index = decode_index(front)
        except PackError:
            return None
        if index.ts != parsed[0] or index.size != size:
            return None
        if not stored and self._local is not None:
            with contextlib.suppress(FsError):
                self._local.write_bytes(
                    local, front[: index.data_start], overwrite=True, durable=False
                )
        return index

    def _pack_get(self, name: str) -> bytes | None:
        """The name's newest pack record: None without one (or when it is a removal),
        b"" when it does not verify."""
        with self._view_lock:
            found = self._winners.get(name)
        if found is None or found[1].removed:
            return None
        for attempt in range(2):
            key, record = found
            if (key, record.offset) in self._bad_records:
                return b""
            data = self._record_bytes(key, record)
            if data is not None:
                if len(data) != record.size or hashlib.sha256(data).hexdigest() != record.sha256:
                    with self._lock:
                        self._bad_records.add((key, record.offset))
                    return b""
                return data
            if attempt:
                break
            # the pack is gone (compacted): list again, and read where the name is now
            self._load_view(refresh=True)
            with self._view_lock:
                found = self._winners.get(name)
            if found is None or found[1].removed:
                return None
        return b""

    def _record_bytes(self, key: str, record: PackRecord) -> bytes | None:
        """A record's bytes (unverified): from the held packs, the mirror's read-through
        cache, the whole pack downloaded into it, or the record's range. None when the
        pack is gone."""
        whole = self._whole_pack(key)
        if whole is not None:
            return whole[record.offset : record.offset + record.size]
        if not record.size:
            return b""
        try:
            return self._get_range(key, record.offset, record.size)
        except Exception as exc:
            raise _error(record.name, exc) from None

    def _whole_pack(self, key: str) -> bytes | None:
        parsed = parse_pack_key(key)
        assert parsed is not None
        digest = parsed[1]
        with self._lock:
            data = self._held.get(key)
            if data is not None:
                self._held.move_to_end(key)
                return data
            lock = self._pack_locks.setdefault(key, threading.Lock())
        with self._view_lock:
            known = self._indexes.get(key)
        size = known[0].size if known is not None else 0
        if self._local is None or size > min(_WHOLE_PACK, self._local_limit):
            return None
        with lock:
            with self._lock:
                data = self._held.get(key)
            if data is not None:
                return data
            data = self._local_get(digest)
            if data is None:
                try:
                    data = self._get_bytes(key)
                except Exception as exc:
                    raise _error(key, exc) from None
                if data is None or hashlib.sha256(data).hexdigest() != digest:
                    return None  # gone, or not whole: read by range instead
                self._local_put(digest, data)
            self._hold(key, data)
        return data

    def _hold(self, key: str, data: bytes) -> None:
        with self._lock:
            self._held[key] = data
            self._held.move_to_end(key)
            while len(self._held) > _HELD_PACKS:
                self._held.popitem(last=False)

    # ------------------------------------------------------------------ listing

    def names(self, prefix: str) -> list[str]:
        """Every name that starts with `prefix`, sorted."""
        out = {name for name, _meta in self._ref_listing(prefix)}
        out.update(name for name, _size, _written in self._pack_names(prefix))
        return sorted(out)

    def _pack_names(self, prefix: str) -> list[tuple[str, int, int]]:
        """(name, size, pack written ns) of every live pack record under `prefix`."""
        self._load_view(refresh=self._view_old())
        with self._view_lock:
            out = {
                name: (record.size, max(self._indexes[key][1], 0))
                for name, (key, record) in self._winners.items()
                if name.startswith(prefix) and not record.removed
            }
        with self._lock:
            for held in (self._flushing, self._pending):
                for name, data in held.items():
                    if name.startswith(prefix):
                        out[name] = (len(data), time.time_ns())
        return [(name, size, written) for name, (size, written) in out.items()]

    def _ref_listing(self, prefix: str) -> list[tuple[str, dict[str, Any]]]:
        directory = prefix.rpartition("/")[0]
        base = f"{_REFS}/{directory}" if directory else _REFS
        out = []
        try:
            for meta in self._list(base):
                name = str(meta["path"])[len(_REFS) + 1 :]
                if name.startswith(prefix):
                    out.append((name, meta))
        except Exception as exc:
            raise _error(prefix or self.url.url, exc) from None
        return out

    def children(self, directory: str) -> list[str]:
        base = directory.rstrip("/") + "/"
        return sorted({name[len(base) :].split("/", 1)[0] for name in self.names(base)})

    def _refs_of(self, names: list[str]) -> dict[str, tuple[str, int] | None]:
        def one(name: str) -> tuple[str, tuple[str, int] | None]:
            data = self._get_bytes(f"{_REFS}/{name}")
            return name, None if data is None else _decode_ref(data)

        if not names:
            return {}
        from concurrent.futures import ThreadPoolExecutor

        try:
            with ThreadPoolExecutor(min(_LIST_WORKERS, len(names))) as pool:
                return dict(pool.map(one, names))
        except Exception as exc:
            raise _error(self.url.url, exc) from None

    def entries(self, prefix: str = "") -> Iterator[PackedEntry]:
        """Every entry under `prefix` with its size and write time (for `gc`)."""
        if self._packs_on:
            self.flush()
            self._load_view(refresh=True)
        listing = self._ref_listing(prefix)
        refs = self._refs_of([name for name, _meta in listing])
        found: dict[str, PackedEntry] = {}
        for name, size, written_ns in self._pack_names(prefix):
            found[name] = PackedEntry(name, size, written_ns)
        for name, meta in listing:
            ref = refs.get(name)
            size = ref[1] if ref is not None else int(meta.get("size") or 0)
            written = meta.get("last_modified")
            written_ns = int(written.timestamp() * 1e9) if written is not None else 0
            if name not in found or found[name].written_ns < written_ns:
                found[name] = PackedEntry(name, size, written_ns)
        for name in sorted(found):
            yield found[name]

    # ------------------------------------------------------------------ writing

    def put(self, name: str, data: bytes) -> None:
        """Store `data` under `name`. A name of a kind that is rewritten (and an entry over
        `PACK_LARGE`, and every write of a store without packs): its object (kept when it
        exists), then the ref; once this returns every reader finds it. Any other: a record
        of the next pack (group commit), which every reader finds once it is written
        (`flush`). Raises ObjectStoreUnavailable (the run stops)."""
        data = bytes(data)
        if not self._packs_on or rewritten(name) or len(data) > PACK_LARGE:
            self._ref_put(name, data)
            return
        self._raise_failure()
        digest = hashlib.sha256(data).hexdigest()
        self._load_view()
        with self._view_lock:
            current = self._winners.get(name)
        if (
            current is not None
            and not current[1].removed
            and current[1].sha256 == digest
            and (current[0], current[1].offset) not in self._bad_records
        ):
            return  # the newest record of the name holds these bytes
        with self._lock:
            previous = self._pending.pop(name, None)
            if previous is not None:
                self._pending_bytes -= len(previous)
            self._pending[name] = data
            self._pending_bytes += len(data)
            full = len(self._pending) >= PACK_RECORDS or self._pending_bytes >= PACK_BYTES
            if not full and self._timer is None:
                self._timer = threading.Timer(PACK_DELAY_S, self._timed_flush)
                self._timer.daemon = True
                self._timer.start()
        if full:
            self.flush()

    def _ref_put(self, name: str, data: bytes) -> None:
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            if self._refs.get(name) == digest and digest not in self._bad:
                return
            rewrite = digest in self._bad
        if self._packs_on and rewritten(name) and len(data) <= _INLINE:
            try:
                self._put_bytes(f"{_REFS}/{name}", _encode_inline(digest, data), create=False)
            except Exception as exc:
                raise ObjectStoreUnavailable(f"{self.url.url}: {_error(name, exc)}") from None
            with self._lock:
                self._refs[name] = digest
                self._known = True
            return
        try:
            self._put_bytes(_object_key(digest), data, create=not rewrite)
            self._put_bytes(f"{_REFS}/{name}", _encode_ref(digest, len(data)), create=False)
        except Exception as exc:
            raise ObjectStoreUnavailable(f"{self.url.url}: {_error(name, exc)}") from None
        with self._lock:
            self._refs[name] = digest
            self._bad.discard(digest)
            self._known = True
        self._local_put(digest, data)

    def _timed_flush(self) -> None:
        try:
            self.flush()
        except ObjectStoreUnavailable as exc:
            with self._lock:
                self._failure = str(exc)
        except Exception as exc:  # never lost on a timer's thread: raised at the next put
            with self._lock:
                self._failure = f"{self.url.url}: {type(exc).__name__}: {exc}"[:400]

    def _raise_failure(self) -> None:
        with self._lock:
            failure, self._failure = self._failure, None
        if failure is not None:
            raise ObjectStoreUnavailable(failure)

    def flush(self) -> None:
        """Write the pending records as one pack (`If-None-Match: *`, content-addressed):
        once this returns, every reader that lists the packs finds them. Raises
        ObjectStoreUnavailable (the records stay pending)."""
        with self._flush_lock:
            with self._lock:
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                batch = list(self._pending.items())
                self._flushing = dict(batch)
                self._pending, self._pending_bytes = {}, 0
                after, self._after = self._after, []
            try:
                if batch:
                    self._write_pack(batch)
            except BaseException:
                with self._lock:
                    self._after[:0] = after
                raise
        for callback in after:
            with contextlib.suppress(Exception):
                callback()
        self._raise_failure()

    def after_flush(self, callback: Callable[[], None]) -> None:
        """Call `callback` once every record pending now is in a written pack (at once
        when none is): a stage lease is released only when what its holder wrote is seen
        (`stage_leases.BucketStageLeases`), and the lease costs no pack of its own."""
        with self._lock:
            if self._pending or self._flushing:
                self._after.append(callback)
                return
        callback()

    def _write_pack(self, batch: list[tuple[str, bytes | None]]) -> None:
        with self._view_lock:
            ts = self._clock = max(time.time_ns(), self._clock + 1)
        data = encode_pack(ts, batch)
        key = pack_key(ts, data)
        try:
            self._put_bytes(key, data, create=True)
        except Exception as exc:
            with self._lock:
                for name, body in batch:
                    if body is not None and name not in self._pending:
                        self._pending[name] = body
                        self._pending_bytes += len(body)
                self._flushing = {}
            raise ObjectStoreUnavailable(f"{self.url.url}: {_error(key, exc)}") from None
        index = decode_index(data)
        with self._view_lock:
            self._indexes[key] = (index, -time.time_ns())  # negative: written here
            for record in index.records:
                self._winners[record.name] = (key, record)
        with self._lock:
            self._flushing = {}
            self._known = True
        parsed = parse_pack_key(key)
        assert parsed is not None
        self._hold(key, data)
        self._local_put(parsed[1], data)
        if self._local is not None:
            with contextlib.suppress(FsError, ValueError):
                self._local.write_bytes(
                    f"{_LOCAL_INDEXES}/{key.rpartition('/')[2]}",
                    data[: index.data_start],
                    overwrite=True,
                    durable=False,
                )

    def remove(self, names: Iterable[str]) -> int:
        """Drop `names`: their refs (their objects go at the next `compact`) and, for names
        with a pack record, a removal record in a new pack; the count."""
        import obstore

        names = list(names)
        if not names:
            return 0
        keys = [f"{_REFS}/{name}" for name in names]
        try:
            self.requests.count("DELETE")
            obstore.delete(self._store(), keys)
        except Exception as exc:
            raise _error(self.url.url, exc) from None
        with self._lock:
            for name in names:
                self._refs.pop(name, None)
        self.flush()
        self._load_view()
        if self._winners:
            with self._view_lock:
                packed = [
                    n for n in names if n in self._winners and not self._winners[n][1].removed
                ]
            for start in range(0, len(packed), PACK_RECORDS):
                self._write_pack([(n, None) for n in packed[start : start + PACK_RECORDS]])
        return len(keys)

    def compact(self, *, dry_run: bool = False, keep_ratio: float = 0.5) -> Compaction:
        """Delete the objects no ref names, once older than an hour (a writer puts the
        object before its ref); rewrite the live records of packs that hold superseded
        ones (or are small) into new packs, and delete the packs every record of which is
        superseded once what supersedes them is `PACK_GRACE_S` old. Run under the cache
        lock's `gc` lease, so no run writes meanwhile; readers need no lock."""
        import obstore

        listing = self._ref_listing("")
        named = {ref[0] for ref in self._refs_of([n for n, _m in listing]).values() if ref}
        cutoff = time.time() - _ORPHAN_GRACE_S
        doomed: list[str] = []
        freed = 0
        try:
            for meta in self._list(_OBJECTS):
                path = str(meta["path"])
                digest = path.rpartition("/")[2]
                written = meta.get("last_modified")
                if digest in named or written is None or written.timestamp() > cutoff:
                    continue
                doomed.append(path)
                freed += int(meta.get("size") or 0)
            if doomed and not dry_run:
                for start in range(0, len(doomed), 1000):
                    self.requests.count("DELETE")
                    obstore.delete(self._store(), doomed[start : start + 1000])
        except Exception as exc:
            raise _error(self.url.url, exc) from None
        moved, packs_freed, packs_removed = self._compact_packs(dry_run, keep_ratio)
        return Compaction(packs_removed, moved, freed + packs_freed, len(doomed), 0, 0)

    def _compact_packs(self, dry_run: bool, keep_ratio: float) -> tuple[int, int, int]:
        """(records moved, bytes freed, packs deleted)."""
        import obstore

        self.flush()
        self._load_view(refresh=True)
        with self._view_lock:
            indexes = dict(self._indexes)
            winners = dict(self._winners)
        live: dict[str, list[PackRecord]] = {key: [] for key in indexes}
        for key, record in winners.values():
            if not record.removed:
                live[key].append(record)
        small = [k for k, (index, _w) in indexes.items() if index.size < PACK_BYTES // 4]
        rewrite = [
            key
            for key, (index, _w) in indexes.items()
            if live[key]
            and (
                sum(r.size for r in live[key]) < keep_ratio * max(1, index.size - index.data_start)
                or len(live[key]) < len(index.records)
                or (key in small and len(small) > 1)
            )
        ]
        moved = 0
        retired: set[str] = set()
        if rewrite and not dry_run:
            batch: list[tuple[str, bytes | None]] = []
            size = 0
            for key in sorted(rewrite):
                whole = self._pack_bytes(key)
                if whole is None:
                    continue
                _index, records = whole
                for record in live[key]:
                    body = records.get(record.name)
                    if body is None or hashlib.sha256(body).hexdigest() != record.sha256:
                        continue  # a record that does not verify is not carried over
                    batch.append((record.name, body))
                    size += len(body)
                    moved += 1
                    if len(batch) >= PACK_RECORDS or size >= PACK_BYTES:
                        self._write_pack(batch)
                        batch, size = [], 0
                retired.add(key)
            if batch:
                self._write_pack(batch)
            self._load_view(refresh=True)
            with self._view_lock:
                indexes = dict(self._indexes)
                winners = dict(self._winners)
        # a pack is dead when no record of it is its name's newest bytes; it goes once
        # the packs holding the newer records are PACK_GRACE_S old. A pack of removals
        # stays while a pack that stays holds a name it removes.
        live_keys = {key for key, record in winners.values() if not record.removed}
        now_ns = time.time_ns()
        dead: dict[str, PackIndex] = {}
        for key, (index, _written) in indexes.items():
            if key in live_keys:
                continue
            superseding = [
                abs(indexes[winners[r.name][0]][1]) for r in index.records if r.name in winners
            ]
            since = now_ns if key in retired else max(superseding, default=0)
            if PACK_GRACE_S <= 0 or now_ns - since >= PACK_GRACE_S * 1e9:
                dead[key] = index
        staying: set[str] = set()
        for key, (index, _written) in indexes.items():
            if key not in dead:
                staying.update(r.name for r in index.records)
        doomed: list[str] = []
        freed = 0
        for key, index in dead.items():
            removes = {name for name, (k, r) in winners.items() if k == key and r.removed}
            if removes & staying:
                continue
            doomed.append(key)
            freed += index.size
        if doomed and not dry_run:
            try:
                for start in range(0, len(doomed), 1000):
                    self.requests.count("DELETE")
                    obstore.delete(self._store(), doomed[start : start + 1000])
            except Exception as exc:
                raise _error(self.url.url, exc) from None
            self._load_view(refresh=True)
        return moved, freed, len(doomed)

    def _pack_bytes(self, key: str) -> tuple[PackIndex, dict[str, bytes]] | None:
        """A whole pack, verified against its key: its index and its records that verify."""
        parsed = parse_pack_key(key)
        assert parsed is not None
        data = self._local_get(parsed[1])
        if data is None:
            try:
                data = self._get_bytes(key)
            except Exception as exc:
                raise _error(key, exc) from None
        if data is None or hashlib.sha256(data).hexdigest() != parsed[1]:
            return None
        try:
            return records_of(data)
        except PackError:
            return None

    def segment_count(self) -> int:
        with self._view_lock:
            return len(self._indexes)

    def close(self) -> None:
        """Write the pending records (the run's end: what it wrote is then seen by every
        reader); requests hold no connection between calls."""
        if self._packs_on:
            self.flush()

    # ------------------------------------------------------------------ side objects

    # The cache root's registry and leases (`meta/...`): small objects beside the entries,
    # never named by a ref, never collected by `compact`.

    def meta_get(self, name: str) -> tuple[bytes, int] | None:
        """(bytes, last-modified ns) of `meta/<name>`; None when absent."""
        import obstore

        self.requests.count("GET meta")
        try:
            result = obstore.get(self._store(), f"{_META}/{name}")
            data = bytes(result.bytes())
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise _error(name, exc) from None
        modified = result.meta.get("last_modified")
        return data, int(modified.timestamp() * 1e9) if modified is not None else 0

    def meta_put(self, name: str, data: bytes, *, create: bool = False) -> bool:
        """Write `meta/<name>`; with `create`, only if it does not exist (False then)."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        self.requests.count("PUT meta")
        try:
            mode = "create" if create else "overwrite"
            obstore.put(self._store(), f"{_META}/{name}", data, mode=mode)
        except (AlreadyExistsError, PreconditionError):
            return False
        except Exception as exc:
            raise _error(name, exc) from None
        return True

    def meta_list(self, prefix: str) -> list[str]:
        """The names below `meta/<prefix>/`."""
        base = f"{_META}/{prefix.strip('/')}"
        try:
            return sorted(str(m["path"])[len(_META) + 1 :] for m in self._list(base))
        except Exception as exc:
            raise _error(prefix, exc) from None

    def meta_delete(self, names: list[str]) -> None:
        import obstore

        if not names:
            return
        try:
            obstore.delete(self._store(), [f"{_META}/{name}" for name in names])
        except Exception as exc:
            raise _error(names[0], exc) from None

    # ------------------------------------------------------------------ local cache

    def _local_name(self, digest: str) -> str:
        return f"{_LOCAL_CACHE}/{digest[:2]}/{digest}"

    def _local_get(self, digest: str) -> bytes | None:
        if self._local is None:
            return None
        try:
            data = self._local.read_bytes(self._local_name(digest))
        except FsError:
            return None
        if hashlib.sha256(data).hexdigest() != digest:
            with contextlib.suppress(FsError):
                self._local.remove(self._local_name(digest), missing_ok=True)
            return None
        return data

    def _local_put(self, digest: str, data: bytes) -> None:
        """Keep a verified object locally; past the bound, the oldest go. A local cache
        that cannot be written is skipped (the bucket has the object)."""
        if self._local is None or len(data) > self._local_limit:
            return
        try:
            self._local.write_bytes(self._local_name(digest), data, overwrite=False, durable=False)
        except AlreadyExists:
            return
        except (FsError, ValueError):  # a closed mirror: skipped
            return
        with self._lock:
            if self._local_size is None:
                self._local_size = sum(size for _n, size, _t in self._local_files())
            else:
                self._local_size += len(data)
            over = self._local_size > self._local_limit
        if over:
            self._trim()

    def _local_files(self) -> list[tuple[str, int, float]]:
        """(name, size, mtime) of every object of the local cache."""
        assert self._local is not None
        out: list[tuple[str, int, float]] = []
        try:
            cache = self._local.subroot(_LOCAL_CACHE)
        except (FsError, OSError):
            return out
        with cache:
            for shard in cache.listdir():
                with contextlib.suppress(FsError, OSError), cache.subroot(shard) as directory:
                    for leaf in directory.listdir():
                        with contextlib.suppress(OSError):
                            info = os.stat(directory.fd_path(leaf), follow_symlinks=False)
                            out.append(
                                (f"{_LOCAL_CACHE}/{shard}/{leaf}", info.st_size, info.st_mtime)
                            )
        return out

    def _trim(self) -> None:
        """Delete the oldest local objects until the cache is under 90% of its bound."""
        assert self._local is not None
        files = sorted(self._local_files(), key=lambda item: item[2])
        total = sum(size for _n, size, _t in files)
        target = int(self._local_limit * 0.9)
        for name, size, _mtime in files:
            if total <= target:
                break
            with contextlib.suppress(FsError):
                self._local.remove(name, missing_ok=True)
                total -= size
        with self._lock:
            self._local_size = total
