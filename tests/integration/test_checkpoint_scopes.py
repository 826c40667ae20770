"""Checkpoint scopes: files found by what the stage is (docs/internals.md "Checkpoint store")."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import msgspec
import pytest
from runjournal.adapters.checkpoints import (
    CheckpointLoader,
    CheckpointRecorder,
    Workspace,
    scope_of,
)
from runjournal.adapters.fsroot import FsRoot
from runjournal.domain.decisions import CheckpointState, PredecessorState, Stage, StageDigests
from runjournal.domain.identity import LaneComponents, step_identity
from runjournal.domain.ports import CheckpointKey, CheckpointRecord, StoreScope

STEP, LANE = "terms", "docs/a.md"
CHUNK = hashlib.sha256(b"docs/a.md\x00hello").hexdigest()
LID = "1" * 64
A = LaneComponents(*(hashlib.sha256(c.encode()).hexdigest() for c in "abcdefg"))
B = msgspec.structs.replace(A, config=hashlib.sha256(b"other").hexdigest())


def record(components: LaneComponents, payload: bytes = b"[1]", deps: str = "") -> CheckpointRecord:
    return CheckpointRecord(
        codec_id="c",
        lane_identity=LID,
        digests=StageDigests(components, "2" * 64, deps),
        output_sha256=hashlib.sha256(payload).hexdigest(),
        payload=payload,
    )


def key(stage: Stage, components: LaneComponents, deps: str = "") -> CheckpointKey:
    chunk = CHUNK if stage is Stage.EXTRACT else ""
    return CheckpointKey(STEP, LANE, stage, chunk, StoreScope(step_identity(components), deps, LID))


@pytest.fixture
def store(tmp_path: Path):
    with FsRoot.open(tmp_path / "ws", create=True) as root:
        workspace = Workspace(root, "p")
        yield tmp_path / "ws", CheckpointRecorder(workspace), lambda: CheckpointLoader(workspace)


@pytest.mark.parametrize("stage", list(Stage))
def test_a_switched_configuration_keeps_both_and_names_what_changed(store, stage) -> None:
    _path, recorder, loader = store
    recorder.write(key(stage, A), record(A, b"[1]"))
    recorder.write(key(stage, B), record(B, b"[2]"))
    fresh = loader()
    # A's own file is still there (B did not overwrite it)
    got = fresh.load(key(stage, A), "c")
    assert got.state is CheckpointState.PRESENT and got.record.payload == b"[1]"
    # a third configuration is compared with the lane's latest (B's) record
    c = msgspec.structs.replace(A, overrides=hashlib.sha256(b"x").hexdigest())
    other = fresh.load(key(stage, c), "c")
    assert other.state is CheckpointState.PRESENT
    assert other.record.digests.components == B


def test_a_consumer_keeps_one_result_per_dependency_digest(store) -> None:
    _path, recorder, loader = store
    d1, d2 = "3" * 64, "4" * 64
    recorder.write(key(Stage.MERGE, A, d1), record(A, b"[1]", d1))
    recorder.write(key(Stage.MERGE, A, d2), record(A, b"[2]", d2))
    assert loader().load(key(Stage.MERGE, A, d1), "c").record.payload == b"[1]"
    assert sorted(loader().stored_dependencies(STEP, LANE, step_identity(A))) == [d1, d2]


def test_a_file_moved_to_another_scope_is_corrupt(store) -> None:
    path, recorder, loader = store
    recorder.write(key(Stage.NORMALIZE, A), record(A))
    recorder.write(key(Stage.NORMALIZE, B), record(B))
    a = path / Workspace.checkpoint_name(key(Stage.NORMALIZE, A))
    b = path / Workspace.checkpoint_name(key(Stage.NORMALIZE, B))
    shutil.copyfile(b, a)
    assert loader().load(key(Stage.NORMALIZE, A), "c").state is CheckpointState.CORRUPT


def test_the_recorder_refuses_a_key_of_another_scope(store) -> None:
    _path, recorder, _loader = store
    with pytest.raises(ValueError, match="scope"):
        recorder.write(key(Stage.MERGE, A), record(B))
    assert scope_of(record(A)) == key(Stage.MERGE, A).scope


def test_recompute_finds_the_identity_whatever_the_latest(store) -> None:
    _path, recorder, loader = store
    recorder.write(key(Stage.NORMALIZE, A), record(A, b"[1]"))
    other = msgspec.structs.replace(record(B, b"[2]"), lane_identity="5" * 64)
    scope = StoreScope(step_identity(B), "", "5" * 64)
    recorder.write(CheckpointKey(STEP, LANE, Stage.NORMALIZE, "", scope), other)
    restored = loader().load_accepted_artifact(STEP, LANE, LID, "c")
    assert restored.state is PredecessorState.RESTORED and restored.record.payload == b"[1]"
    missing = loader().load_accepted_artifact(STEP, LANE, "6" * 64, "c")
    assert missing.state is PredecessorState.IDENTITY_MISMATCH
