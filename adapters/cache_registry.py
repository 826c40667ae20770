"""The cache root's journal registry: which journals use a cache root (docs/operations.md
"Cache retention").

A cache root is shared by every project on the machine (its default is the user cache
directory), so `gc --cache` must keep what any of their journals references, not only
its own. Every run that writes under the cache root records its journal and pipeline as
one small file `journals/<32 hex>.json` (atomic, rewritten only when it differs), under
the cache root's shared lock and before its first write there. `journals/epoch` is
created once, with the first entry: a cache file older than it was written before the
registry existed, by a journal that may not be registered.

A journal is recorded by where it is, never by a secret: a SQLite journal as
`sqlite://<real path>` and its host name (a cache root may be shared between machines),
a PostgreSQL one as `postgresql://user@host:port/db` (with its `schema` option) without
its password.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import stat
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import msgspec
from runjournal.adapters.fsroot import AlreadyExists, FsError, FsNotFound, FsRoot
from runjournal.adapters.journal.url import (
    DEFAULT_CONNECT_TIMEOUT,
    PostgresLocation,
    parse_journal_url,
)

REGISTRY = "journals"
EPOCH = f"{REGISTRY}/epoch"
SCHEMA_VERSION = 1
_SUFFIX = ".json"
_TEMP_PREFIX = ".rj-tmp-"


class RegistryEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """One journal's use of the cache root for one pipeline (one file)."""

    journal: str  # journal_identity(): no password
    pipeline: str
    # a SQLite journal's machine: its path means nothing on another one sharing the root
    host: str = ""
    registry_schema_version: int = SCHEMA_VERSION


@dataclass
class Registry:
    """What `read_registry` found: the entries by file name, the registry's start, and
    the files that could not be read (then nothing is known about whose they are)."""

    entries: dict[str, RegistryEntry] = field(default_factory=dict)
    epoch_ns: int | None = None  # st_mtime_ns of journals/epoch; None: no registry yet
    unreadable: dict[str, str] = field(default_factory=dict)  # name -> why

    def journals(self) -> dict[tuple[str, str], list[str]]:
        """Each registered journal (identity, host) and the names of its entries."""
        out: dict[tuple[str, str], list[str]] = {}
        for name, entry in sorted(self.entries.items()):
            out.setdefault((entry.journal, entry.host), []).append(name)
        return out


def this_host() -> str:
    """The machine a SQLite journal is on (recorded beside its path)."""
    return socket.gethostname()


def journal_host(identity: str) -> str:
    """The host recorded with a journal: this machine for SQLite, none for PostgreSQL."""
    return this_host() if identity.startswith("sqlite://") else ""


def journal_identity(url: str) -> str:
    """Where the journal `url` is, without its password (the registry's key).

    A SQLite path is made absolute and real, so two spellings of one file are one journal.
    """
    location = parse_journal_url(url, connect_timeout=DEFAULT_CONNECT_TIMEOUT)
    if isinstance(location, PostgresLocation):
        user = f"{quote(location.user, safe='')}@" if location.user else ""
        where = f"{location.host}:{location.port}/{quote(location.dbname, safe='')}"
        schema = f"?schema={quote(location.schema, safe='')}" if location.schema else ""
        return f"postgresql://{user}{where}{schema}"
    return f"sqlite://{quote(os.path.realpath(location.path), safe='/')}"


def entry_name(identity: str, pipeline: str, host: str = "") -> str:
    """The registry file of (journal, pipeline), relative to the cache root."""
    digest = hashlib.sha256(f"{identity}\0{pipeline}\0{host}".encode()).hexdigest()[:32]
    return f"{REGISTRY}/{digest}{_SUFFIX}"


def register(root: FsRoot, journal_url: str, pipeline: str) -> None:
    """Record that `journal_url` runs `pipeline` on this cache root (idempotent).

    Called with the cache root's lock held shared, before the run writes there. Raises
    FsError when the cache root cannot be written. For an `s3://` cache root the
    registry is in the bucket (`meta/journals/...`), shared by every machine using it.
    """
    remote = _remote(root)
    if remote is not None:
        _register_remote(remote, journal_url, pipeline)
        return
    with contextlib.suppress(AlreadyExists):  # the registry's start: written once
        root.write_bytes(EPOCH, b"", overwrite=False)
    identity = journal_identity(journal_url)
    host = journal_host(identity)
    name = entry_name(identity, pipeline, host)
    entry = RegistryEntry(journal=identity, pipeline=pipeline, host=host)
    data = msgspec.json.encode(entry) + b"\n"
    try:
        if root.read_bytes(name) == data:
            return
    except FsNotFound:
        pass
    root.write_bytes(name, data)


def read_registry(root: FsRoot) -> Registry:
    """Every entry of the registry (none when it does not exist yet)."""
    remote = _remote(root)
    if remote is not None:
        return _read_remote(remote)
    registry = Registry()
    try:
        names = root.listdir(REGISTRY)
    except FsNotFound:
        return registry
    for leaf in names:
        name = f"{REGISTRY}/{leaf}"
        if leaf == "epoch":
            registry.epoch_ns = _mtime_ns(root, name)
            continue
        if leaf.startswith(_TEMP_PREFIX) or not leaf.endswith(_SUFFIX):
            continue  # a write in progress or killed (swept by `recover`), or not ours
        try:
            entry = msgspec.json.decode(root.read_bytes(name), type=RegistryEntry)
        except (FsError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            registry.unreadable[name] = str(exc)
            continue
        registry.entries[name] = entry
    return registry


def forget(root: FsRoot, names: list[str]) -> None:
    """Remove the registry entries `names` (`gc --forget-missing`)."""
    remote = _remote(root)
    if remote is not None:
        remote.meta_delete(list(names))
        return
    for name in names:
        root.remove(name, missing_ok=True)


def _mtime_ns(root: FsRoot, name: str) -> int | None:
    directory, _, leaf = name.rpartition("/")
    try:
        with root.subroot(directory) as handle:
            info = os.stat(handle.fd_path(leaf), follow_symlinks=False)
    except OSError:  # FsError is one
        return None
    return info.st_mtime_ns if stat.S_ISREG(info.st_mode) else None


def _remote(root: FsRoot) -> Any:
    """The bucket's store when `root` is the mirror of an `s3://` cache root."""
    from runjournal.adapters.cache_lock import _remote as remote_store

    return remote_store(root)


def _register_remote(store: Any, journal_url: str, pipeline: str) -> None:
    store.meta_put(EPOCH, b"", create=True)  # the registry's start: written once
    identity = journal_identity(journal_url)
    host = journal_host(identity)
    name = entry_name(identity, pipeline, host)
    data = msgspec.json.encode(RegistryEntry(journal=identity, pipeline=pipeline, host=host))
    data += b"\n"
    found = store.meta_get(name)
    if found is None or found[0] != data:
        store.meta_put(name, data)


def _read_remote(store: Any) -> Registry:
    registry = Registry()
    for name in store.meta_list(REGISTRY):
        leaf = name.rpartition("/")[2]
        found = store.meta_get(name)
        if found is None:
            continue  # forgotten meanwhile
        if leaf == "epoch":
            registry.epoch_ns = found[1]
            continue
        if not leaf.endswith(_SUFFIX):
            continue
        try:
            registry.entries[name] = msgspec.json.decode(found[0], type=RegistryEntry)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            registry.unreadable[name] = str(exc)
    return registry
