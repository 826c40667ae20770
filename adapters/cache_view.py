"""A read-only view of the cache root for `runjournal plan`: checkpoints and chunk plans.

Nothing here creates, writes or repairs anything: the cache root is opened only if it
exists, the workspace is read through the checkpoint loader (which never writes) and
chunk plans through a read-only store, so a plan leaves every byte under the roots as it
was (docs/operations.md "`plan`").
"""

from __future__ import annotations

from runjournal.adapters.checkpoints import CheckpointLoader, Workspace
from runjournal.adapters.chunkplans import ChunkPlanFileStore
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.packed_store import PackedStore
from runjournal.domain.decisions import CheckpointState, PredecessorState
from runjournal.domain.ports import CheckpointKey, LoadedCheckpoint, RestoredArtifact


class CacheView:
    """The `CheckpointLoader` and `ChunkPlanStore` ports over what the cache holds now.

    With no cache root yet every checkpoint is missing and no plan is stored, as a run
    would find it.
    """

    def __init__(
        self,
        root: FsRoot | None = None,
        workspace: Workspace | None = None,
        loader: CheckpointLoader | None = None,
        plans: ChunkPlanFileStore | None = None,
        packed: PackedStore | None = None,
    ) -> None:
        """Built by the composition root (`cli/compose.py` `cache_view`): this view only
        reads through what it is given and closes it."""
        self._root = root
        self._workspace = workspace
        self._loader = loader
        self.plans = plans
        self._packed = packed

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

    def stored_dependencies(self, step: str, lane: str, identity: str) -> list[str]:
        """The D values the lane has checkpoints under (the `ScopeIndex` port)."""
        if self._loader is None:
            return []
        return self._loader.stored_dependencies(step, lane, identity)

    def close(self) -> None:
        if self.plans is not None:
            self.plans.close()
        if self._workspace is not None:
            self._workspace.close()
        if self._packed is not None:
            self._packed.close()
        if self._root is not None:
            self._root.close()
