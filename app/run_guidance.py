"""What a run notes for its user besides the outcome: hints, warnings, main outputs,
`latest`, the module's traceback and a failure's remedy (docs/operations.md "The run
summary").

The run use-case (app/run_pipeline.py) calls in here at three points: before execution
(`before_execution`: module sources and the resume hint), at a stage failure
(`keep_traceback`, `failure_detail`), and after a successful terminalization
(`point_latest`, `main_outputs`). Nothing here prints: cli/run_summary.py renders.
"""

from __future__ import annotations

import os
import shlex
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from runjournal.adapters.fsroot import FsError, FsRoot
from runjournal.app.module_sources import ModuleRecorder, observe_modules
from runjournal.app.resume_hint import CheckpointReader, plain_run_hint
from runjournal.domain.events import RunError
from runjournal.domain.pipeline import ResolvedPipeline
from runjournal.domain.pipeline_spec import PipelineSpec
from runjournal.domain.ports import TraceRecorder
from runjournal.domain.reasons import ReasonCode
from runjournal.domain.redaction import redact_text, safe_error_text

if TYPE_CHECKING:
    from runjournal.adapters.journal import JournalStore

# The link to the last successful run directory, named as the `latest-ok` run reference
# it agrees with (`latest` is the last run of any status; docs/operations.md "Run references").
LATEST = "latest-ok"
TRACEBACK_LIMIT = 20000
# runjournal's own files in a run directory: never a "main" output.
OWN_FILES = frozenset({"chunk-map.json", "chunk-map.index.json"})


@dataclass
class RunNotes:
    """Collected while the run goes; rendered in the summary and the `--json` document."""

    hints: list[str] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)  # run-level, lane None
    sinks: tuple[str, ...] = ()  # steps no other step consumes
    traceback: str | None = None
    latest: str | None = None


def sink_steps(spec: PipelineSpec) -> tuple[str, ...]:
    consumed = {producer for step in spec.steps for producer in step.consumes}
    return tuple(step.id for step in spec.steps if step.id not in consumed)


class SetupRecorder(ModuleRecorder, Protocol):
    """What the step before execution records: modules, warnings and the hint."""

    def hint(self, message: str) -> None: ...


def before_execution(
    *,
    recorder: SetupRecorder,
    store: JournalStore,
    spec: PipelineSpec,
    resolved: ResolvedPipeline,
    run_id: str,
    cache_root: Callable[[], FsRoot | None],
    pipeline_arg: str,
    resumed: bool,
    reader: CheckpointReader,
    output_root: Callable[[], FsRoot] | None = None,
) -> RunNotes:
    """P3 → P4: record each step's module (with a source-changed warning), find the hint
    and record it (`HintRecorded`)."""
    notes = RunNotes(sinks=sink_steps(spec))
    notes.warnings = observe_modules(
        recorder=recorder,
        store=store,
        pipeline=resolved,
        specs={step.id: step.module for step in spec.steps},
        run_id=run_id,
    )
    notes.hints = plain_run_hint(
        cache_root=cache_root,
        pipeline_arg=pipeline_arg,
        pipeline=resolved,
        resumed=resumed,
        reader=reader,
        earlier_runs=lambda: any(r.run_id != run_id for r in store.list_runs()),
        state=output_root,
    )
    for hint in notes.hints:  # journaled: the report shows it (projections/report.py)
        recorder.hint(hint)
    return notes


def module_traceback(cause: BaseException | None) -> str | None:
    """The failing module's own traceback, redacted (shown with -v, kept by --debug trace)."""
    if cause is None:
        return None
    remote = getattr(cause, "remote_traceback", None)  # a call that ran on a worker
    if isinstance(remote, str):
        text = remote
    else:
        text = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
    text = redact_text(text)
    if len(text) > TRACEBACK_LIMIT:
        text = "…\n" + text[-TRACEBACK_LIMIT:]
    return text


def keep_traceback(failure: Any, trace: TraceRecorder | None) -> str | None:
    """The traceback of a StageFailure's module exception; `--debug trace` records it."""
    text = module_traceback(getattr(failure, "exception", None))
    if text is not None and trace is not None:
        trace.record(
            "module",
            "traceback",
            {"step": failure.step, "lane": failure.lane, "traceback": text},
        )
    return text


# What to do when a required producer cannot be restored (docs/operations.md, "When a
# required artifact cannot be restored"); `{resume}` and `{plain}` are the commands.
_REMEDIES: dict[ReasonCode, str] = {
    ReasonCode.PREDECESSOR_MISSING: (
        "the producer has no checkpoint for this lane; run `{resume}` first (it records "
        "what is missing), or recompute that step too: add `--recompute {step}`"
    ),
    ReasonCode.PREDECESSOR_IDENTITY_MISMATCH: (
        "the producer's inputs or settings changed since its checkpoint was recorded; run "
        "`{resume}` first (it recomputes only what changed), or recompute that step "
        "too: add `--recompute {step}`"
    ),
    ReasonCode.PREDECESSOR_CORRUPT: (
        "the producer's checkpoint is damaged or cannot be decoded; run `{resume}` first "
        "(it records it again), or recompute that step too: add `--recompute {step}`"
    ),
    ReasonCode.PREDECESSOR_PROVENANCE_INVALID: (
        "the producer's checkpoint names another producer; run `{plain}` once (without "
        "--resume, so the producer runs and is recorded again), or recompute that step "
        "too: add `--recompute {step}`"
    ),
}


def remedy(error: RunError, pipeline_arg: str) -> str | None:
    """The remedy of a predecessor failure, naming the commands; None for other errors."""
    template = _REMEDIES.get(error.reason_code) if error.reason_code else None
    if template is None or not error.step:
        return None
    plain = f"runjournal run {shlex.quote(pipeline_arg)}"
    return template.format(resume=f"{plain} --resume", plain=plain, step=error.step)


def failure_detail(error: RunError, pipeline_arg: str) -> str | None:
    """What `error.log` holds beyond the message: the remedy, when there is one."""
    fix = remedy(error, pipeline_arg)
    return f"{error.message} — {fix}" if fix else None


def point_latest(root: FsRoot, output_root: str, run_id: str) -> tuple[str | None, str | None]:
    """Make `<output root>/latest-ok` point at `run_id` (atomically replaced).

    Returns (the link's path, None) or (None, a one-line problem): a link that cannot be
    made is a warning, never a failure of the run. `root` is the invocation's one handle
    on the output root (cli/compose.py).
    """
    try:
        root.replace_symlink(LATEST, run_id)
    except FsError as exc:
        return None, safe_error_text(f"could not point {LATEST} at the run: {exc}")
    return os.path.join(output_root, LATEST), None


def main_outputs(outputs: list[dict[str, Any]], sinks: tuple[str, ...]) -> list[str]:
    """The run's main outputs: the files modules wrote (glossary.md, …).

    A pipeline whose modules write none has its final steps' artifacts as main outputs,
    shown as their directories (`artifacts/<step>/`).
    """
    files = [
        o["path"]
        for o in outputs
        if not o["name"].startswith("artifacts/") and o["name"] not in OWN_FILES
    ]
    if files:
        return files
    dirs: list[str] = []
    for step in sinks:
        prefix = f"artifacts/{step}/"
        for o in outputs:
            if o["name"].startswith(prefix):
                path = o["path"][: len(o["path"]) - len(o["name"])] + prefix
                if path not in dirs:
                    dirs.append(path)
                break
    return dirs
