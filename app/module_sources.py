"""Which module each step loaded, and a warning when its source changed but not its fingerprint.

Reuse trusts the fingerprint a module declares (docs/modules.md "Fingerprints"): a plugin
edited without bumping it keeps reusing results of the old code. At resolution each step's
module is recorded as `ModuleObserved` (spec, fingerprint, digest of its source file when
it can be read). The newest earlier `ModuleObserved` of the same pipeline and step in this
journal is the comparison: same fingerprint and another source digest is a warning, shown
in the run's output and journaled as `WarningRecorded`. Nothing about reuse changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from runjournal.adapters.journal.journal_errors import JournalError
from runjournal.adapters.module_loader import CLASS_DIGEST, module_source
from runjournal.domain.events import ModuleObserved
from runjournal.domain.pipeline import ResolvedPipeline
from runjournal.domain.run import run_aggregate_id

if TYPE_CHECKING:
    from runjournal.adapters.journal import JournalStore


class ModuleRecorder(Protocol):
    """What observing the modules records (the run's journal session)."""

    def module_observed(
        self,
        *,
        step: str,
        module: str,
        fingerprint: str,
        source: str | None,
        source_sha256: str | None,
    ) -> None: ...

    def warning(self, *, step: str, lane: str, message: str) -> None: ...


def _previous(
    store: JournalStore, pipeline: str, run_id: str
) -> dict[tuple[str, str], tuple[str, Any]]:
    """(step, fingerprint) -> (run id, its oldest ModuleObserved) among this pipeline's
    other runs: the code that fingerprint first stood for, so the warning is repeated on
    every run until the fingerprint changes (issue 32)."""
    runs = {
        run_aggregate_id(r.run_id): r.run_id
        for r in store.list_runs()
        if r.pipeline == pipeline and r.run_id != run_id
    }
    first: dict[tuple[str, str], tuple[str, Any]] = {}
    if not runs:
        return first
    from eventsourcing.utils import get_topic  # the journal is open: eventsourcing is loaded

    for _position, event in store.notifications(0, [get_topic(ModuleObserved)]):
        other = runs.get(event.originator_id)
        if other is not None and isinstance(event, ModuleObserved):
            first.setdefault((event.step, event.fingerprint), (other, event))  # commit order
    return first


def observe_modules(
    *,
    recorder: ModuleRecorder,
    store: JournalStore,
    pipeline: ResolvedPipeline,
    specs: dict[str, str],
    run_id: str,
) -> list[dict[str, Any]]:
    """Record each step's module; return (and journal) the source-changed warnings.

    `specs` maps step id -> the `module` string of the pipeline file. Returns warnings as
    `{"step", "lane", "message"}` (lane None: they concern the step, not one lane).
    """
    sources = {step.id: module_source(step.module) for step in pipeline.steps}
    previous: dict[tuple[str, str], tuple[str, Any]] = {}
    if any(sources.values()):
        try:
            previous = _previous(store, pipeline.name, run_id)
        except JournalError:
            previous = {}  # the comparison is advice; the run's own journal writes will tell
    warnings: list[dict[str, Any]] = []
    for step in pipeline.steps:
        found = sources[step.id]
        fingerprint = type(step.module).fingerprint
        recorder.module_observed(
            step=step.id,
            module=specs.get(step.id, ""),
            fingerprint=fingerprint,
            source=found[0] if found else None,
            source_sha256=found[1] if found else None,
        )
        before = previous.get((step.id, fingerprint))
        if found is None or before is None or fingerprint.startswith("source:"):
            continue  # a `source` fingerprint changes with the code: nothing to warn of
        other_run, observed = before
        digest = observed.source_sha256
        if digest is None or digest == found[1] or not digest.startswith(CLASS_DIGEST):
            continue  # unchanged, or a whole-file digest of an older runjournal
        message = (
            f"the source of module '{specs.get(step.id, '')}' changed since run {other_run} "
            f"but its fingerprint '{fingerprint}' did not: results computed by the old code "
            "are still reused; bump `fingerprint` to recompute them"
        )
        recorder.warning(step=step.id, lane="", message=message)
        warnings.append({"step": step.id, "lane": None, "message": message})
    return warnings
