"""Directory-handle caches shared between threads (docs/internals.md "Objects shared
between threads"): the regression of issue #25 defect 1, `operation on a closed FsRoot`
at high `--jobs`, with every cache at its smallest size."""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from runjournal.adapters.checkpoints import CheckpointLoader, CheckpointRecorder, Workspace
from runjournal.adapters.chunkplans import ChunkPlanFileStore
from runjournal.adapters.dir_handles import DEFAULT_CAPACITY, DirectoryHandles
from runjournal.adapters.fsroot import FsNotFound, FsRoot
from runjournal.adapters.objects import OutputObjects, Placement
from runjournal.cli.compose import DIR_HANDLES_ENV, Factories, Roots, build_collaborators
from runjournal.cli.settings import resolve_settings
from runjournal.domain.chunking import Span
from runjournal.domain.decisions import CheckpointState, Stage, StageDigests
from runjournal.domain.identity import LaneComponents, step_identity
from runjournal.domain.plan_keys import CacheMode
from runjournal.domain.ports import CheckpointKey, CheckpointRecord, StoreScope

THREADS = 16
LANES_PER_THREAD = 25
COMPONENTS = LaneComponents(*(hashlib.sha256(c.encode()).hexdigest() for c in "abcdefg"))
LID = "1" * 64


@pytest.fixture(autouse=True)
def _switch_often() -> Iterator[None]:
    """Let the interpreter switch threads as often as it can: the races need a switch
    between a cache lookup and the use of what it returned."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def in_threads(work: Callable[[int], None], threads: int = THREADS) -> list[BaseException]:
    """Run `work(i)` on `threads` threads released together; every exception raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def body(i: int) -> None:
        start.wait()
        try:
            work(i)
        except BaseException as exc:  # collected and asserted on
            errors.append(exc)

    pool = [threading.Thread(target=body, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return errors


def merge_key(lane: str) -> CheckpointKey:
    scope = StoreScope(step_identity(COMPONENTS), "", LID)
    return CheckpointKey("ask", lane, Stage.MERGE, "", scope)


def merge_record(payload: bytes) -> CheckpointRecord:
    return CheckpointRecord(
        codec_id="c",
        lane_identity=LID,
        digests=StageDigests(COMPONENTS, "2" * 64, ""),
        output_sha256=hashlib.sha256(payload).hexdigest(),
        payload=payload,
    )


def test_checkpoint_writers_and_readers_share_a_one_handle_cache(tmp_path: Path) -> None:
    """Writer threads (write -> pointer -> read) and reader threads on distinct lanes,
    through a workspace whose directory-handle cache holds one handle: every thread
    evicts the handle another is using. Before the fix this raised `operation on a closed
    FsRoot` (or read through a closed, reused fd)."""
    before = open_fds()
    with FsRoot.open(tmp_path / "cache", create=True) as root:
        workspace = Workspace.in_cache(root, "p", open_dirs=1)
        recorder = CheckpointRecorder(workspace)
        loader = CheckpointLoader(workspace)

        def lanes(i: int) -> list[str]:
            return [f"docs/t{i}-{j}.md" for j in range(LANES_PER_THREAD)]

        def write(i: int) -> None:
            for lane in lanes(i):
                recorder.write(merge_key(lane), merge_record(lane.encode()))

        assert in_threads(write) == []

        def read(i: int) -> None:
            for lane in lanes(i):
                got = loader.load(merge_key(lane), "c")
                assert got.state is CheckpointState.PRESENT
                assert got.record is not None and got.record.payload == lane.encode()
                recorder.write(merge_key(lane), merge_record(lane.encode()))  # the pointer

        assert in_threads(read) == []
        workspace.close()
    assert open_fds() <= before  # no directory handle left open


def test_a_handle_evicted_while_lent_stays_open_until_it_is_given_back(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_bytes(name.encode())
    with FsRoot.open(tmp_path) as root:
        handles = DirectoryHandles(root, capacity=1)
        with handles.lend("a") as a:
            with handles.lend("b") as b:  # evicts "a" from the cache, which "a"'s user holds
                assert b.read_bytes("f") == b"b"
            assert not a.closed and a.read_bytes("f") == b"a"
            handles.close()  # drops "b" (idle) at once; "a" is still lent
            assert b.closed and not a.closed
        assert a.closed  # its last borrower gave it back
        assert len(handles) == 0
        with handles.lend("a") as late:  # a straggler after close: served, then closed
            assert late.read_bytes("f") == b"a"
        assert late.closed and len(handles) == 0
        assert handles.read_bytes("b", "f") == b"b" and len(handles) == 0


def test_a_directory_that_cannot_be_opened_is_not_cached(tmp_path: Path) -> None:
    with FsRoot.open(tmp_path) as root:
        handles = DirectoryHandles(root, capacity=4)
        with pytest.raises(FsNotFound), handles.lend("later"):
            pass
        (tmp_path / "later").mkdir()
        with handles.lend("later") as later:
            assert later.listdir() == []
        handles.close()


def test_a_cache_needs_room_for_one_handle(tmp_path: Path) -> None:
    with FsRoot.open(tmp_path) as root, pytest.raises(ValueError, match="at least 1"):
        DirectoryHandles(root, capacity=0)


def test_output_objects_place_from_many_threads_with_one_shard_handle(tmp_path: Path) -> None:
    """`OutputObjects` keeps its shard directories in the same kind of cache."""
    before = open_fds()
    with FsRoot.open(tmp_path / "out", create=True) as root:
        objects = OutputObjects(root, open_dirs=1)

        def place(i: int) -> None:
            with root.subroot(f"run-{i}", create=True) as run_dir:
                for j in range(LANES_PER_THREAD):
                    data = f"output {j % 7}".encode()  # shared objects, several shards
                    digest = hashlib.sha256(data).hexdigest()
                    assert objects.place(run_dir, f"o{j}.txt", data, digest) is Placement.LINKED

        assert in_threads(place) == []
        objects.close()
    assert open_fds() <= before
    # Two threads writing one new object at once each rename theirs in: a link may name
    # an inode the other replaced, so each output's bytes are checked, not link counts.
    for i in range(THREADS):
        for j in range(LANES_PER_THREAD):
            placed = tmp_path / "out" / f"run-{i}" / f"o{j}.txt"
            assert placed.read_bytes() == f"output {j % 7}".encode()


def test_chunk_plan_store_opens_its_directory_once_under_threads(tmp_path: Path) -> None:
    """The store's late-opened `chunkplans/` handle is set once: no thread opens a second
    one that nobody closes."""
    before = open_fds()
    with FsRoot.open(tmp_path / "cache", create=True) as parent:
        store = ChunkPlanFileStore.open_for_mode(parent, CacheMode.USE)
        spans = [Span(0, 5)]

        def publish_and_get(i: int) -> None:
            key = hashlib.sha256(str(i).encode()).hexdigest()
            store.get(key)
            assert store.publish(key, spans)
            assert store.get(key).spans == spans

        assert in_threads(publish_and_get) == []
        store.close()
    assert open_fds() <= before


def test_the_composition_root_sizes_the_workspace_cache(tmp_path: Path, monkeypatch) -> None:
    """`Factories.dir_handles` (in-process) and `RJ_TEST_DIR_HANDLES` (a subprocess) set
    the size; anything but a positive integer leaves each cache at its default."""
    cfg = resolve_settings(
        flags={"cache_root": str(tmp_path / "cache"), "checkpoints": True},
        env={},
        pipeline_table=None,
        pipeline_dir=str(tmp_path),
        user_config=None,
        user_config_path=None,
        cwd=str(tmp_path),
    )
    for made, size in ((Factories(dir_handles=lambda: 1), 1), (Factories(), DEFAULT_CAPACITY)):
        monkeypatch.delenv(DIR_HANDLES_ENV, raising=False)
        roots = Roots(cfg, made)
        collab = build_collaborators(cfg, pipeline="p", resume=True, recompute=False, roots=roots)
        assert collab.workspace is not None and collab.workspace._dirs.capacity == size
        collab.close()
        roots.close()
    for text, expected in (("1", 1), ("3", 3), ("0", None), ("x", None), ("", None)):
        monkeypatch.setenv(DIR_HANDLES_ENV, text)
        assert Factories().dir_handles() == expected
