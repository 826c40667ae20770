"""Packs on the bucket (docs/internals.md "Object-storage cache"): a run's small entries
group-committed into pack objects, read back by listing, a fresh machine reading every
entry, a wrong record detected and written again, compaction beside a reader that listed
the old packs, and the layout before packs still read (against SeaweedFS on loopback)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runjournal.adapters import s3_store
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.s3_packs import decode_index
from runjournal.adapters.s3_store import S3PackedStore, S3Url

obstore = pytest.importorskip("obstore")


@pytest.fixture
def mirrors(tmp_path: Path) -> Iterator[Any]:
    opened: list[FsRoot] = []

    def mirror(name: str) -> FsRoot:
        root = FsRoot.open(tmp_path / name, create=True)
        opened.append(root)
        return root

    yield mirror
    for root in opened:
        root.close()


def store(url: S3Url, env: dict[str, str], local: FsRoot | None = None, **kw: Any) -> S3PackedStore:
    return S3PackedStore(url, env["AWS_ENDPOINT_URL"], local=local, packs=True, **kw)


def raw(url: S3Url) -> Any:
    from obstore.store import S3Store

    return S3Store(url.bucket, client_options={"allow_http": True})


def keys(url: S3Url, prefix: str) -> list[str]:
    return sorted(
        str(m["path"]) for chunk in obstore.list(raw(url), f"{url.prefix}/{prefix}") for m in chunk
    )


def entry(i: int) -> tuple[str, bytes]:
    return f"workspaces/p/steps/s/lane{i % 7}/extract/{i:064x}.ckpt", f"envelope {i} ".encode() * 9


def test_a_cold_run_puts_far_fewer_objects_than_entries_and_a_fresh_machine_reads_them(
    url: S3Url, s3env: dict[str, str], mirrors: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Packs by count here, not by the timer: on a loaded machine the 1,500 puts below
    # outlast `PACK_DELAY_S`, and a timed flush would write a third, partial pack.
    monkeypatch.setattr(s3_store, "PACK_DELAY_S", 3600.0)
    writer = store(url, s3env, mirrors("a"))
    for i in range(1500):
        assert writer.get(entry(i)[0]) is None  # a cold run's lookups
        writer.put(*entry(i))
    writer.put("workspaces/p/steps/s/lane0/latest.extract", b"scope")  # rewritten: a ref
    writer.close()
    puts = writer.requests.counts["PUT"]
    assert puts <= 5, writer.requests.counts  # 2 packs, the pointer's object and ref
    assert len(keys(url, "packs/")) == 2
    assert keys(url, "refs/") == [f"{url.prefix}/refs/workspaces/p/steps/s/lane0/latest.extract"]

    fresh = store(url, s3env, mirrors("b"))  # another machine: an empty mirror
    for i in range(1500):
        assert fresh.get(entry(i)[0]) == entry(i)[1]
    assert fresh.get("workspaces/p/steps/s/lane0/latest.extract") == b"scope"
    counts = fresh.requests.counts
    assert counts["PUT"] == 0
    assert counts["GET"] + counts["LIST"] <= 10, counts  # a listing, 2 indexes, 2 packs, a ref
    again = store(url, s3env, mirrors("b"))  # the same machine again: indexes and packs local
    assert all(again.get(entry(i)[0]) == entry(i)[1] for i in range(0, 1500, 50))
    assert again.requests.counts["GET"] == 0 and again.requests.counts["LIST"] == 1
    # a resume writes nothing it finds unchanged
    for i in range(1500):
        again.put(*entry(i))
    again.close()
    assert again.requests.counts["PUT"] == 0
    names = fresh.names("workspaces/p/steps/s/lane3/")
    assert len(names) == len([i for i in range(1500) if i % 7 == 3])
    assert fresh.children("workspaces/p/steps/s") == [f"lane{k}" for k in range(7)]


def test_pending_records_are_read_by_their_writer_and_seen_by_others_after_a_flush(
    url: S3Url, s3env: dict[str, str]
) -> None:
    writer = store(url, s3env)
    writer.put("w/a.ckpt", b"one")
    assert writer.get("w/a.ckpt") == b"one"
    assert store(url, s3env).get("w/a.ckpt") is None
    writer.flush()
    assert store(url, s3env).get("w/a.ckpt") == b"one"
    writer.put("w/a.ckpt", b"two")  # a newer pack wins
    writer.close()
    assert store(url, s3env).get("w/a.ckpt") == b"two"


def test_the_delay_commits_a_pack_on_its_own(
    url: S3Url, s3env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3_store, "PACK_DELAY_S", 0.05)
    writer = store(url, s3env)
    done = threading.Event()
    writer.put("w/a.ckpt", b"one")
    writer.after_flush(done.set)
    assert done.wait(120)
    assert store(url, s3env).get("w/a.ckpt") == b"one"


def test_a_wrong_record_reads_empty_and_its_rewrite_wins(
    url: S3Url, s3env: dict[str, str], mirrors: Any
) -> None:
    writer = store(url, s3env)
    writer.put("w/a.ckpt", b"the right bytes")
    writer.put("w/b.ckpt", b"a neighbour")
    writer.close()
    [key] = keys(url, "packs/")
    client = raw(url)
    data = bytes(obstore.get(client, key).bytes())
    record = next(r for r in decode_index(data).records if r.name == "w/a.ckpt")
    end = record.offset + record.size
    obstore.put(client, key, data[: end - 5] + b"WRONG" + data[end:])  # torn in place
    for local in (None, mirrors("m")):  # by range, and the whole pack into the mirror
        reader = store(url, s3env, local)
        assert reader.get("w/a.ckpt") == b""  # the envelope's digest: checkpoint_corrupt
        assert reader.get("w/b.ckpt") == b"a neighbour"
    reader.put("w/a.ckpt", b"the right bytes")  # the recompute's write
    reader.close()
    assert store(url, s3env).get("w/a.ckpt") == b"the right bytes"


def test_a_torn_pack_is_never_read(url: S3Url, s3env: dict[str, str]) -> None:
    writer = store(url, s3env)
    writer.put("w/a.ckpt", b"bytes")
    writer.close()
    [key] = keys(url, "packs/")
    client = raw(url)
    data = bytes(obstore.get(client, key).bytes())
    obstore.put(client, key, data[:20])  # truncated inside its index
    assert store(url, s3env).get("w/a.ckpt") is None  # no such pack: computed again


def test_removal_records_hide_names_and_compaction_drops_them(
    url: S3Url, s3env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3_store, "PACK_GRACE_S", 0)
    writer = store(url, s3env)
    for i in range(20):
        writer.put(*entry(i))
    writer.close()
    gc = store(url, s3env)
    gone = [entry(i)[0] for i in range(5)]
    assert gc.remove(gone) == 5
    other = store(url, s3env)
    assert all(other.get(name) is None for name in gone)
    assert sorted(other.names("workspaces/")) == sorted(entry(i)[0] for i in range(5, 20))
    done = gc.compact()
    assert done.records_moved == 15
    assert len(keys(url, "packs/")) == 1
    last = store(url, s3env)
    assert all(last.get(name) is None for name in gone)
    assert all(last.get(entry(i)[0]) == entry(i)[1] for i in range(5, 20))


def test_compaction_beside_a_reader_that_listed_the_old_packs(
    url: S3Url, s3env: dict[str, str], mirrors: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = store(url, s3env)
    for batch in range(4):  # four small packs, each name written twice over them
        for i in range(batch * 10, batch * 10 + 20):
            writer.put(entry(i)[0], entry(i)[1] + str(batch).encode())
        writer.flush()
    writer.close()
    expected = {}
    for batch in range(4):
        for i in range(batch * 10, batch * 10 + 20):
            expected[entry(i)[0]] = entry(i)[1] + str(batch).encode()
    old = keys(url, "packs/")
    assert len(old) == 4
    readers = [store(url, s3env), store(url, s3env, mirrors("r"))]
    for reader in readers:
        reader.get(entry(0)[0])  # listed the four packs
    gc = store(url, s3env)
    kept = gc.compact()  # within the grace: the old packs stay
    assert kept.records_moved == len(expected) and kept.segments_removed == 0
    assert set(old) <= set(keys(url, "packs/"))
    monkeypatch.setattr(s3_store, "PACK_GRACE_S", 0)
    wrong: list[tuple[str, bytes | None]] = []
    stop = threading.Event()

    def read() -> None:  # a reader on another machine while the packs are deleted
        while not stop.is_set():
            reader = store(url, s3env)
            for name, data in expected.items():
                got = reader.get(name)
                if got != data:
                    wrong.append((name, got))

    thread = threading.Thread(target=read)
    thread.start()
    try:
        done = gc.compact()  # past it: every superseded pack goes
    finally:
        stop.set()
        thread.join()
    assert wrong == []
    assert done.segments_removed >= 4
    now = keys(url, "packs/")
    assert not set(old) & set(now) and len(now) == 1
    # readers that listed the old packs list again once and read every entry
    for reader in readers:
        assert {name: reader.get(name) for name in expected} == expected
    assert {name: store(url, s3env).get(name) for name in expected} == expected


def test_the_layout_before_packs_is_still_read_and_rewritten_into_packs(
    url: S3Url, s3env: dict[str, str]
) -> None:
    before = S3PackedStore(url, s3env["AWS_ENDPOINT_URL"])  # two objects an entry
    before.put("w/a.ckpt", b"old layout")
    before.put("w/b.ckpt", b"also old")
    assert keys(url, "packs/") == []
    now = store(url, s3env)
    assert now.get("w/a.ckpt") == b"old layout"
    assert now.names("w/") == ["w/a.ckpt", "w/b.ckpt"]
    now.put("w/a.ckpt", b"newer")  # a pack record wins over the name's ref
    now.close()
    assert store(url, s3env).get("w/a.ckpt") == b"newer"
    assert store(url, s3env).get("w/b.ckpt") == b"also old"
    assert now.ref_of("w/b.ckpt") is not None  # what a coordinator checks a worker by


def test_a_worker_ref_written_after_a_wrong_record_is_read(
    url: S3Url, s3env: dict[str, str]
) -> None:
    writer = store(url, s3env)
    writer.put("w/a.ckpt", b"the right bytes")
    writer.close()
    [key] = keys(url, "packs/")
    client = raw(url)
    data = bytes(obstore.get(client, key).bytes())
    obstore.put(client, key, data[:-3] + b"BAD")
    worker = S3PackedStore(url, s3env["AWS_ENDPOINT_URL"])  # a Dask worker writes refs
    worker.put("w/a.ckpt", b"the right bytes")
    assert store(url, s3env).get("w/a.ckpt") == b"the right bytes"


def test_a_rewritten_name_is_one_ref_carrying_its_bytes(url: S3Url, s3env: dict[str, str]) -> None:
    writer = store(url, s3env)
    name = "workspaces/p/steps/s/lane0/latest.merge"
    writer.put(name, b"scope one")
    assert writer.requests.counts["PUT"] == 1 and keys(url, "objects/") == []
    writer.put(name, b"scope two")  # rewritten in place: the last writer wins
    assert store(url, s3env).get(name) == b"scope two"
    assert S3PackedStore(url, s3env["AWS_ENDPOINT_URL"]).get(name) == b"scope two"  # a worker
    [ref] = keys(url, "refs/")
    client = raw(url)
    data = bytes(obstore.get(client, ref).bytes())
    obstore.put(client, ref, data[:-1] + b"X")  # torn: read as corrupt, never used
    assert store(url, s3env).get(name) == b""


def test_a_worker_store_reads_pack_records_and_writes_refs(
    url: S3Url, s3env: dict[str, str]
) -> None:
    coordinator = store(url, s3env)
    coordinator.put("w/extract.ckpt", b"from an earlier run")
    coordinator.close()
    worker = S3PackedStore(url, s3env["AWS_ENDPOINT_URL"])  # open_shared_cache's store
    assert worker.get("w/extract.ckpt") == b"from an earlier run"
    worker.put("w/merge.ckpt", b"the worker's")
    assert keys(url, "refs/") == [f"{url.prefix}/refs/w/merge.ckpt"]
    assert worker.ref_of("w/merge.ckpt") is not None  # what the coordinator checks


def test_a_store_that_compacts_its_own_packs_reads_on(
    url: S3Url, s3env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3_store, "PACK_GRACE_S", 0)
    own = store(url, s3env)
    for round_ in range(3):
        for i in range(10):
            own.put(entry(i)[0], entry(i)[1] + bytes([round_]))
        own.flush()
        own.compact()
        assert all(own.get(entry(i)[0]) == entry(i)[1] + bytes([round_]) for i in range(10))
    assert len(keys(url, "packs/")) == 1


def test_the_group_barrier_writes_the_pending_pack(
    url: S3Url, s3env: dict[str, str], mirrors: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal batch naming a checkpoint commits after the checkpoint is durable
    (docs/internals.md "Group durability"): on a bucket, the workspace's sync is the pack
    written, not a timer a SIGKILL may never see fire."""
    from runjournal.adapters.checkpoints import Workspace

    monkeypatch.setattr(s3_store, "PACK_DELAY_S", 3600.0)
    writer = store(url, s3env, mirrors("a"))
    workspace = Workspace.in_cache(mirrors("a"), "p", packed=writer)
    workspace.write("steps/s/lane0/extract/" + "0" * 64 + ".ckpt", b"envelope", durable=False)
    name = "workspaces/p/steps/s/lane0/extract/" + "0" * 64 + ".ckpt"
    assert store(url, s3env, mirrors("b")).get(name) is None  # pending: only its writer sees it
    workspace.sync()
    assert store(url, s3env, mirrors("c")).get(name) == b"envelope"
    writer.close()
