"""A read-only view of the cache root for `runjournal plan`: checkpoints and chunk plans.

Nothing here creates, writes or repairs anything: the cache root is opened only if it
exists, the workspace is read through the checkpoint loader (which never writes) and
chunk plans through a read-only store, so a plan leaves every byte under the roots as it
was (docs/operations.md "`plan`").
"""

from __future__ import annotations

import os

from runjournal.adapters.checkpoints import CheckpointLoader, Workspace
from runjournal.adapters.chunkplans import ChunkPlanFileStore
from runjournal.adapters.fsroot import FsRoot
from runjournal.domain.decisions import CheckpointState, PredecessorState
from runjournal.domain.plan_keys import CacheMode
from runjournal.domain.ports import CheckpointKey, LoadedCheckpoint, RestoredArtifact


class CacheView:
    """The `CheckpointLoader` and `ChunkPlanStore` ports over what the cache holds now.

    With no cache root yet every checkpoint is missing and no plan is stored, as a run
    would find it.
    """

    def __init__(
        self,
        root: FsRoot | None,
        workspace: Workspace | None,
        plans: ChunkPlanFileStore | None,
    ) -> None:
        self._root = root
        self._workspace = workspace
        self._loader = CheckpointLoader(workspace) if workspace is not None else None
        self.plans = plans

    @classmethod
    def open(cls, cache_root: str, pipeline: str, mode: CacheMode) -> CacheView:
        """Raises FsError for a cache root that exists but cannot be opened."""
        if not os.path.isdir(cache_root):
            return cls(None, None, None)
        root = FsRoot.open(cache_root, create=False)
        workspace = Workspace.in_cache(root, pipeline)
        plans = None
        # refresh recomputes every plan and bypass has no store: neither reads one.
        if mode in (CacheMode.USE, CacheMode.READ_ONLY):
            plans = ChunkPlanFileStore.open_for_mode(root, CacheMode.READ_ONLY)
        return cls(root, workspace, plans)

    def load(self, key: CheckpointKey, codec_id: str) -> LoadedCheckpoint:
        if self._loader is None:
            return LoadedCheckpoint(state=CheckpointState.MISSING)
        return self._loader.load(key, codec_id)

    def load_accepted_artifact(
        self, step: str, lane: str, lane_identity: str, codec_id: str
    ) -> RestoredArtifact:
        if self._loader is None:
            return RestoredArtifact(state=PredecessorState.MISSING)
        return self._loader.load_accepted_artifact(step, lane, lane_identity, codec_id)

    def close(self) -> None:
        if self.plans is not None:
            self.plans.close()
        if self._workspace is not None:
            self._workspace.close()
        if self._root is not None:
            self._root.close()
