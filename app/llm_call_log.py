"""The LLM call log's attempts the journal lacks (docs/operations.md "LLM call log").

A run journals each LLM attempt as it ends; one killed mid-call leaves its intent log in
the cache root. `journal_pending` records such attempts as `LLMCallAttempted` (at a run's
end and in `recover`); `logged_pending` reads what a dead run's log holds.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from runjournal.adapters.journal import JournalStore
from runjournal.domain.events import RunAllocated
from runjournal.domain.ports import RunRecorder
from runjournal.projections.llm_usage import LLMUsageFold


def journal_pending(recorder: RunRecorder, pending: list[Any]) -> None:
    """Journal attempts the call log holds and the journal lacks, as `LLMCallAttempted`."""
    for item in pending:
        recorder.llm_attempt(
            step=item.step, lane=item.lane, stage=item.stage, chunk=item.chunk, attempt=item.attempt
        )


def logged_pending(store: JournalStore, run_id: str) -> tuple[list[Any], str | None]:
    """The attempts of `run_id`'s call log its journal lacks, and the log's path (None:
    the run left no log). Replies the log holds go back to the reply store first."""
    fold = LLMUsageFold()
    cache_root: str | None = None
    for event in store.events(run_id):
        if isinstance(event, RunAllocated):
            cache_root = event.cache_root
        fold.apply(event)
    if not cache_root:
        return [], None
    from runjournal.adapters.s3_store import local_cache_root

    cache_root = local_cache_root(cache_root, os.environ)  # s3://: this machine's mirror
    from runjournal.adapters.fsroot import FsRoot
    from runjournal.adapters.llm.calllog import (
        ReplyStore,
        log_path,
        pending_attempts,
        read_log,
        restore_replies,
    )
    from runjournal.adapters.s3_store import open_store

    path = log_path(cache_root, run_id)
    if not os.path.exists(path):
        return [], None
    lines = list(read_log(path))
    with contextlib.suppress(OSError), FsRoot.open(cache_root) as root:
        # where the run's replies live (docs/internals.md "Packed store"; for an s3://
        # cache root, its bucket: "Object-storage cache")
        packed = open_store(root)
        try:
            restore_replies(lines, ReplyStore(os.path.join(cache_root, "llm", "replies"), packed))
        finally:
            packed.close()
    return pending_attempts(lines, fold.attempt_keys), path
