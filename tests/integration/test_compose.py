"""Which collaborators the composition root constructs, per mode and flag.

docs/internals.md "One run, phase by phase" (P2) and "Checkpoint store".
"""

from __future__ import annotations

import os

import pytest
from runjournal.adapters.checkpoints import CheckpointLoader, CheckpointRecorder
from runjournal.adapters.chunkplans import ChunkPlanFileStore
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.journal import JournalError
from runjournal.cli.compose import Factories, Roots, build_collaborators, journal_for
from runjournal.cli.settings import resolve_settings


def config(tmp_path, **flags):
    return resolve_settings(
        flags=flags,
        env={},
        pipeline_table=None,
        pipeline_dir=str(tmp_path),
        user_config=None,
        user_config_path=None,
        cwd=str(tmp_path),
    )


def tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else None


@pytest.mark.parametrize("mode", ["use", "refresh", "read-only", "bypass"])
@pytest.mark.parametrize("resume", [False, True])
@pytest.mark.parametrize("checkpoints", [False, True])
def test_wiring_per_mode_and_flag(tmp_path, mode, resume, checkpoints):
    cache = tmp_path / "cache"
    cfg = config(tmp_path, cache_root=str(cache), cache_mode=mode, checkpoints=checkpoints)
    collab = build_collaborators(cfg, pipeline="p", resume=resume, recompute=False)
    try:
        if mode == "bypass":
            assert collab.plan_store is None
        else:
            assert isinstance(collab.plan_store, ChunkPlanFileStore) or (
                mode == "read-only" and not cache.exists() and collab.plan_store is None
            )
        if resume:
            assert collab.loader is not None
            if cache.exists():
                assert isinstance(collab.loader, CheckpointLoader)
        else:
            assert collab.loader is None
        if checkpoints:
            assert isinstance(collab.recorder, CheckpointRecorder)
        else:
            assert collab.recorder is None
        if collab.loader is not None or collab.recorder is not None:
            assert collab.loader is not collab.recorder
    finally:
        collab.close()
    # Black-box: bypass never creates chunkplans/; nothing creates workspaces/ up front.
    assert not (cache / "chunkplans").exists() or mode in ("use", "refresh")
    assert not (cache / "workspaces").exists()
    if mode in ("read-only", "bypass") and not checkpoints:
        assert not cache.exists()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("mode", ["use", "refresh", "read-only"])
def test_closing_the_collaborators_gives_back_every_descriptor(tmp_path, mode):
    cache = tmp_path / "cache"
    (cache / "chunkplans").mkdir(parents=True)
    cfg = config(tmp_path, cache_root=str(cache), cache_mode=mode, checkpoints=True)
    before = set(os.listdir("/proc/self/fd"))
    collab = build_collaborators(cfg, pipeline="p", resume=True, recompute=False)
    assert collab.plan_store is not None
    collab.plan_store.get("0" * 64)  # a lookup opens chunkplans/ if it was not yet
    collab.close()
    assert set(os.listdir("/proc/self/fd")) <= before


def test_recompute_constructs_a_loader(tmp_path):
    cfg = config(tmp_path, cache_root=str(tmp_path / "c"))
    collab = build_collaborators(cfg, pipeline="p", resume=False, recompute=True)
    assert isinstance(collab.loader, CheckpointLoader)
    collab.close()


def test_unusable_cache_root_is_an_fs_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cfg = config(tmp_path, cache_root=str(tmp_path / "file" / "sub"))
    with pytest.raises(OSError):
        build_collaborators(cfg, pipeline="p", resume=False, recompute=False)
    assert os.path.isfile(blocker)


def test_the_default_journal_is_opened_through_the_output_roots_handle(tmp_path):
    opened: list[str] = []

    def counting(path, *, create=False):
        opened.append(path)
        return FsRoot.open(path, create=create)

    cfg = config(tmp_path, output_root=str(tmp_path / "out"))
    roots = Roots(cfg, Factories(open_root=counting))
    store = journal_for(cfg, roots=roots)
    try:
        assert roots.opened(cfg.output_root) is roots.output()
        assert opened == [str(tmp_path / "out")]
    finally:
        store.close()
        roots.close()
    assert (tmp_path / "out" / "journal.sqlite3").is_file()


def test_a_read_only_journal_in_a_missing_directory_is_one_journal_error(tmp_path):
    cfg = config(tmp_path, journal=f"sqlite://{tmp_path}/nowhere/journal.sqlite3")
    with pytest.raises(JournalError) as info:
        journal_for(cfg, read_only=True)
    assert "nowhere" in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "nowhere").exists()
