"""`runjournal run`: the phases of a run (docs/internals.md "One run, phase by phase"), wired from
collaborators.

P1 parse (allocates nothing) -> P2 allocate (run id, RunAllocated) -> P3 resolve the
pipeline -> P4 execute -> P5 terminalize. Each failure maps to one stderr line and
its documented exit code.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click
from runjournal import __version__
from runjournal.adapters.cache_lock import CacheLockBusy
from runjournal.adapters.fsroot import FsError
from runjournal.adapters.journal.errors import JournalError
from runjournal.adapters.module_stdout import module_stdout_to_stderr
from runjournal.adapters.pipeline_resolver import ResolutionError, resolve_pipeline
from runjournal.adapters.processes import current_process_start, host_name
from runjournal.adapters.profiles import ProfileError
from runjournal.cli.compose import (
    Collaborators,
    Roots,
    allocate_debug_bundle,
    build_collaborators,
    factories,
    journal_for,
    live_views,
    output_objects,
    stage_leases,
    workspace_dir,
)
from runjournal.cli.errors import CliError, ExitCode, error_document, print_error
from runjournal.cli.heap import settled_heap
from runjournal.cli.keys_cmds import signing_hints
from runjournal.cli.llm_wiring import (
    LLMPlan,
    LLMRequest,
    build_services,
    journal_pending,
    llm_report,
    plan_llm,
)
from runjournal.cli.manifest_check import check_run_manifest
from runjournal.cli.output import emit_json
from runjournal.cli.overrides import check_overrides
from runjournal.cli.parallel import MAX_WRITE_THREADS
from runjournal.cli.pipeline_input import load_pipeline_spec, resolve_config_and_profiles
from runjournal.cli.progress import ProgressDisplay
from runjournal.cli.run_summary import (
    RunNotes,
    before_execution,
    failure_detail,
    failure_line,
    keep_traceback,
    main_outputs,
    module_traceback,
    point_latest,
    print_hint,
    print_traceback,
    summary_lines,
)
from runjournal.cli.settings import EffectiveConfig, LeaseWaitMode
from runjournal.cli.style import stdout_styler
from runjournal.cli.terminal import OutputsRefused, Terminalizer
from runjournal.domain.events import (
    ConfigurationResolved,
    DebugBundleAllocated,
    ProfileObserved,
    RunAllocated,
    RunError,
    RunPhase,
    RunStatus,
    Setting,
)
from runjournal.domain.leases import LeaseRefused
from runjournal.domain.names import make_run_id
from runjournal.domain.pipeline import ResolvedPipeline
from runjournal.domain.pipeline_spec import PipelineSpec
from runjournal.domain.recompute import RecomputePolicy, UnknownStepError, plan_recompute
from runjournal.domain.redaction import redact_argv, redact_obj, safe_error_text
from runjournal.domain.run import Run, run_aggregate_id
from runjournal.domain.runner import Interrupt, RunOutcome, RunStopped, StageFailure
from runjournal.projections.base import error_view
from runjournal.projections.debug_summary import DebugSummaryProjection
from runjournal.projections.manifest import ManifestProjection

if TYPE_CHECKING:
    from runjournal.adapters.debug_bundle import DebugBundle, JournalSpans
    from runjournal.adapters.journal import JournalStore


class Interrupted(Interrupt):
    """SIGINT/SIGTERM: stop scheduling, flush, terminalize as interrupted.

    An `Interrupt`, so the runner lets it through a module call (never a stage failure).
    """


@dataclass
class RunRequest:
    pipeline: str
    inputs: tuple[str, ...]
    flags: dict[str, Any]
    resume: bool | None  # the flag only; the effective value is `config.resume`
    recompute: tuple[str, ...]
    overrides: tuple[str, ...]
    json: bool
    quiet: bool
    verbose: bool
    report: bool = False  # --report: report.html in the run directory
    llm: LLMRequest | None = None  # --llm-record/--llm-replay/--max-cost/--max-tokens


def parse_overrides(pairs: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--set takes NAME=VALUE pairs; got '{pair}'")
        out[key.strip()] = value
    return out


def _now() -> datetime:
    return datetime.now(UTC)


def _new_run_id() -> str:
    return make_run_id(_now().strftime("%Y%m%dT%H%M%SZ"), secrets.token_hex(4))


@dataclass
class _Parsed:
    """What phase P1 establishes without allocating anything."""

    spec: PipelineSpec
    pipeline_path: str
    config: EffectiveConfig
    user_profiles: dict[str, Any]
    overrides: dict[str, str]
    policy: RecomputePolicy
    modules: dict[str, Any] = field(default_factory=dict)  # loaded to check --set keys
    llm: LLMPlan | None = None

    @property
    def pipeline_dir(self) -> str:
        return os.path.dirname(self.pipeline_path)


@dataclass
class _Invocation:
    """What phase P2 allocated: held for the rest of the run, closed at the end."""

    run_id: str
    journal: JournalStore
    collab: Collaborators
    session: Any
    manifest: ManifestProjection
    summary: DebugSummaryProjection | None
    bundle: DebugBundle | None
    terminal: Terminalizer
    progress: ProgressDisplay
    roots: Roots  # each root opened once for the whole invocation (cli/compose.py)
    llm: Any = None  # the run's LLMServices, from P3 on

    def close(self) -> None:
        self.collab.close()
        self.journal.close()
        self.roots.close()


def execute_run(req: RunRequest, argv: list[str]) -> int:
    parsed = _parse(req)
    parallel = _start_executor(parsed.config)
    try:
        inv = _allocate(req, argv, parsed)
        try:
            return _run_allocated(req, parsed, inv, parallel)
        finally:
            inv.roots.close()  # after the journal and every writer under a root are done
    finally:
        parallel.close()  # idempotent: closed after the stages already, when they ran


def _start_executor(config: Any) -> Any:
    """The run's executor (`--executor`, `--jobs`), before anything is allocated: a
    missing extra or an unreachable scheduler is a usage error (exit 2)."""
    from runjournal.adapters.executors import ExecutorUnavailable

    try:
        return factories().executor(config.jobs, config.executor)
    except ExecutorUnavailable as exc:
        raise CliError(f"executor: {exc}") from None


def _run_allocated(req: RunRequest, parsed: _Parsed, inv: _Invocation, parallel: Any) -> int:
    try:
        resolved = _resolve(req, parsed, inv)
        if isinstance(resolved, int):
            return resolved
        notes = before_execution(
            emit=inv.session.emit,
            store=inv.journal,
            spec=parsed.spec,
            resolved=resolved,
            run_id=inv.run_id,
            cache_root=inv.roots.existing_cache,
            pipeline_arg=req.pipeline,
            resumed=parsed.config.resume or parsed.policy.active,
        )
        return _execute_and_terminalize(req, parsed, inv, resolved, notes, parallel)
    except JournalError as exc:
        # The run is allocated (its RunAllocated is committed): the failure is this run's,
        # so `--json` names it and says failed (docs/operations.md "Exit codes").
        with contextlib.suppress(Exception):
            inv.close()
        raise CliError(f"journal: {exc}", ExitCode.FAILED, run_id=inv.run_id) from None


def _parse(req: RunRequest) -> _Parsed:
    """P1: the pipeline file, settings, overrides, recompute names; nothing is allocated."""
    spec, pipeline_path = load_pipeline_spec(req.pipeline)
    config, user_profiles = resolve_config_and_profiles(spec, pipeline_path, req.flags)
    overrides = parse_overrides(req.overrides)
    try:
        policy = plan_recompute(
            spec.step_ids, {s.id: s.consumes for s in spec.steps}, req.recompute
        )
    except UnknownStepError as exc:
        raise CliError(str(exc)) from None
    modules = check_overrides(spec, os.path.dirname(pipeline_path), overrides)
    llm = plan_llm(req.llm)
    return _Parsed(
        spec, pipeline_path, config, user_profiles, overrides, policy, modules=modules, llm=llm
    )


def _allocate(req: RunRequest, argv: list[str], parsed: _Parsed) -> _Invocation:
    """P2: journal, collaborators, run id, RunAllocated, then the debug bundle if asked."""
    config, spec = parsed.config, parsed.spec
    made = factories()
    progress = made.progress(enabled=config.progress and not req.quiet and not req.json)
    progress.phase("opening the journal")
    roots = Roots(config, made)  # each root is opened once, here or on first use
    try:
        journal = journal_for(config, roots=roots)
    except JournalError as exc:
        roots.close()
        raise CliError(str(exc), ExitCode.FAILED) from None
    try:
        collab = build_collaborators(
            config,
            pipeline=spec.name,
            resume=config.resume,
            recompute=parsed.policy.active,
            roots=roots,
        )
    except FsError as exc:
        journal.close()
        roots.close()
        raise CliError(f"cache root {config.cache_root}: {exc}") from None
    except CacheLockBusy as exc:  # a gc held the lock for longer than CACHE_LOCK_WAIT
        journal.close()
        roots.close()
        raise CliError(f"cache root {config.cache_root}: {exc}", ExitCode.FAILED) from None
    try:
        roots.output()  # opened (and created) now: the run directory is made under this handle
    except FsError as exc:
        collab.close()
        journal.close()
        roots.close()
        raise CliError(f"output root {config.output_root}: {exc}") from None
    run_id = _new_run_id()
    views = live_views(config)  # the projections the session feeds (cli/compose.py)
    manifest, report, spans, summary = views.manifest, views.report, views.spans, views.summary
    listeners: list[Any] = [manifest.apply, report.apply, spans, progress.event]
    if summary is not None:
        listeners.append(summary.apply)
    # strict_order: the runner's decisions, checkpoints and executions are checked as they
    # are recorded (domain/run.py), not only by `journal audit` afterwards.
    run = Run(run_aggregate_id(run_id), _now, strict_order=True)
    # Checkpoints are durable in groups: one sync before each batch that records them
    # commits (docs/internals.md "Group durability").
    recorder = collab.recorder
    session = journal.session(
        run,
        batch_size=config.batch_size,
        listeners=listeners,
        before_commit=recorder.sync if recorder is not None else None,
        behind=True,  # full batches commit on their own thread while the run goes on
    )
    _record_allocation(
        session, spec, parsed.pipeline_path, config, run_id, argv, journal.url, parsed.policy
    )
    terminal = Terminalizer(
        session=session,
        manifest=manifest,
        report=report,
        output_root=config.output_root,
        output_fs=roots.output,
        objects=output_objects,
        run_id=run_id,
    )
    # The bundle: after a safe run id and RunAllocated, before resolution
    # (docs/internals.md "One run, phase by phase").
    command = {
        "argv": argv,
        "run_id": run_id,
        "tool_version": __version__,
        "pipeline": spec.name,
        "pipeline_file": parsed.pipeline_path,
        "overrides": parsed.overrides,
        "resume": config.resume,
        "recompute": req.recompute,
        "inputs": req.inputs,
        "debug": config.debug.value,
    }
    try:
        bundle = _allocate_bundle(session, terminal, config, spans, command, roots)
    except CliError as exc:
        # --json prints one document whatever the outcome (docs/operations.md "JSON documents")
        if req.json:
            _print_allocation_failure(terminal, exc.message)
            exc.json_printed = True
        journal.close()
        collab.close()
        roots.close()
        raise
    session.flush()
    terminal.attach_bundle(bundle, summary)
    return _Invocation(
        run_id, journal, collab, session, manifest, summary, bundle, terminal, progress, roots
    )


def _resolve(req: RunRequest, parsed: _Parsed, inv: _Invocation) -> ResolvedPipeline | int:
    """P3: modules, inputs, references, profiles; an error is journaled and exits 2."""
    config, session, bundle = parsed.config, inv.session, inv.bundle
    inv.progress.phase(f"resolving pipeline '{parsed.spec.name}'")
    # The LLM runtime of this invocation (docs/internals.md "The LLM runtime").
    cache_root = inv.collab.cache_root
    inv.llm = build_services(
        parsed.llm or plan_llm(None),
        bundle.llm_text if bundle else None,
        cache_dir=cache_root.path if cache_root is not None else None,
        run_id=inv.run_id,
    )
    try:
        profiles = factories().load_profiles(
            config.profiles_file, user_profiles=parsed.user_profiles
        )
        # Every key and URL credential the profiles give this process is hidden by value
        # from here on, wherever text is redacted (docs/internals.md "Known secrets").
        profiles.remember_secrets(os.environ)
        resolved, resolution = resolve_pipeline(
            parsed.spec,
            pipeline_dir=parsed.pipeline_dir,
            inputs_override=req.inputs or None,
            cwd=os.getcwd(),
            overrides=parsed.overrides,
            default_profile=config.profile,
            profiles=profiles,
            modules=parsed.modules,
            runtimes=inv.llm.runtime_for,
        )
    except (Interrupted, KeyboardInterrupt):
        # Ctrl-C (or SIGTERM) while modules load: the run ends interrupted, recorded.
        inv.llm.stop()
        inv.terminal.fail_before_execution(
            "interrupted", RunPhase.RESOLUTION, RunStatus.INTERRUPTED
        )
        inv.terminal.finish_bundle()
        session.flush()
        inv.close()
        raise CliError("interrupted", ExitCode.INTERRUPTED, run_id=inv.run_id) from None
    except (ResolutionError, ProfileError) as exc:
        inv.llm.stop()
        message = safe_error_text(f"{parsed.pipeline_path}: {exc}")  # as stderr will show it
        if bundle is not None:
            from runjournal.adapters.debug_bundle import RESOLUTION, resolution_payload

            bundle.summary.write(RESOLUTION, resolution_payload(config.as_rows(), error=message))
        inv.terminal.fail_before_execution(message, RunPhase.RESOLUTION)
        not_persisted = inv.terminal.finish_bundle()
        session.flush()
        inv.close()
        if not not_persisted:
            raise CliError(message, ExitCode.USAGE, run_id=inv.run_id) from None
        print_error(message)  # the primary error first, then what was not persisted
        for line in not_persisted:
            print_error(f"not persisted: {line}")
        if req.json:
            emit_json(
                {
                    **error_document(message, ExitCode.USAGE, inv.run_id),
                    "persistence_errors": not_persisted,
                }
            )
        return int(ExitCode.USAGE)
    for step_id, profile in resolution.profiles.items():
        session.emit(
            ProfileObserved,
            step=step_id,
            profile_id=profile.id,
            provider=profile.provider,
            model=profile.model,
            profile=profile.digest,
            profile_source=profile.source_digest,
            source_kind=profile.source_kind,
        )
    if bundle is not None:
        from runjournal.adapters.debug_bundle import RESOLUTION, resolution_payload, trace_llm_calls

        bundle.summary.write(
            RESOLUTION,
            resolution_payload(config.as_rows(), pipeline=resolved, profiles=resolution.profiles),
        )
        if bundle.trace is not None:
            resolved = trace_llm_calls(resolved, bundle.trace)
    return resolved


def _execute_and_terminalize(
    req: RunRequest,
    parsed: _Parsed,
    inv: _Invocation,
    resolved: ResolvedPipeline,
    notes: RunNotes,
    parallel: Any,
) -> int:
    """P4 and P5: run the stages, then one guarded terminalization, then the result."""
    config, policy, terminal = parsed.config, parsed.policy, inv.terminal
    progress = inv.progress
    made = inv.roots.made
    # `parallel`: one executor per invocation, started before allocation, closed below
    recorder = inv.collab.recorder
    writes = (
        made.checkpoint_writes(recorder, min(config.jobs, MAX_WRITE_THREADS))
        if recorder is not None and config.jobs > 1
        else None
    )
    leases = stage_leases(inv.collab, inv.run_id, config.lease_wait is LeaseWaitMode.WAIT)
    runner = made.runner(
        sink=inv.session,
        loader=inv.collab.loader,
        recorder=inv.collab.recorder,
        plan_store=inv.collab.plan_store,
        trace=inv.bundle.trace if inv.bundle is not None else None,
        recompute=policy,
        progress=progress,
        executor=progress.track(parallel),
        keep_going=config.keep_going,
        checkpoint_writes=writes,
        **({"leases": leases} if leases is not None else {}),
    )
    outcome: RunOutcome | None = None
    failures: list[dict[str, Any]] = []
    exit_code = ExitCode.OK
    progress.expect(resolved)
    signals = _Signals(runner.stop, inv.llm.refuse_new).install()
    try:
        try:
            # plugin print() output, redacted, on stderr; the start-up heap left out of
            # the collector's passes while the stages run (cli/heap.py)
            with module_stdout_to_stderr(), settled_heap():
                outcome = runner.run(resolved)
        except RunStopped:
            raise Interrupted() from None
        signals.stages_done()
        progress.finish()
        _settle_llm(inv)
        terminal.not_persisted(outcome.persistence_errors)
        try:
            state = terminal.succeed(
                outcome.outputs,
                chunk_map=outcome.chunk_map,
                write_map=config.chunk_map,
                write_index=config.chunk_map_index,
                attribution=outcome.attribution,
            )
        except OutputsRefused as exc:
            state = terminal.fail(RunError(message=str(exc)), refused=exc.refused)
            exit_code = ExitCode.FAILED
        except FsError as exc:
            state = terminal.fail(RunError(message=f"cannot write outputs: {exc}"))
            exit_code = ExitCode.FAILED
    except StageFailure as exc:
        progress.finish()
        error = RunError(
            message=exc.message,
            step=exc.step,
            lane=exc.lane,
            reason_code=exc.code,
            cause=exc.cause,
        )
        notes.traceback = keep_traceback(exc, inv.bundle.trace if inv.bundle else None)
        failures = [_failure_view(f) for f in exc.failures]
        _settle_llm(inv)
        state = terminal.fail(error, detail=failure_detail(error, req.pipeline), failures=failures)
        exit_code = ExitCode.FAILED
    except LeaseRefused as exc:  # --lease-wait fail: one line naming the other run
        progress.finish()
        state = terminal.fail(RunError(message=str(exc), step=exc.key.step, lane=exc.key.lane))
        exit_code = ExitCode.LEASED
    except (Interrupt, KeyboardInterrupt):  # a refused LLM request too (CallsStopped)
        progress.finish()
        # replies in flight within the grace are kept: their attempts are journaled
        # before the terminal event, the rest as in doubt (docs/operations.md "LLM call log")
        signals.settling()
        _settle_llm(inv, drain=signals.grace_left(), expired=lambda: signals.expired)
        state = terminal.fail(RunError(message="interrupted"), status=RunStatus.INTERRUPTED)
        exit_code = ExitCode.INTERRUPTED
    except JournalError:
        raise  # the journal itself failed: execute_run names the run (exit 1)
    except BaseException as exc:  # whatever a module raised ends the run here
        # SystemExit, a BaseException subclass, an exception whose str() raises, an event
        # the aggregate refuses: the run is terminalized as failed, its decided events
        # flushed, and the exit code is 1 (docs/operations.md "Hardening guarantees").
        progress.finish()
        notes.traceback = _escaped_traceback(exc)
        if terminal.state.status is RunStatus.RUNNING:
            with contextlib.suppress(Exception):
                _settle_llm(inv)
            state = terminal.fail(RunError(message=_escaped_message(exc)))
        else:  # the terminal event is already recorded: what failed after it is reported
            state = terminal.state
            terminal.not_persisted([_escaped_message(exc)])
        exit_code = ExitCode.FAILED
    finally:
        signals.restore()
        inv.llm.stop()  # wakes calls waiting on a backoff or a rate limit
        parallel.close()
        if writes is not None:
            writes.close()
        if leases is not None:
            leases.close()  # after every checkpoint write: each releases its stage's lease
        inv.collab.close()
    terminal.not_persisted(inv.llm.close())  # saves the --llm-record cassette
    if recorder is not None:
        terminal.not_persisted(recorder.sync_errors)  # a failed group sync of checkpoints
    terminal.finish_bundle()
    report_html = None
    internal: str | None = None
    try:
        inv.session.flush()
        inv.llm.finish(settled=True)  # every attempt of its call log is journaled
        # its manifest against its journal, every event committed (cli/manifest_check.py)
        internal = check_run_manifest(
            inv.journal, inv.run_id, inv.manifest, state.manifest is not None, inv.roots.output
        )
        if req.report:  # after every event is in the journal: the page is its projection
            from runjournal.cli.report_cmds import write_run_report

            report_html, failed = write_run_report(
                inv.journal, inv.session, inv.run_id, state.run_dir, inv.roots.output()
            )
            terminal.not_persisted(failed)
    finally:
        inv.journal.close()
    doc = terminal.report_view()  # the report's fold: counts, warnings, hints, roots
    if state.status is RunStatus.SUCCEEDED:
        notes.latest, problem = point_latest(inv.roots.output(), config.output_root, inv.run_id)
        if problem:
            doc["warnings"].append({"step": None, "lane": None, "message": problem})

    persistence = terminal.persistence_errors
    if exit_code is ExitCode.OK and persistence:
        exit_code = ExitCode.NOT_PERSISTED
    if internal is not None and exit_code in (ExitCode.OK, ExitCode.NOT_PERSISTED):
        exit_code = ExitCode.INTERNAL
    doc.update(
        run_id=inv.run_id,
        status=state.status.value,
        run_dir=state.run_dir,
        manifest=state.manifest,
        report=state.report,
        report_html=report_html,
        failure_report=state.failure_report,
        error_log=state.error_log,
        outputs=state.outputs,
        error=error_view(state.error),
        failures=failures,
        persistence_errors=persistence,
        internal_error=internal,
        main_outputs=main_outputs(state.outputs, notes.sinks),
        latest=notes.latest,
        llm=llm_report(inv.manifest.llm.view(), parsed.llm or plan_llm(None)),
    )
    _print_result(req, doc, state.error, persistence, notes)
    if internal is not None:
        print_error(internal)
    return int(exit_code)


def _record_allocation(
    session: Any,
    spec: PipelineSpec,
    pipeline_path: str,
    config: EffectiveConfig,
    run_id: str,
    argv: list[str],
    journal_url: str,
    policy: RecomputePolicy,
) -> None:
    """RunAllocated (with what `recover` and the report need) and the redacted effective
    configuration."""
    session.emit(
        RunAllocated,
        run_id=run_id,
        pipeline=spec.name,
        pipeline_file=pipeline_path,
        argv=redact_argv(argv),
        tool_version=__version__,
        run_dir=os.path.join(config.output_root, run_id),
        output_root=config.output_root,
        cache_root=config.cache_root,
        workspace=workspace_dir(config, spec.name) if config.checkpoints else None,
        debug_bundle=os.path.join(config.debug_root, run_id) if config.debug_summary else None,
        host=host_name(),
        pid=os.getpid(),
        process_start=current_process_start(),
        debug_root=config.debug_root,
        journal=journal_url,
        recompute=list(policy.selected),
        forced=list(policy.forced),
    )
    session.emit(
        ConfigurationResolved,
        settings=[
            Setting(name=str(r["name"]), value=redact_obj(r["value"]), origin=str(r["origin"]))
            for r in config.as_rows()
        ],
    )


def _allocate_bundle(
    session: Any,
    terminal: Terminalizer,
    config: EffectiveConfig,
    spans: JournalSpans,
    command: dict[str, Any],
    roots: Roots,
) -> DebugBundle | None:
    """Allocate the requested debug bundle; a failure ends the run with exit 3."""
    if not config.debug_summary:
        return None
    # The bundle writer is imported only when `--debug` asks for a bundle.
    from runjournal.adapters.debug_bundle import COMMAND, BundleAllocationError, command_payload

    run_id = command["run_id"]
    try:
        bundle = allocate_debug_bundle(
            roots.debug, config.debug_root, run_id, trace=config.debug_trace
        )
    except BundleAllocationError as exc:
        terminal.fail_before_execution(safe_error_text(str(exc)), RunPhase.ALLOCATION)
        session.flush()
        raise CliError(str(exc), ExitCode.NOT_PERSISTED) from None
    session.emit(DebugBundleAllocated, path=bundle.path, trace=config.debug_trace)
    spans.attach(bundle.trace)
    bundle.summary.write(COMMAND, command_payload(**command))
    return bundle


def _failure_view(failure: StageFailure) -> dict[str, Any]:
    """One failed stage as `run --json` and `failure.json` list it (as `explain` does)."""
    return {
        "step": failure.step,
        "lane": failure.lane,
        "stage": failure.stage.value if failure.stage is not None else None,
        "chunk": failure.chunk or None,
        "reason_code": failure.code.value,
        "cause": failure.cause.value if failure.cause else None,
        "message": failure.message,
    }


def _escaped_message(exc: BaseException) -> str:
    """One line naming what escaped the runner; its own `str()` may raise or be invalid text."""
    try:
        text = str(exc)
    except BaseException:  # a hostile __str__
        text = "(its message cannot be shown)"
    name = type(exc).__name__
    return safe_error_text(
        f"the run stopped on {name}: {text}" if text else f"the run stopped on {name}"
    )


def _escaped_traceback(exc: BaseException) -> str | None:
    """For `-v`: the traceback of what escaped, redacted; None if even that cannot be made."""
    try:
        return module_traceback(exc)
    except BaseException:  # a hostile __repr__ or __str__ in the frames
        return None


def _print_allocation_failure(terminal: Terminalizer, message: str) -> None:
    """The `--json` document of a run stopped by an unallocatable debug bundle (exit 3)."""
    line = safe_error_text(message)
    doc = terminal.report_view()
    doc.update(
        status=RunStatus.FAILED.value,
        run_dir=None,
        manifest=None,
        report=None,
        report_html=None,
        failure_report=None,
        error_log=None,
        outputs=[],
        error=error_view(RunError(message=line)),
        failures=[],
        persistence_errors=[line],
        internal_error=None,
    )
    emit_json(doc)


def _print_result(
    req: RunRequest,
    doc: dict[str, Any],
    error: RunError | None,
    persistence: list[str],
    notes: RunNotes | None = None,
) -> None:
    notes = notes or RunNotes()
    if error is not None:
        if req.verbose and notes.traceback:
            print_traceback(notes.traceback)
        print_error(failure_line(doc, error, req.pipeline))
    for line in persistence:
        print_error(f"not persisted: {line}")
    if req.json:
        emit_json(doc)
        return
    if req.quiet:
        return
    for hint in [*notes.hints, *signing_hints()]:
        print_hint(hint)
    click.echo("\n".join(summary_lines(doc, notes, stdout_styler())))


# After the first SIGINT/SIGTERM, how long calls in flight may take to finish before the
# run is interrupted where it stands (docs/operations.md "`--jobs N`").
STOP_GRACE_S = 5.0


def _settle_llm(
    inv: _Invocation, *, drain: float = 0.0, expired: Callable[[], bool] | None = None
) -> None:
    """Journal the LLM attempts the run's call log holds and its journal lacks (stages
    interrupted or stopped before they stored their results), before the terminal event."""
    if inv.llm is None:
        return
    pending = inv.llm.settle(inv.manifest.llm.attempt_keys, drain=drain, expired=expired)
    journal_pending(inv.session.emit, pending)


class _Signals:
    """SIGINT/SIGTERM while stages run: stop scheduling, bounded by `STOP_GRACE_S`.

    The first signal asks the runner to start nothing new (no LLM request either) and
    arms a timer; the second signal, or the timer, raises `Interrupted` at once. Outside
    the stages (`immediate`) every signal raises `Interrupted` at once, as before. While
    an interrupted run settles its LLM calls (`settling`), a signal only ends the wait.
    """

    def __init__(self, stop: Callable[[], None], refuse: Callable[[], None]) -> None:
        self._stop = stop
        self._refuse = refuse
        self.requested = False
        self.immediate = False
        self.expired = False  # the grace is over: stop waiting for calls in flight
        self._settling = False
        self._deadline: float | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> _Signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._signal)
        self._previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, self._overdue)
        return self

    def _signal(self, signum: int, frame: Any) -> None:
        if self._settling:
            self.expired = True
            return
        if self.requested or self.immediate:
            self.expired = True
            raise Interrupted()
        self.requested = True
        self._refuse()
        self._stop()
        self._deadline = time.monotonic() + STOP_GRACE_S
        signal.setitimer(signal.ITIMER_REAL, STOP_GRACE_S)

    def _overdue(self, signum: int, frame: Any) -> None:
        self.expired = True
        if not self._settling:
            raise Interrupted()

    def settling(self) -> None:
        """The run is being terminalized as interrupted: signals only end the wait."""
        self._settling = True
        if not self.requested:  # interrupted without the first signal (e.g. KeyboardInterrupt)
            self._refuse()

    def grace_left(self) -> float:
        """What remains of the grace for calls in flight (0 once it is over)."""
        if self.expired or self._deadline is None:
            return 0.0
        return max(0.0, self._deadline - time.monotonic())

    def stages_done(self) -> None:
        """The runner returned: no timer, and a signal from now on interrupts at once."""
        signal.setitimer(signal.ITIMER_REAL, 0)
        self.immediate = True
        if self.requested:
            raise Interrupted()

    def restore(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, old in self._previous.items():
            signal.signal(sig, old)


def run_command_body(req: RunRequest, argv: list[str]) -> int:
    """Map every failure to one line and its exit code (traceback only with -v)."""
    try:
        return execute_run(req, argv)
    except CliError as exc:
        return _report_error(req, exc.message, exc.exit_code, exc.run_id, exc.json_printed)
    except JournalError as exc:
        return _report_error(req, f"journal: {exc}", ExitCode.FAILED)
    except Exception as exc:
        if req.verbose:
            traceback.print_exc()
        return _report_error(req, f"internal error: {type(exc).__name__}: {exc}", ExitCode.FAILED)


def _report_error(
    req: RunRequest,
    message: str,
    code: ExitCode,
    run_id: str | None = None,
    json_printed: bool = False,
) -> int:
    """One stderr line, and with --json one document on stdout
    (docs/operations.md "JSON documents"), then the code."""
    print_error(message)
    if req.json and not json_printed:
        emit_json(error_document(message, code, run_id))
    return int(code)
