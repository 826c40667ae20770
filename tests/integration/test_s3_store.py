"""`adapters/s3_store.py` against a real S3 server (SeaweedFS on loopback): the packed
store's interface on object storage, digests checked on every read, the bounded local
read-through cache, bounded waits (docs/internals.md "Object-storage cache")."""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from runjournal.adapters import s3_store
from runjournal.adapters.fsroot import FsIOError, FsRoot
from runjournal.adapters.s3_store import (
    S3PackedStore,
    S3Url,
    open_store,
    parse_s3_url,
    prepare_mirror,
)

obstore = pytest.importorskip("obstore")


@pytest.fixture
def local(tmp_path: Path) -> Iterator[FsRoot]:
    root = FsRoot.open(tmp_path / "mirror", create=True)
    yield root
    root.close()


def store(url: S3Url, env: dict[str, str], local: FsRoot | None = None, **kw: Any) -> S3PackedStore:
    return S3PackedStore(url, env["AWS_ENDPOINT_URL"], local=local, **kw)


def raw(url: S3Url, env: dict[str, str]) -> Any:
    from obstore.store import S3Store

    return S3Store(url.bucket, client_options={"allow_http": True})


def test_round_trip_listing_and_removal(url: S3Url, s3env: dict[str, str], local: FsRoot) -> None:
    s = store(url, s3env, local)
    assert not s.exists and s.get("workspaces/p/a.ckpt") is None
    s.put("workspaces/p/steps/x/l1/a.ckpt", b"one")
    s.put("workspaces/p/steps/x/l1/latest.extract", b"scope")
    s.put("workspaces/p/steps/x/l2/b.ckpt", b"two" * 1000)
    s.put("chunkplans/ab/abc.plan", b"plan")
    other = store(url, s3env)  # another process, no local cache
    assert other.exists
    assert other.get("workspaces/p/steps/x/l2/b.ckpt") == b"two" * 1000
    assert other.names("workspaces/p/steps/x/l1/") == [
        "workspaces/p/steps/x/l1/a.ckpt",
        "workspaces/p/steps/x/l1/latest.extract",
    ]
    assert other.names("workspaces/p/steps/x/l") == sorted(
        n for n in other.names("workspaces/") if n.startswith("workspaces/p/steps/x/l")
    )
    assert other.children("workspaces/p/steps/x") == ["l1", "l2"]
    sizes = {e.name: e.size for e in other.entries("workspaces/")}
    assert sizes["workspaces/p/steps/x/l2/b.ckpt"] == 3000
    assert all(e.written_ns > 0 for e in other.entries(""))
    s.put("workspaces/p/steps/x/l1/a.ckpt", b"replaced")  # last writer wins
    assert other.get("workspaces/p/steps/x/l1/a.ckpt") == b"replaced"
    assert other.remove(["workspaces/p/steps/x/l1/a.ckpt"]) == 1
    assert s.get("workspaces/p/steps/x/l1/a.ckpt") is None


def test_a_wrong_object_reads_empty_is_deleted_and_written_again(
    url: S3Url, s3env: dict[str, str]
) -> None:
    s = store(url, s3env)
    s.put("w/a.ckpt", b"the right bytes")
    client = raw(url, s3env)
    objects = [m["path"] for chunk in obstore.list(client, "pre/fix/objects") for m in chunk]
    obstore.put(client, objects[0], b"the wrong bytes")
    reader = store(url, s3env)
    assert reader.get("w/a.ckpt") == b""  # the envelope's digest then says checkpoint_corrupt
    with pytest.raises(FileNotFoundError):
        obstore.get(client, objects[0])  # deleted, so the recompute's write is not refused
    reader.put("w/a.ckpt", b"the right bytes")
    assert store(url, s3env).get("w/a.ckpt") == b"the right bytes"


@pytest.mark.parametrize(
    "ref", [b"", b"RJS3 1\nnot-a-digest\n3\n", b"garbage", b"RJS3 1\n" + b"a" * 64 + b"\n3\n"]
)
def test_a_damaged_ref_or_a_ref_naming_nothing_reads_empty(
    url: S3Url, s3env: dict[str, str], ref: bytes
) -> None:
    obstore.put(raw(url, s3env), "pre/fix/refs/w/a.ckpt", ref)
    assert store(url, s3env).get("w/a.ckpt") == b""


def test_the_local_cache_downloads_an_object_once_and_verifies_it(
    url: S3Url, s3env: dict[str, str], local: FsRoot
) -> None:
    store(url, s3env).put("w/a.ckpt", b"payload")
    first = store(url, s3env, local)
    assert first.get("w/a.ckpt") == b"payload"
    client = raw(url, s3env)
    objects = [m["path"] for chunk in obstore.list(client, "pre/fix/objects") for m in chunk]
    obstore.delete(client, objects[0])  # the bucket no longer has it: the local copy serves
    assert store(url, s3env, local).get("w/a.ckpt") == b"payload"
    cached = next(p for p in Path(local.path).rglob("*") if p.is_file())
    cached.write_bytes(b"tampered")  # a damaged local copy is never used
    assert store(url, s3env, local).get("w/a.ckpt") == b""


def test_the_local_cache_stays_under_its_bound(
    url: S3Url, s3env: dict[str, str], local: FsRoot
) -> None:
    s = store(url, s3env, local, local_limit=10_000)
    for i in range(30):
        s.put(f"w/{i}.ckpt", bytes([i]) * 1000)
    files = [p for p in Path(local.path).rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 10_000
    assert all(s.get(f"w/{i}.ckpt") == bytes([i]) * 1000 for i in range(30))


def test_compact_deletes_objects_no_ref_names(
    url: S3Url, s3env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    s = store(url, s3env)
    s.put("w/keep.ckpt", b"kept")
    s.put("w/drop.ckpt", b"dropped")
    s.remove(["w/drop.ckpt"])
    assert s.compact().objects_removed == 0  # within the grace period: a writer may be mid-put
    monkeypatch.setattr(s3_store, "_ORPHAN_GRACE_S", -60)
    assert s.compact(dry_run=True).objects_removed == 1
    done = s.compact()
    assert done.objects_removed == 1 and done.bytes_freed == len(b"dropped")
    assert store(url, s3env).get("w/keep.ckpt") == b"kept"


def test_open_store_follows_the_mirror_marker(
    url: S3Url, s3env: dict[str, str], tmp_path: Path
) -> None:
    prepare_mirror(FsRoot.open, str(tmp_path / "m"), url.url, s3env["AWS_ENDPOINT_URL"])
    prepare_mirror(
        FsRoot.open, str(tmp_path / "m"), url.url, s3env["AWS_ENDPOINT_URL"]
    )  # idempotent
    with FsRoot.open(tmp_path / "m") as root:
        s = open_store(root)
        assert isinstance(s, S3PackedStore) and s.url == url
        s.put("w/x.ckpt", b"x")
    with FsRoot.open(tmp_path, create=False) as plain:
        assert not isinstance(open_store(plain), S3PackedStore)


def test_an_unreachable_endpoint_is_an_io_error_of_the_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: connection refused
    s = S3PackedStore(S3Url("bucket", ""), f"http://127.0.0.1:{port}")
    with pytest.raises(FsIOError) as caught:
        s.get("w/a.ckpt")
    assert caught.value.errno == errno.EIO and "object store" in str(caught.value)
    with pytest.raises(s3_store.ObjectStoreUnavailable, match="object store"):
        s.put("w/a.ckpt", b"x")  # not an OSError: the run stops instead of going on


def test_a_server_that_never_answers_is_given_up_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounded waits: a request times out and its retries stop (no wait forever)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setattr(s3_store, "_TIMEOUT", "1s")
    monkeypatch.setattr(s3_store, "_RETRIES", 1)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])  # accepted, never answered
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        port = silent.getsockname()[1]
        s = S3PackedStore(S3Url("bucket", ""), f"http://127.0.0.1:{port}")
        with pytest.raises(FsIOError):
            s.get("w/a.ckpt")
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        silent.close()


_SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=8)


@given(
    bucket=st.from_regex(r"[a-z0-9][a-z0-9\-]{1,20}[a-z0-9]", fullmatch=True),
    parts=st.lists(_SEGMENT, max_size=4),
)
def test_s3_urls_round_trip(bucket: str, parts: list[str]) -> None:
    url = parse_s3_url(f"s3://{bucket}/" + "/".join(parts))
    assert url == S3Url(bucket, "/".join(parts))
    assert parse_s3_url(url.url) == url


@pytest.mark.parametrize(
    "text",
    [
        "s3://",
        "s3:///prefix",
        "s3://a/prefix",
        "s3://UPPER/prefix",
        "s3://key:secret@bucket/prefix",
        "s3://bucket/a/../b",
        "s3://bucket/p?x=1",
        "s3://bucket/p#f",
        "http://bucket/p",
    ],
)
def test_bad_s3_urls_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_s3_url(text)


def _mirror(tmp_path: Path, name: str, url: S3Url, env: dict[str, str]) -> FsRoot:
    prepare_mirror(FsRoot.open, str(tmp_path / name), url.url, env["AWS_ENDPOINT_URL"])
    return FsRoot.open(tmp_path / name)


def test_the_cache_lock_is_a_lease_in_the_bucket(
    url: S3Url, s3env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runjournal.adapters import cache_lock
    from runjournal.adapters.cache_lock import CacheLock, CacheLockBusy

    one, two = _mirror(tmp_path, "a", url, s3env), _mirror(tmp_path, "b", url, s3env)
    with one, two:
        run = CacheLock.shared(one, wait=0)  # a run on machine a
        with pytest.raises(CacheLockBusy):
            CacheLock.exclusive(two)  # gc on machine b sees it
        also = CacheLock.shared(two, wait=0)  # runs share it
        run.close()
        also.close()
        gc = CacheLock.exclusive(two)
        with pytest.raises(CacheLockBusy):
            CacheLock.shared(one, wait=0)
        with pytest.raises(CacheLockBusy):
            CacheLock.exclusive(one)
        gc.close()
        # a killed run's lease expires: gc then takes the root and drops the lease
        stale = CacheLock.shared(one, wait=0)
        stale._stop.set()  # as if its process were gone: no refresh, no delete
        monkeypatch.setattr(cache_lock, "LEASE_TTL_S", 0.0)
        CacheLock.exclusive(two).close()
        assert s3_store.open_store(one).meta_list(cache_lock.RUN_LEASES) == []


def test_the_registry_is_shared_through_the_bucket(
    url: S3Url, s3env: dict[str, str], tmp_path: Path
) -> None:
    from runjournal.adapters.cache_registry import forget, read_registry, register

    one, two = _mirror(tmp_path, "a", url, s3env), _mirror(tmp_path, "b", url, s3env)
    with one, two:
        register(one, str(tmp_path / "a.sqlite3"), "glossary")
        register(two, str(tmp_path / "b.sqlite3"), "glossary")
        register(two, str(tmp_path / "b.sqlite3"), "glossary")  # idempotent
        seen = read_registry(one)
        assert len(seen.entries) == 2 and seen.epoch_ns and not seen.unreadable
        assert not (Path(one.path) / "journals").exists()  # nothing local
        forget(two, [next(iter(seen.entries))])
        assert len(read_registry(one).entries) == 1


def test_the_credentials_are_known_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runjournal.adapters.s3_store import prepare_remote_cache
    from runjournal.domain.redaction import safe_error_text

    secret = "wJalrXUtnFEMI" + "K7MDENGbPxRfiCY" + "q9z8y7x6"  # built: never a literal secret
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)

    class Config:
        cache_root = str(tmp_path / "mirror")
        cache_remote = "s3://bucket/p"
        cache_endpoint = "http://127.0.0.1:9"

    prepare_remote_cache(Config(), FsRoot.open)
    assert secret not in safe_error_text(f"object store said {secret}")


def test_stage_leases_hold_across_machines_through_the_bucket(
    url: S3Url, s3env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runjournal.adapters import stage_leases
    from runjournal.adapters.stage_leases import BucketStageLeases, FileStageLeases
    from runjournal.domain.decisions import Stage
    from runjournal.domain.events import LeaseWaitOutcome
    from runjournal.domain.leases import LeaseRefused
    from runjournal.domain.ports import CheckpointKey

    key = CheckpointKey("step", "lane", Stage.EXTRACT, "a" * 64)
    one, two = _mirror(tmp_path, "a", url, s3env), _mirror(tmp_path, "b", url, s3env)
    with one, two:

        def leases(root: FsRoot, run: str, **kw: Any) -> BucketStageLeases:
            local = FileStageLeases(root, "p", run, wait=kw.get("wait", True))
            return BucketStageLeases(local, open_store(root), "p", run, **kw)

        a, b = leases(one, "run-a"), leases(two, "run-b", wait=False)
        held = a.try_acquire(key)
        assert held is not None
        twin = a.try_acquire(key)  # a twin stage of the same run shares it
        assert twin is not None
        assert b.try_acquire(key) is None  # another machine: its own lock file, same bucket
        with pytest.raises(LeaseRefused, match="run-a"):
            b.acquire(key)
        twin.release()
        assert b.try_acquire(key) is None  # still held once
        # a waiting machine gives up after its bound, never waits for good
        c = leases(two, "run-c", wait_max=0.2)
        lease, waited = c.acquire(key)
        assert waited is not None and waited.holder == "run-a"
        assert waited.outcome is LeaseWaitOutcome.DEADLOCK
        lease.release()
        held.release()
        lease, waited = c.acquire(key)  # free: taken at once
        assert waited is None
        lease.release()
        # a killed run's lease object expires and is taken over
        d = leases(one, "run-d")
        assert d.try_acquire(key) is not None
        d._stop.set()  # as if its process were gone: no refresh
        monkeypatch.setattr(stage_leases, "BUCKET_LEASE_TTL_S", 0.0)
        taken = leases(two, "run-e").try_acquire(key)
        assert taken is not None
        taken.release()
        for each in (a, b, c):
            each.close()
        assert open_store(one).meta_list(stage_leases.BUCKET_LEASES) == []
