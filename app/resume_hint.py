"""The one-line hint of a plain run that could have reused checkpoints.

A run that is not a resume invocation builds no checkpoint loader (docs/internals.md,
"Composition"), so it decides `not_resumed` everywhere and pays the full cost again.
Before such a run executes, this looks, read-only and bounded, for lanes whose accepted
normalize checkpoint was recorded under exactly the identity the lane has now (the
lookup `--recompute` uses); if one exists, the run says how to reuse them
(docs/operations.md "Resuming and explaining").
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from runjournal.adapters.fsroot import FsError, FsRoot
from runjournal.domain.decisions import PredecessorState, Stage
from runjournal.domain.identity import lane_identity
from runjournal.domain.names import CORPUS_LANE
from runjournal.domain.pipeline import ResolvedPipeline, ResolvedStep, Scope
from runjournal.domain.runner import codec_id

# (cache root, pipeline) -> a read-only checkpoint loader, closed on exit
# (cli/compose.py `checkpoint_reader`).
CheckpointReader = Callable[[FsRoot, str], AbstractContextManager[Any]]

# At most this many checkpoint files are read: the hint must not cost a run noticeably.
MAX_LOOKUPS = 32


def _lanes(step: ResolvedStep, pipeline: ResolvedPipeline) -> Iterator[tuple[str, str]]:
    """(lane, lane identity) as the runner computes them."""
    if step.scope is Scope.CORPUS:
        yield CORPUS_LANE, lane_identity(step.components, [s.sha256 for s in pipeline.sources])
        return
    for source in pipeline.sources:
        yield source.name, lane_identity(step.components, [source.sha256])


def reusable_lanes(
    cache_root: Callable[[], FsRoot | None],
    pipeline: ResolvedPipeline,
    *,
    reader: CheckpointReader,
    limit: int = MAX_LOOKUPS,
) -> int:
    """How many of the first `limit` lanes have a checkpoint valid for their identity now.

    `cache_root` gives the invocation's one handle on the cache root (None when there is
    none), so the look reads the same directory the run writes; `reader(root, pipeline)`
    a read-only checkpoint loader of the pipeline's workspace (cli/compose.py).
    """
    try:
        root = cache_root()
    except FsError:
        return 0
    if root is None:
        return 0
    found = 0
    looked = 0
    with reader(root, pipeline.name) as loader:
        for step in pipeline.steps:
            codec = codec_id(step.module, Stage.NORMALIZE)
            for lane, identity in _lanes(step, pipeline):
                if looked >= limit:
                    return found
                looked += 1
                try:
                    restored = loader.load_accepted_artifact(step.id, lane, identity, codec)
                except (FsError, ValueError):  # an unreadable scope is simply not reusable
                    continue
                if restored.state is PredecessorState.RESTORED:
                    found += 1
    return found


def resume_hint(pipeline_arg: str, count: int, *, limit: int = MAX_LOOKUPS) -> str:
    """The hint's one line, naming the command that reuses the checkpoints."""
    some = f"{count}+" if count >= limit else str(count)
    return (
        f"checkpoints valid for {some} lane(s) of this pipeline were not used (a plain run "
        f"recomputes everything): `runjournal run {shlex.quote(pipeline_arg)} --resume` "
        "reuses them, and `resume = true` in its [runjournal] table makes every run do so"
    )


# Beside the journal (in the output root's `.runjournal/`): the hint was shown once for
# this project, so it is not shown again (docs/operations.md "Resuming and explaining").
HINT_SHOWN = ".runjournal/resume-hint-shown"


def plain_run_hint(
    *,
    cache_root: Callable[[], FsRoot | None],
    pipeline_arg: str,
    pipeline: ResolvedPipeline,
    resumed: bool,
    reader: CheckpointReader,
    earlier_runs: Callable[[], bool] = lambda: True,
    state: Callable[[], FsRoot] | None = None,
) -> list[str]:
    """The hints of a run: one line when a plain run could have reused checkpoints.

    Once per project: never when the project's journal holds no earlier run (a brand-new
    project whose inputs happen to match checkpoints another project left in a shared
    cache root), and not again once it was given (`HINT_SHOWN` in the output root)."""
    if resumed:
        return []
    root = _state_root(state)
    if root is not None and _exists(root, HINT_SHOWN):
        return []
    if not earlier_runs():
        return []
    count = reusable_lanes(cache_root, pipeline, reader=reader)
    if not count:
        return []
    if root is not None:
        with contextlib.suppress(FsError):  # not remembered: shown again next time, no harm
            root.write_bytes(HINT_SHOWN, b"the plain-run --resume hint was shown\n")
    return [resume_hint(pipeline_arg, count)]


def _state_root(state: Callable[[], FsRoot] | None) -> FsRoot | None:
    if state is None:
        return None
    try:
        return state()
    except FsError:
        return None


def _exists(root: FsRoot, name: str) -> bool:
    try:
        return root.exists(name)
    except FsError:
        return False
