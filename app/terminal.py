"""Phase P5: the one terminalization of every run (docs/internals.md "One run, phase by phase").

Every `RunTerminated` the product records goes through `Terminalizer._terminate`, which
calls `Run.terminate` through the session (tests/unit/test_one_terminalization.py checks
there is no other site): success, a failed stage, refused or unwritable outputs, an
interrupt, anything a module raised, a resolution error, an unallocatable debug bundle,
and `recover` abandoning a dead run.

Success: validate every logical output name, create the run directory exclusively,
write the outputs, commit the terminal event, then `manifest.json` (the journal's
fold) and `report.json`. Failure: (a failed `--keep-going` run's outputs of its
`partial = true` steps, written like a success's), terminal event, `manifest.json`, one
attempt each at `failure.json` and `error.log`. Then the debug bundle's terminal documents
(`finish_bundle`). The Terminalizer owns the run's one list of persistence errors: a
file that cannot be written is reported on its own line and as a journal event, and
never replaces the primary error or exit code.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
from runjournal.adapters.chunkplans import ChunkMapEncoder
from runjournal.adapters.debug_bundle.layout import FAILURE as BUNDLE_FAILURE
from runjournal.adapters.debug_bundle.layout import RUN, WARNINGS
from runjournal.adapters.fsroot import FsError, FsRoot
from runjournal.adapters.objects import OUTPUT_MODE, OutputObjects
from runjournal.app.documents import json_bytes, json_bytes_streamed
from runjournal.domain.events import (
    RefusedName,
    RunError,
    RunPhase,
    RunStatus,
)
from runjournal.domain.logical_names import refused_names
from runjournal.domain.modules import OutputFile
from runjournal.domain.plan_keys import ChunkMapEntry
from runjournal.domain.redaction import safe_error_text, valid_utf8
from runjournal.domain.runner import PartialOutputs
from runjournal.domain.runner.outcome import Output, SpooledOutput
from runjournal.projections.base import error_view
from runjournal.projections.manifest import ManifestProjection
from runjournal.projections.report import ReportProjection

MANIFEST = "manifest.json"
REPORT = "report.json"
FAILURE = "failure.json"
ERROR_LOG = "error.log"


@dataclass
class TerminalState:
    """What the CLI knows at the end: paths written, outcome counts, validation."""

    run_id: str
    run_dir: str
    status: RunStatus = RunStatus.RUNNING
    manifest: str | None = None
    report: str | None = None
    failure_report: str | None = None
    error_log: str | None = None
    outputs: list[dict[str, Any]] = field(default_factory=list)
    persistence_errors: list[str] = field(default_factory=list)
    error: RunError | None = None
    # a failed --keep-going run's partial steps: step, lane, documents left out, outputs
    partial: list[dict[str, Any]] = field(default_factory=list)


def _held(output: Output) -> SpooledOutput:
    """An output as P5 places it: name, digest, size and its bytes when read; a file held
    in memory (no spool) reads its own bytes."""
    if isinstance(output, SpooledOutput):
        return output
    return SpooledOutput.held(output.name, output.data)


class OutputsRefused(Exception):
    def __init__(self, refused: list[RefusedName]) -> None:
        first = refused[0]
        super().__init__(f"refused output name '{first.name}': {first.refusal}")
        self.refused = refused


class Terminalizer:
    """The one place a run ends: terminal event, terminal files, debug bundle, errors."""

    def __init__(
        self,
        *,
        session: Any,
        run_id: str,
        manifest: ManifestProjection | None = None,
        report: ReportProjection | None = None,
        output_root: str | None = None,
        output_fs: Callable[[], FsRoot] | None = None,
        objects: Callable[[FsRoot], OutputObjects] | None = None,
        bundle: Any = None,
        summary: Any = None,
    ) -> None:
        self._session = session
        self._manifest = manifest
        self._report = report
        self._output_root = output_root
        self._output_fs = output_fs  # the invocation's one output-root handle (cli/compose.py)
        self._objects = objects  # the output root's object store (cli/compose.py)
        self._bundle = bundle  # the run's DebugBundle, if one was allocated
        self._summary = summary  # its live DebugSummaryProjection
        run_dir = os.path.join(output_root, run_id) if output_root is not None else ""
        self.state = TerminalState(run_id=run_id, run_dir=run_dir)
        self._dir: FsRoot | None = None

    def _terminate(self, status: RunStatus, phase: RunPhase, error: RunError | None) -> None:
        """The product's one `RunTerminated`: `Run.terminate` validates it."""
        self._session.terminate(status, phase, error)

    def attach_bundle(self, bundle: Any, summary: Any) -> None:
        """The debug bundle, once allocated (after `RunAllocated`), and its live summary."""
        self._bundle, self._summary = bundle, summary

    def not_persisted(self, lines: list[str]) -> None:
        """Requested state written elsewhere that could not be (checkpoints, cassette, …)."""
        self.state.persistence_errors.extend(lines)

    @property
    def persistence_errors(self) -> list[str]:
        return list(self.state.persistence_errors)

    def report_view(self) -> dict[str, Any]:
        """The report's fold as the base of `run --json` (without the projection's head)."""
        # its outputs left out: the run's own list replaces them (app/run_pipeline.py)
        view = self._report.head() if self._report is not None else {}
        view.pop("projection", None)
        return view

    # --- success ---------------------------------------------------------------

    def succeed(
        self,
        outputs: list[Output],
        *,
        chunk_map: Iterable[ChunkMapEntry],
        write_map: bool,
        write_index: bool,
        attribution: Mapping[str, tuple[str, str]] | None = None,
    ) -> TerminalState:
        own = ChunkMapEncoder(write_map=write_map, write_index=write_index).files(chunk_map)
        files = [_held(o) for o in outputs] + [_held(OutputFile(n, d)) for n, d in own]
        # `outputs` is taken: once each file's event is recorded below, nothing holds it
        # for the documents and the manifest check that follow (issue 29: peak RSS)
        outputs.clear()
        refused = [
            RefusedName(name=name, refusal=refusal.name.lower())
            for name, refusal in refused_names(
                [f.name for f in files], reserved_ok=[name for name, _ in own]
            )
        ]
        self._session.outputs_validated(checked=len(files), refused=refused)
        if refused:
            raise OutputsRefused(refused)
        run_dir = self._create_run_dir()
        try:
            self._place_outputs(run_dir, files)
        except FsError:
            # A failed run keeps no outputs: the directory is ours alone (created
            # exclusively just above), so everything in it goes.
            for entry in run_dir.listdir():
                with contextlib.suppress(FsError):
                    run_dir.remove_tree(entry)
            raise
        for i, f in enumerate(files):
            files[i] = None  # type: ignore[call-overload]
            step, lane = (attribution or {}).get(f.name, (None, None))
            sha256 = f.sha256  # one string, the event's and the document's
            self._session.output_written(
                name=f.name, sha256=sha256, size=f.size, step=step, lane=lane
            )
            self.state.outputs.append(
                {
                    "name": f.name,
                    "path": os.path.join(self.state.run_dir, f.name),
                    "sha256": sha256,
                    "size": f.size,
                }
            )
        self._terminate(RunStatus.SUCCEEDED, RunPhase.EXECUTION, None)
        self._session.flush()
        self.state.status = RunStatus.SUCCEEDED
        self._write_manifest(run_dir)
        # The report's projection view, as `projections rebuild report` folds it again,
        # its outputs made one at a time as it is written (issue 29: peak RSS).
        report = self._report
        if report is not None and self._attempt(
            run_dir, REPORT, "report", lambda: json_bytes_streamed(report.streamed_view())
        ):
            self.state.report = os.path.join(self.state.run_dir, REPORT)
        run_dir.close()
        return self.state

    def _place_outputs(self, run_dir: FsRoot, files: list[SpooledOutput]) -> None:
        """Every output as a read-only link to its object (a copy where linking fails),
        then one sync of the output root before any event names them (docs/internals.md
        "Run outputs as links"). Each file's bytes are read (from the run's spool) only
        for its own placement, so one output at a time is in memory."""
        assert self._output_fs is not None
        root = self._output_fs()
        objects = self._objects(root) if self._objects is not None else None
        try:
            for f in files:
                data = f.data
                if objects is not None:
                    objects.place(run_dir, f.name, data, f.sha256)
                else:
                    run_dir.write_bytes(
                        f.name, data, overwrite=False, durable=False, mode=OUTPUT_MODE
                    )
                del data
        finally:
            if objects is not None:
                objects.close()
        root.sync()

    # --- failure ---------------------------------------------------------------

    def fail(
        self,
        error: RunError,
        *,
        phase: RunPhase = RunPhase.EXECUTION,
        status: RunStatus = RunStatus.FAILED,
        detail: str | None = None,
        refused: list[RefusedName] | None = None,
        failures: list[dict[str, Any]] | None = None,
        partial: PartialOutputs | None = None,
    ) -> TerminalState:
        """A run that reached P4 and did not succeed: failed or interrupted.

        `partial`: a --keep-going run's outputs of the steps that declare `partial = true`
        (docs/pipeline.md "`partial`"), written and journaled before the terminal event;
        every other output of a failed run is left out."""
        # Whatever a module put in the message or its output names, every document
        # below must encode (a lone surrogate would stop the journal and the JSON).
        error = msgspec.structs.replace(error, message=valid_utf8(error.message))
        refused = [msgspec.structs.replace(r, name=valid_utf8(r.name)) for r in refused or []]
        self.state.error = error
        self.state.status = status
        partial_view = self._place_partial(partial) if partial is not None else None
        self._terminate(status, phase, error)
        self._session.flush()
        try:
            run_dir = self._dir or self._create_run_dir()
        except FsError as exc:
            self._persistence_failed("run_dir", str(exc))
            return self.state
        self._write_manifest(run_dir)
        failure = {
            "run_id": self.state.run_id,
            "status": status.value,
            "phase": phase.value,
            "error": error_view(error),  # step, lane, reason code, cause, message
            "refused": [{"name": r.name, "refusal": r.refusal} for r in refused],
            # every failed stage (several with --keep-going), messages as valid as `error`'s
            "failures": [{**f, "message": valid_utf8(f["message"])} for f in failures or []],
        }
        if partial_view:
            failure["partial"] = partial_view
        if self._attempt(run_dir, FAILURE, "failure_report", lambda: json_bytes(failure)):
            self.state.failure_report = os.path.join(self.state.run_dir, FAILURE)
        log = safe_error_text(detail or error.message, 4000) + "\n"
        if self._attempt(run_dir, ERROR_LOG, "error_log", lambda: log.encode("utf-8")):
            self.state.error_log = os.path.join(self.state.run_dir, ERROR_LOG)
        run_dir.close()
        return self.state

    def _place_partial(self, partial: PartialOutputs) -> list[dict[str, Any]]:
        """The partial steps' outputs in the run directory (created now), each journaled;
        returns one entry per lane that left documents out (`partial` of failure.json
        and `run --json`). Names refused or a directory that cannot be written: none is
        kept, a persistence error says why."""
        files = [_held(o) for o in partial.outputs]
        refused = refused_names([f.name for f in files])
        self._session.outputs_validated(
            checked=len(files),
            refused=[RefusedName(name=n, refusal=r.name.lower()) for n, r in refused],
        )
        if refused:
            self._persistence_failed("partial outputs", "an output name is refused")
            return []
        try:
            run_dir = self._create_run_dir()
            self._place_outputs(run_dir, files)
        except FsError as exc:
            self._persistence_failed("partial outputs", str(exc))
            return []
        for f in files:
            step, lane = partial.attribution.get(f.name, (None, None))
            sha256 = f.sha256  # one string, the event's and the document's
            self._session.output_written(
                name=f.name, sha256=sha256, size=f.size, step=step, lane=lane
            )
            self.state.outputs.append(
                {
                    "name": f.name,
                    "path": os.path.join(self.state.run_dir, f.name),
                    "sha256": sha256,
                    "size": f.size,
                }
            )
        self.state.partial = [
            {
                "step": step,
                "lane": lane,
                "left_out": documents,
                "outputs": sorted(n for n, at in partial.attribution.items() if at == (step, lane)),
            }
            for (step, lane), documents in sorted(partial.left_out.items())
        ]
        return self.state.partial

    def fail_before_execution(
        self, message: str, phase: RunPhase, status: RunStatus = RunStatus.FAILED
    ) -> TerminalState:
        """A resolution error (P3), an interrupt while resolving, or an unallocatable debug
        bundle (P2): no run directory."""
        error = RunError(message=message)
        self.state.error = error
        self.state.status = status
        self.state.run_dir = ""
        self._terminate(status, phase, error)
        return self.state

    def abandon(self, message: str) -> None:
        """`recover`: the run's process is gone; the run ends as abandoned, at recovery."""
        self.state.status = RunStatus.ABANDONED
        self._terminate(RunStatus.ABANDONED, RunPhase.RECOVERY, RunError(message=message))
        self._session.flush()

    # --- the debug bundle ---------------------------------------------------------

    def finish_bundle(self) -> list[str]:
        """Write the bundle's terminal summary documents and close it (after the terminal
        event).

        `run.json`, `warnings.json` and `failure.json` are the parts of the live
        debug-summary view, so `projections rebuild debug_summary` gives the same content
        from the journal. Returns (and adds to the persistence errors) one line per
        debug write that failed; each is also journaled as `TerminalPersistenceFailed`.
        """
        bundle, summary = self._bundle, self._summary
        self._bundle = None  # once
        if bundle is None or summary is None:
            return []
        view = summary.view()
        bundle.summary.write(RUN, view["run"])
        bundle.summary.write(WARNINGS, view["warnings"])
        if view["failure"] is not None:
            bundle.summary.write(BUNDLE_FAILURE, view["failure"])
        lines: list[str] = []
        for failure in bundle.close():
            line = safe_error_text(failure.line())
            lines.append(line)
            try:
                self._session.persistence_failed(failure.target, line)
            except Exception as exc:  # the journal itself failed: say so, keep the primary
                lines.append(safe_error_text(f"journal: {exc}"))
        self.state.persistence_errors.extend(lines)
        return lines

    # --- shared ----------------------------------------------------------------

    def _create_run_dir(self) -> FsRoot:
        assert self._output_fs is not None, "a run directory needs the output root's handle"
        root = self._output_fs()  # opened once per invocation (cli/compose.py)
        root.mkdir(self.state.run_id, exclusive=True)
        self._dir = root.subroot(self.state.run_id)
        return self._dir

    def _write_manifest(self, run_dir: FsRoot) -> None:
        if self._manifest is None:
            return
        manifest = self._manifest
        render = lambda: json_bytes_streamed(manifest.streamed_view())  # noqa: E731
        if self._attempt(run_dir, MANIFEST, "manifest", render):
            self.state.manifest = os.path.join(self.state.run_dir, MANIFEST)

    def _attempt(self, run_dir: FsRoot, name: str, target: str, render: Any) -> bool:
        """One attempt at a terminal file; a failure is recorded, never raised."""
        try:
            run_dir.write_bytes(name, render(), overwrite=False)
            return True
        except (FsError, OSError, ValueError, TypeError) as exc:  # unwritable, or unencodable
            self._persistence_failed(target, str(exc))
            return False

    def _persistence_failed(self, target: str, message: str) -> None:
        text = safe_error_text(f"could not write {target}: {message}")
        self.state.persistence_errors.append(text)
        try:
            self._session.persistence_failed(target, text)
            self._session.flush()
        except Exception as exc:  # the journal itself failed: say so, keep the primary error
            self.state.persistence_errors.append(safe_error_text(f"journal: {exc}"))
