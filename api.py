"""The public Python API: `runjournal.Project` (docs/python-api.md).

A project is a pipeline file and its settings. `Project.open(path, **settings)` resolves
them as `runjournal run` does (flag > env > the pipeline's `[runjournal]` table > user
config > default, docs/configuration.md), so a run started here and one started from the
command line share the journal, the checkpoints and the identities: either resumes the
other with every stage reused. Each method calls a use-case of `app/` wired by the one
composition root (cli/compose.py); errors are `RunjournalError`s (app/errors.py), never
`SystemExit`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from runjournal.app.errors import (
    NotPersistedError,
    RunEnd,
    RunFailedError,
    RunInterruptedError,
    RunjournalError,
    UsageError,
)

__all__ = [
    "NotPersistedError",
    "Output",
    "Pipeline",
    "Project",
    "RunFailedError",
    "RunInterruptedError",
    "RunResult",
    "RunjournalError",
    "Step",
    "UsageError",
]

PIPELINE_FILE = "pipeline.toml"  # what `runjournal init` writes, found in a directory
CODE_PIPELINE = "<python>"  # the file name a pipeline built in code is recorded under


@dataclass(frozen=True)
class Step:
    """One step of a pipeline built in code: `module` is a module class (a function
    decorated with `@chunk_step`, or a `Module` subclass) or a module spec string; the
    other keys are those of a `[[steps]]` table (docs/pipeline.md)."""

    id: str
    module: Any
    scope: str = "document"
    consumes: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    validators: tuple[str, ...] = ()
    profile: str | None = None


@dataclass(frozen=True)
class Pipeline:
    """A pipeline built in code, no TOML file: what `pipeline.toml` would hold
    (docs/pipeline.md). `directory` is where it lives: inputs, references and the roots'
    defaults are relative to it, as to a pipeline file's directory."""

    name: str
    inputs: tuple[str, ...]
    steps: tuple[Step, ...]
    directory: str = "."
    chunking: Mapping[str, Any] = field(default_factory=dict)
    references: tuple[str, ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)  # its `[runjournal]` table

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "steps", tuple(self.steps))
        object.__setattr__(self, "references", tuple(self.references))

    def document(self) -> dict[str, Any]:
        """The pipeline as the parsed TOML document it equals."""
        doc: dict[str, Any] = {
            "name": self.name,
            "inputs": list(self.inputs),
            "steps": [
                {
                    "id": step.id,
                    "module": _module_spec(step.module),
                    "scope": step.scope,
                    **({"consumes": list(step.consumes)} if step.consumes else {}),
                    **({"params": dict(step.params)} if step.params else {}),
                    **({"validators": list(step.validators)} if step.validators else {}),
                    **({"profile": step.profile} if step.profile else {}),
                }
                for step in self.steps
            ],
        }
        if self.chunking:
            doc["chunking"] = dict(self.chunking)
        if self.references:
            doc["references"] = list(self.references)
        if self.settings:
            doc["runjournal"] = dict(self.settings)
        return doc

    def modules(self) -> dict[str, Any]:
        """The module instances of the steps given as classes (step id -> instance)."""
        return {step.id: step.module() for step in self.steps if isinstance(step.module, type)}


def _module_spec(module: Any) -> str:
    """The spec a module class is recorded (and found again) by: `package.module:Name`."""
    if isinstance(module, str):
        return module
    return f"{module.__module__}:{module.__qualname__}"


def chunk_step(fn: Any = None, **options: Any) -> Any:
    """`@runjournal.chunk_step`: a function of a chunk as a module (adapters/function_steps.py)."""
    from runjournal.adapters.function_steps import chunk_step as make

    return make(fn, **options)


@dataclass(frozen=True)
class Output:
    """One file of a run directory: its path, digest and size; `read_bytes()` its content."""

    name: str
    path: str
    sha256: str
    size: int

    def read_bytes(self) -> bytes:
        with open(self.path, "rb") as fh:
            return fh.read()

    @property
    def bytes(self) -> bytes:
        return self.read_bytes()


@dataclass
class RunResult:
    """A run that reached its stages: succeeded, failed or interrupted.

    `document` is the `run --json` document (docs/operations.md "JSON documents"), the
    other attributes are views of it.
    """

    run_id: str
    status: str
    end: RunEnd
    document: dict[str, Any]
    error: Any = None  # the run's RunError (step, lane, reason code, message), if it failed
    hints: list[str] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    @property
    def outputs(self) -> dict[str, Output]:
        """The run directory's outputs by name (paths, digests; `.bytes` their content)."""
        return {
            o["name"]: Output(o["name"], o["path"], o["sha256"], o["size"])
            for o in self.document.get("outputs") or []
        }

    @property
    def decisions(self) -> dict[str, int]:
        """How many stages were decided with each reason code."""
        return dict(self.document.get("decisions") or {})

    @property
    def failures(self) -> list[dict[str, Any]]:
        """Every failed stage: step, lane, stage, chunk, reason code, cause, message."""
        return list(self.document.get("failures") or [])

    @property
    def llm(self) -> dict[str, Any]:
        """LLM usage: spent and saved, per step, and the limits of this run."""
        return dict(self.document.get("llm") or {})

    @property
    def run_dir(self) -> str | None:
        return self.document.get("run_dir") or None

    @property
    def persistence_errors(self) -> list[str]:
        return list(self.document.get("persistence_errors") or [])


def _typed(exc: RunjournalError) -> RunjournalError:
    """A CliError (raised by the parsing the CLI shares with this API) as the typed error
    of its exit code (cli/exit_codes.py `EXIT_CODES`)."""
    from runjournal.cli.exit_codes import EXIT_CODES, CliError

    if not isinstance(exc, CliError):
        return exc
    kind = next((k for k, code in EXIT_CODES.items() if code == exc.exit_code), RunFailedError)
    return kind(exc.message, run_id=exc.run_id)


def _settings_flags(settings: Mapping[str, Any]) -> dict[str, object]:
    """Keyword settings as flags: the names of the settings table (docs/configuration.md)."""
    from runjournal.cli.settings import SETTINGS_BY_NAME

    unknown = sorted(set(settings) - set(SETTINGS_BY_NAME))
    if unknown:
        raise UsageError(f"not settings: {', '.join(unknown)} (docs/configuration.md)")
    return {
        name: os.fspath(value) if isinstance(value, os.PathLike) else value
        for name, value in settings.items()
        if value is not None
    }


class Project:
    """A pipeline file and its settings; `run`, `plan`, `runs`, `explain`, `audit`, and
    the maintenance use-cases: `gc`, `recover`, `export`, `import_`,
    `rebuild_projections`, `projection_status`."""

    def __init__(
        self, pipeline: str, settings: Mapping[str, Any], built: Pipeline | None = None
    ) -> None:
        self.pipeline = pipeline
        self.settings = dict(settings)
        self.built = built  # a pipeline built in code, or None: the file `pipeline`

    @classmethod
    def open(cls, path_or_pipeline: str | os.PathLike[str] | Pipeline, **settings: Any) -> Project:
        """A pipeline TOML file, a directory holding `pipeline.toml`, or a `Pipeline`
        built in code. `settings` are the settings of docs/configuration.md by name
        (`output_root=`, `cache_root=`, `journal=`, `jobs=`, ...), as their flags give them."""
        _settings_flags(settings)  # an unknown name fails here, not at the first run
        if isinstance(path_or_pipeline, Pipeline):
            where = os.path.abspath(path_or_pipeline.directory)
            project = cls(os.path.join(where, CODE_PIPELINE), settings, path_or_pipeline)
            project._parse({})  # the pipeline and the settings are checked now
            return project
        path = os.fspath(path_or_pipeline)
        if os.path.isdir(path):
            path = os.path.join(path, PIPELINE_FILE)
        project = cls(path, settings)
        project._parse({})  # the file and the settings are checked now (UsageError)
        return project

    # --- use-cases ------------------------------------------------------------------

    def run(
        self,
        *,
        resume: bool | None = True,
        jobs: int | None = None,
        recompute: Iterable[str] = (),
        inputs: Iterable[str] = (),
        overrides: Mapping[str, str] | None = None,
        report: bool = False,
        llm_record: str | None = None,
        llm_replay: str | None = None,
        max_cost: float | None = None,
        max_tokens: int | None = None,
        **settings: Any,
    ) -> RunResult:
        """Run the pipeline (docs/python-api.md "Running"). `resume=True` reuses every
        stage whose checkpoint is valid, as `run --resume` does. A run that reached its
        stages is a `RunResult` whatever its outcome; one that could not is an error."""
        from runjournal.app.run_pipeline import RunView
        from runjournal.app.run_pipeline import run as run_use_case
        from runjournal.cli.compose import factories, run_ports
        from runjournal.cli.llm_wiring import LLMRequest

        llm = LLMRequest(
            record=llm_record,
            replay=llm_replay,
            max_cost=None if max_cost is None else str(max_cost),
            max_tokens=None if max_tokens is None else str(max_tokens),
        )
        parsed = self._parse(
            {"resume": resume, "jobs": jobs, **settings},
            recompute=tuple(recompute),
            inputs=tuple(os.fspath(i) for i in inputs),
            overrides=overrides,
            llm=llm,
            report=report,
            argv=self._argv(resume, jobs, recompute),
        )
        made = factories()
        view = RunView(progress=made.progress(enabled=False))
        try:
            result = run_use_case(parsed, run_ports(made), view)
        except RunjournalError as exc:
            raise _typed(exc) from None
        return RunResult(
            run_id=result.run_id,
            status=result.status,
            end=result.end,
            document=result.document,
            error=result.error,
            hints=list(getattr(result.notes, "hints", []) or []),
        )

    def plan(
        self,
        *,
        resume: bool | None = True,
        recompute: Iterable[str] = (),
        inputs: Iterable[str] = (),
        overrides: Mapping[str, str] | None = None,
        **settings: Any,
    ) -> Any:
        """The decisions a run would take, predicted (`runjournal plan`): a `PlanResult`
        with `.decisions`, `.stages` and the `plan --json` `.document`."""
        from runjournal.app.plan import plan as plan_use_case
        from runjournal.cli.compose import plan_ports

        parsed = self._parse(
            {"resume": resume, **settings},
            recompute=tuple(recompute),
            inputs=tuple(os.fspath(i) for i in inputs),
            overrides=overrides,
            with_llm=False,
        )
        try:
            return plan_use_case(parsed, plan_ports())
        except RunjournalError as exc:
            raise _typed(exc) from None

    def runs(self) -> list[dict[str, Any]]:
        """The runs of this project's journal, oldest first (`runs list --json`)."""
        from runjournal.app.queries import run_rows

        return self._reading(run_rows, missing=[])

    def explain(self, run: str = "latest") -> dict[str, Any]:
        """Every decision of RUN by step and reason code (`explain RUN --json`)."""
        from runjournal.app.queries import explain

        return self._reading(lambda store: explain(store, run))

    def audit(self, run: str = "latest", *, keys: Iterable[str] = ()) -> dict[str, Any]:
        """Re-decide every decision of RUN and verify its chain, tree, seals and run
        directory (`journal audit RUN --json`); `["verdict"]` is "ok" or "different"."""
        from runjournal.app.audit_run import audit
        from runjournal.cli.compose import factories
        from runjournal.cli.keys_cmds import trusted_keys

        trusted = trusted_keys(tuple(keys))
        open_root = factories().open_root
        return self._reading(lambda store: audit(store, run, trusted, open_root=open_root).document)

    # --- maintenance (docs/python-api.md "Maintenance") --------------------------------

    def gc(
        self,
        *,
        keep: int | None = None,
        older_than: str | timedelta | None = None,
        cache: bool = False,
        max_cache_size: int | str | None = None,
        forget_missing: bool = False,
        include_unregistered: bool = False,
        dry_run: bool = False,
    ) -> Any:
        """Remove the run directories of finished runs beyond the retention and, with
        `cache` (or `max_cache_size`), collect the cache root (`runjournal gc`): a
        `GcReport` (`.runs`, `.removed`, `.cache`; `.document()` is `gc --json`'s)."""
        from runjournal.app.collect_garbage import GcRequest, collect_garbage
        from runjournal.cli.age import parse_age
        from runjournal.cli.cache_gc_cmd import parse_size

        try:
            age = parse_age(older_than) if isinstance(older_than, str) else older_than
            size = parse_size(max_cache_size) if isinstance(max_cache_size, str) else max_cache_size
        except RunjournalError as exc:
            raise _typed(exc) from None
        request = GcRequest(
            keep=keep,
            older_than=age,
            cache=cache,
            max_cache_size=size,
            forget_missing=forget_missing,
            include_unregistered=include_unregistered,
            dry_run=dry_run,
        )
        return self._maintaining(lambda config, ports: collect_garbage(config, request, ports))

    def recover(self, *, dry_run: bool = False) -> Any:
        """Terminalize the runs whose process is gone as abandoned and sweep leftover temp
        files (`runjournal recover`): a `RecoverReport` (`.abandoned`, `.skipped`,
        `.temp_files`; `.document()` is `recover --json`'s)."""
        from runjournal.app.recover_runs import recover_runs

        return self._maintaining(lambda config, ports: recover_runs(config, ports, dry_run=dry_run))

    def export(self, run: str, path: str | os.PathLike[str], *, force: bool = False) -> Any:
        """Write RUN (an id, a unique prefix or `latest`) to the export file `path`
        (`runjournal journal export`): an `ExportResult` (`.run_id`, `.events`, `.file`,
        `.sha256`)."""
        from runjournal.app.export_import import export_run_file

        output = os.fspath(path)
        return self._maintaining(
            lambda config, ports: export_run_file(
                config, ports, run=run, output=output, force=force
            )
        )

    def import_(self, path: str | os.PathLike[str]) -> Any:
        """Verify the export file `path` and read its run into this project's journal
        (`runjournal journal import`; a SQLite journal is created if need be): an
        `ImportResult` (`.run_id`, `.events`, `.status`: `imported` or
        `already_imported`)."""
        from runjournal.app.export_import import import_run_file

        file = os.fspath(path)
        return self._maintaining(lambda config, ports: import_run_file(config, ports, file=file))

    def rebuild_projections(self, name: str | None = None, *, run: str | None = None) -> Any:
        """Rebuild the materialised views (all, or the one `name`d; for every run, or RUN)
        (`runjournal projections rebuild`): a `RebuildReport` (`.projections`,
        `.failures`, `.ok`)."""
        from runjournal.app.rebuild_projections import rebuild_projections

        return self._maintaining(
            lambda config, ports: rebuild_projections(config, ports, name=name, run=run)
        )

    def projection_status(self, name: str | None = None) -> Any:
        """Whether each materialised view is stale (`runjournal projections status`): a
        `ProjectionStatusReport` (`.projections`)."""
        from runjournal.app.rebuild_projections import projection_status

        return self._maintaining(lambda config, ports: projection_status(config, ports, name=name))

    # --- shared ---------------------------------------------------------------------

    def _parse(self, given: Mapping[str, Any], **kwargs: Any) -> Any:
        from runjournal.cli.run_cmd import parse_run

        overrides = kwargs.pop("overrides", None) or {}
        flags = _settings_flags(
            {**self.settings, **{k: v for k, v in given.items() if v is not None}}
        )
        if self.built is not None:
            kwargs["source"] = (self._built_spec(), self.pipeline)
            kwargs["modules"] = self.built.modules()
        try:
            return parse_run(
                self.pipeline,
                flags=flags,
                overrides=tuple(f"{k}={v}" for k, v in overrides.items()),
                **kwargs,
            )
        except RunjournalError as exc:
            raise _typed(exc) from None

    def _built_spec(self) -> Any:
        """The spec of the pipeline built in code, checked as a pipeline file's would be."""
        from runjournal.domain.pipeline_spec import PipelineSpecError, parse_pipeline

        assert self.built is not None
        try:
            return parse_pipeline(self.built.document(), file=self.pipeline)
        except PipelineSpecError as exc:
            raise UsageError(str(exc)) from None

    def _reading(self, read: Any, missing: Any = None) -> Any:
        """`read(store)` on this project's journal, opened read-only; `missing` when no
        run made the journal yet (None: that is a UsageError)."""
        from runjournal.adapters.journal.journal_errors import JournalError
        from runjournal.app.journals import journal_exists
        from runjournal.cli.compose import journal_for

        config = self._parse({}, with_llm=False).config
        if not journal_exists(config.journal):
            if missing is not None:
                return missing
            raise UsageError(f"no journal at {config.journal}: the project has no run yet")
        try:
            store = journal_for(config, read_only=True)
        except JournalError as exc:
            raise RunFailedError(str(exc)) from None
        try:
            return read(store)
        except RunjournalError as exc:
            raise _typed(exc) from None
        except JournalError as exc:
            raise RunFailedError(f"journal: {exc}") from None
        finally:
            store.close()

    def _maintaining(self, use_case: Any) -> Any:
        """`use_case(config, ports)` with this project's settings, wired by the composition
        root (cli/compose.py `maintenance_ports`); its errors typed."""
        from runjournal.adapters.journal.journal_errors import JournalError
        from runjournal.cli.compose import maintenance_ports

        config = self._parse({}, with_llm=False).config
        try:
            return use_case(config, maintenance_ports())
        except RunjournalError as exc:
            raise _typed(exc) from None
        except JournalError as exc:
            raise RunFailedError(f"journal: {exc}") from None

    def _argv(
        self, resume: bool | None, jobs: int | None, recompute: Iterable[str]
    ) -> tuple[str, ...]:
        """The invocation as `RunAllocated` records it: the command line this run equals."""
        argv = ["run", self.pipeline]
        if resume:
            argv.append("--resume")
        if jobs is not None:
            argv += ["--jobs", str(jobs)]
        for step in recompute:
            argv += ["--recompute", step]
        return tuple(argv)
