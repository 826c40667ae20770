"""Phase P5: one guarded terminalization per run.

Success: validate every logical output name, create the run directory exclusively,
write the outputs, commit the terminal event, then `manifest.json` (the journal's
fold) and `report.json`. Failure: terminal event, `manifest.json`, one attempt each
at `failure.json` and `error.log`. A report that cannot be written is reported on its
own line and as a journal event, and never replaces the primary error or exit code.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runjournal.adapters.chunkplans import ChunkMapEncoder
from runjournal.adapters.fsroot import FsError, FsRoot
from runjournal.cli.output import json_bytes
from runjournal.domain.events import (
    OutputsValidated,
    OutputWritten,
    RefusedName,
    RunError,
    RunPhase,
    RunStatus,
    RunTerminated,
    TerminalPersistenceFailed,
)
from runjournal.domain.logical_names import refused_names
from runjournal.domain.modules import OutputFile
from runjournal.domain.plan_keys import ChunkMapEntry
from runjournal.domain.redaction import safe_error_text
from runjournal.projections.base import error_view
from runjournal.projections.manifest import ManifestProjection

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


class OutputsRefused(Exception):
    def __init__(self, refused: list[RefusedName]) -> None:
        first = refused[0]
        super().__init__(f"refused output name '{first.name}': {first.refusal}")
        self.refused = refused


class Terminalizer:
    def __init__(
        self,
        *,
        session: Any,
        manifest: ManifestProjection,
        output_root: str,
        run_id: str,
    ) -> None:
        self._session = session
        self._manifest = manifest
        self._output_root = output_root
        self.state = TerminalState(run_id=run_id, run_dir=os.path.join(output_root, run_id))
        self._dir: FsRoot | None = None

    # --- success ---------------------------------------------------------------

    def succeed(
        self,
        outputs: list[OutputFile],
        *,
        chunk_map: list[ChunkMapEntry],
        write_map: bool,
        write_index: bool,
        report: dict[str, Any],
        attribution: Mapping[str, tuple[str, str]] | None = None,
    ) -> TerminalState:
        own = ChunkMapEncoder(write_map=write_map, write_index=write_index).files(chunk_map)
        files = [(o.name, o.data) for o in outputs] + own
        refused = [
            RefusedName(name=name, refusal=refusal.name.lower())
            for name, refusal in refused_names(
                [name for name, _ in files], reserved_ok=[name for name, _ in own]
            )
        ]
        self._session.emit(OutputsValidated, checked=len(files), refused=refused)
        if refused:
            raise OutputsRefused(refused)
        run_dir = self._create_run_dir()
        try:
            for name, data in files:
                run_dir.write_bytes(name, data, overwrite=False)
        except FsError:
            # A failed run keeps no outputs: the directory is ours alone (created
            # exclusively just above), so everything in it goes.
            for entry in run_dir.listdir():
                with contextlib.suppress(FsError):
                    run_dir.remove_tree(entry)
            raise
        for name, data in files:
            digest = hashlib.sha256(data).hexdigest()
            step, lane = (attribution or {}).get(name, (None, None))
            self._session.emit(
                OutputWritten, name=name, sha256=digest, size=len(data), step=step, lane=lane
            )
            self.state.outputs.append(
                {
                    "name": name,
                    "path": os.path.join(self.state.run_dir, name),
                    "sha256": digest,
                    "size": len(data),
                }
            )
        self._session.emit(RunTerminated, status=RunStatus.SUCCEEDED, phase=RunPhase.EXECUTION)
        self._session.flush()
        self.state.status = RunStatus.SUCCEEDED
        self._write_manifest(run_dir)
        report.update(self.summary())
        if self._attempt(run_dir, REPORT, "report", lambda: json_bytes(report)):
            self.state.report = os.path.join(self.state.run_dir, REPORT)
        if self.state.persistence_errors:
            report["persistence_errors"] = list(self.state.persistence_errors)
        run_dir.close()
        return self.state

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
    ) -> TerminalState:
        self.state.error = error
        self.state.status = status
        self._session.emit(RunTerminated, status=status, phase=phase, error=error)
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
            "refused": [{"name": r.name, "refusal": r.refusal} for r in refused or []],
            "failures": failures or [],  # every failed stage (several with --keep-going)
        }
        if self._attempt(run_dir, FAILURE, "failure_report", lambda: json_bytes(failure)):
            self.state.failure_report = os.path.join(self.state.run_dir, FAILURE)
        log = safe_error_text(detail or error.message, 4000) + "\n"
        if self._attempt(run_dir, ERROR_LOG, "error_log", lambda: log.encode("utf-8")):
            self.state.error_log = os.path.join(self.state.run_dir, ERROR_LOG)
        run_dir.close()
        return self.state

    # --- shared ----------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        return {
            "run_id": self.state.run_id,
            "status": self.state.status.value,
            "run_dir": self.state.run_dir,
            "manifest": self.state.manifest,
            "outputs": self.state.outputs,
        }

    def _create_run_dir(self) -> FsRoot:
        root = FsRoot.open(self._output_root, create=True)
        try:
            root.mkdir(self.state.run_id, exclusive=True)
            self._dir = root.subroot(self.state.run_id)
            return self._dir
        finally:
            root.close()

    def _write_manifest(self, run_dir: FsRoot) -> None:
        view = self._manifest.view()
        if self._attempt(run_dir, MANIFEST, "manifest", lambda: json_bytes(view)):
            self.state.manifest = os.path.join(self.state.run_dir, MANIFEST)

    def _attempt(self, run_dir: FsRoot, name: str, target: str, render: Any) -> bool:
        """One attempt at a terminal file; a failure is recorded, never raised."""
        try:
            run_dir.write_bytes(name, render(), overwrite=False)
            return True
        except (FsError, OSError) as exc:
            self._persistence_failed(target, str(exc))
            return False

    def _persistence_failed(self, target: str, message: str) -> None:
        text = safe_error_text(f"could not write {target}: {message}")
        self.state.persistence_errors.append(text)
        try:
            self._session.emit(TerminalPersistenceFailed, target=target, message=text)
            self._session.flush()
        except Exception as exc:  # the journal itself failed: say so, keep the primary error
            self.state.persistence_errors.append(safe_error_text(f"journal: {exc}"))
