"""The composition root: the only place that turns settings into physical collaborators.

It decides which collaborators exist (docs/internals.md "One run, phase by phase"): no chunk-plan
store in bypass mode, a checkpoint recorder only when recording is on, a loader only for a
`--resume` or `--recompute` invocation. Nothing here runs a stage.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from runjournal.adapters.checkpoints import CheckpointLoader, CheckpointRecorder, Workspace
from runjournal.adapters.chunkplans import ChunkPlanFileStore
from runjournal.adapters.fsroot import FsRoot
from runjournal.cli.settings import EffectiveConfig
from runjournal.domain.decisions import CheckpointState, PredecessorState
from runjournal.domain.plan_keys import CacheMode
from runjournal.domain.ports import CheckpointKey, LoadedCheckpoint, RestoredArtifact


@dataclass
class Collaborators:
    """What one `run` invocation was wired with (tests assert on this directly)."""

    plan_store: ChunkPlanFileStore | None
    loader: CheckpointLoader | _EmptyLoader | None
    recorder: CheckpointRecorder | None
    cache_root: FsRoot | None
    workspace: Workspace | None = None

    def close(self) -> None:
        if self.workspace is not None:
            self.workspace.close()
        if self.cache_root is not None:
            self.cache_root.close()


def workspace_dir(config: EffectiveConfig, pipeline: str) -> str:
    return os.path.join(config.cache_root, "workspaces", pipeline)


def build_collaborators(
    config: EffectiveConfig, *, pipeline: str, resume: bool, recompute: bool
) -> Collaborators:
    mode = config.cache_mode
    wants_loader = resume or recompute
    needs_cache = mode is not CacheMode.BYPASS or config.checkpoints or wants_loader
    cache_root: FsRoot | None = None
    if needs_cache:
        # Only a writer creates the cache root; readers work on what exists.
        creates = config.checkpoints or mode in (CacheMode.USE, CacheMode.REFRESH)
        if creates or os.path.isdir(config.cache_root):
            cache_root = FsRoot.open(config.cache_root, create=creates)
    plan_store = None
    if mode is not CacheMode.BYPASS and cache_root is not None:
        plan_store = ChunkPlanFileStore.open_for_mode(cache_root, mode)
    elif mode is CacheMode.READ_ONLY:
        # Nothing to read yet: every lookup is "compute it", and nothing is ever written.
        plan_store = ChunkPlanFileStore(None, mode=mode)
    workspace = Workspace.in_cache(cache_root, pipeline) if cache_root is not None else None
    loader = CheckpointLoader(workspace) if wants_loader and workspace is not None else None
    recorder = CheckpointRecorder(workspace) if config.checkpoints and workspace else None
    if wants_loader and loader is None:
        loader = _EmptyLoader()
    return Collaborators(
        plan_store=plan_store,
        loader=loader,
        recorder=recorder,
        cache_root=cache_root,
        workspace=workspace,
    )


class _EmptyLoader:
    """A resume with no cache root yet: every scope is simply missing."""

    def load(self, key: CheckpointKey, codec_id: str) -> LoadedCheckpoint:
        return LoadedCheckpoint(state=CheckpointState.MISSING)

    def load_accepted_artifact(
        self, step: str, lane: str, lane_identity: str, codec_id: str
    ) -> RestoredArtifact:
        return RestoredArtifact(state=PredecessorState.MISSING)
