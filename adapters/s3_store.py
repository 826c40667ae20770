"""The cache's entries on S3-compatible object storage (docs/internals.md "Object-storage
cache", docs/operations.md "Object-storage cache").

`cache_root = "s3://bucket/prefix"` keeps what the packed store keeps (checkpoint
envelopes, lane pointers, `workspace.json`, chunk plans, LLM replies) in a bucket, under
the same names, with the interface `PackedStore` offers its users (`get`, `put`, `names`,
`children`, `entries`, `remove`, `compact`). SQLite cannot live on object storage and
there is no rename there, so an entry is two objects:

    <prefix>/objects/<sha[:2]>/<sha256>   the bytes, content-addressed, written once
                                          (`If-None-Match: *`: a second writer of the
                                          same bytes is refused and loses nothing)
    <prefix>/refs/<name>                  `RJS3 1`, the sha256 and the size: the name's
                                          current content (last writer wins, as the
                                          index's INSERT OR REPLACE)

A reader gets the ref, then the object, and checks the object's sha256 against the ref:
a wrong, torn or missing object is returned as b"" (the envelope's or plan's own digest
then makes it `checkpoint_corrupt`, recomputed, never used) and a wrong object is deleted
so the recompute can write it again. Objects are kept in a bounded read-through cache in
the local mirror directory (`<user cache dir>/s3/<identity>/s3-cache/`), verified again
when read, so a machine downloads an object once.

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
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from runjournal.adapters.fsroot import AlreadyExists, FsError, FsIOError, FsNotFound, FsRoot
from runjournal.adapters.packed_store import Compaction, PackedEntry, PackedStore
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
    return S3PackedStore(remote[0], remote[1], local=root)


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


def _decode_ref(data: bytes) -> tuple[str, int] | None:
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

    # ------------------------------------------------------------------ client

    def _store(self) -> Any:
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = _make_client(self.url, self.endpoint)
        return self._client

    def _get_bytes(self, key: str) -> bytes | None:
        import obstore

        try:
            return bytes(obstore.get(self._store(), key).bytes())
        except FileNotFoundError:
            return None

    def _put_bytes(self, key: str, data: bytes, *, create: bool) -> None:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            obstore.put(self._store(), key, data, mode="create" if create else "overwrite")
        except (AlreadyExistsError, PreconditionError):
            if not create:
                raise

    def _list(self, prefix: str) -> Iterator[dict[str, Any]]:
        import obstore

        for chunk in obstore.list(self._store(), prefix or None):
            yield from chunk

    # ------------------------------------------------------------------ reading

    @property
    def exists(self) -> bool:
        """Whether the bucket holds any entry under the prefix."""
        if self._known:
            return True
        try:
            for _ in self._list(_REFS):
                self._known = True
                return True
        except Exception as exc:
            raise _error(self.url.url, exc) from None
        return False

    def get(self, name: str) -> bytes | None:
        """The bytes of `name`; None when there is no entry; b"" when what the bucket holds
        does not verify (the content's own digest then rejects it). FsIOError when the
        object store cannot be reached (after the client's bounded retries)."""
        try:
            ref = self._get_bytes(f"{_REFS}/{name}")
        except Exception as exc:
            raise _error(name, exc) from None
        if ref is None:
            return None
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
        with contextlib.suppress(Exception):
            obstore.delete(self._store(), _object_key(digest))

    def read_lane(self, prefix: str) -> None:
        """The packed store reads a lane's index entries ahead here; a bucket has no
        index to read ahead, and each `get` reads its ref (refs change)."""

    def names(self, prefix: str) -> list[str]:
        """Every name that starts with `prefix`, sorted."""
        return sorted(name for name, _meta in self._ref_listing(prefix))

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
        listing = self._ref_listing(prefix)
        refs = self._refs_of([name for name, _meta in listing])
        for name, meta in sorted(listing, key=lambda item: item[0]):
            ref = refs.get(name)
            size = ref[1] if ref is not None else int(meta.get("size") or 0)
            written = meta.get("last_modified")
            written_ns = int(written.timestamp() * 1e9) if written is not None else 0
            yield PackedEntry(name, size, written_ns)

    # ------------------------------------------------------------------ writing

    def put(self, name: str, data: bytes) -> None:
        """Store `data` under `name`: its object (kept when it exists), then the ref. Once
        this returns, every reader on every machine finds it. Raises
        ObjectStoreUnavailable (the run stops)."""
        data = bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            if self._refs.get(name) == digest and digest not in self._bad:
                return
            rewrite = digest in self._bad
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

    def remove(self, names: Iterable[str]) -> int:
        """Drop the refs `names` (their objects go at the next `compact`); the count."""
        import obstore

        keys = [f"{_REFS}/{name}" for name in names]
        if not keys:
            return 0
        try:
            obstore.delete(self._store(), keys)
        except Exception as exc:
            raise _error(self.url.url, exc) from None
        with self._lock:
            for key in keys:
                self._refs.pop(key[len(_REFS) + 1 :], None)
        return len(keys)

    def compact(self, *, dry_run: bool = False, keep_ratio: float = 0.5) -> Compaction:
        """Delete the objects no ref names, once older than an hour (a writer puts the
        object before its ref)."""
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
                    obstore.delete(self._store(), doomed[start : start + 1000])
        except Exception as exc:
            raise _error(self.url.url, exc) from None
        return Compaction(0, 0, freed, len(doomed), 0, 0)

    def segment_count(self) -> int:
        return 0

    def close(self) -> None:
        """Nothing to release: requests hold no connection between calls."""

    # ------------------------------------------------------------------ side objects

    # The cache root's registry and leases (`meta/...`): small objects beside the entries,
    # never named by a ref, never collected by `compact`.

    def meta_get(self, name: str) -> tuple[bytes, int] | None:
        """(bytes, last-modified ns) of `meta/<name>`; None when absent."""
        import obstore

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
        except FsError:
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
