"""The run use-case: the phases of one run (docs/internals.md "One run, phase by phase").

P1 (parse) is the caller's: it hands over a `RunSettings`, with nothing allocated. Here:
P2 allocate (run id, `RunAllocated`, the debug bundle) -> P3 resolve the pipeline -> P4
execute -> P5 terminalize (app/terminal.py). Every resource of the invocation (the
executor, the roots, the journal, the cache collaborators, the LLM runtime, the stage
writers and leases) is owned by one `contextlib.ExitStack`; the run ends in a typed
`RunResult`, or a typed error (app/errors.py) when it could not reach its stages.

What the run is wired with comes from the composition root (cli/compose.py `run_ports`);
what it shows while it goes (progress, signals) from the caller (`RunView`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from runjournal import __version__
from runjournal.adapters.cache_lock import CacheLockBusy
from runjournal.adapters.fsroot import FsError
from runjournal.adapters.journal.journal_errors import JournalError
from runjournal.adapters.module_stdout import module_stdout_to_stderr
from runjournal.adapters.pipeline_resolver import ResolutionError, resolve_pipeline
from runjournal.adapters.process_identity import current_process_start, host_name
from runjournal.adapters.profiles import ProfileError
from runjournal.app.errors import (
    NO_WAIT_MESSAGE,
    NotPersistedError,
    RunEnd,
    RunFailedError,
    RunInterruptedError,
    RunjournalError,
    UsageError,
)
from runjournal.app.heap import settled_heap
from runjournal.app.llm_call_log import journal_pending
from runjournal.app.manifest_check import CommittedFold, check_run_manifest
from runjournal.app.run_guidance import (
    before_execution,
    failure_detail,
    keep_traceback,
    main_outputs,
    module_traceback,
    point_latest,
)
from runjournal.app.run_llm import build_services, llm_report
from runjournal.app.terminal import OutputsRefused, Terminalizer
from runjournal.domain.events import (
    RunError,
    RunPhase,
    RunStatus,
    Setting,
)
from runjournal.domain.leases import LeaseRefused
from runjournal.domain.names import make_run_id
from runjournal.domain.pipeline import ResolvedPipeline
from runjournal.domain.pipeline_spec import PipelineSpec
from runjournal.domain.recompute import RecomputePolicy
from runjournal.domain.redaction import redact_argv, redact_obj, safe_error_text
from runjournal.domain.run import Run, run_aggregate_id
from runjournal.domain.runner import Interrupt, RunOutcome, RunStopped, StageFailure
from runjournal.projections.base import error_view


class Interrupted(Interrupt):
    """SIGINT/SIGTERM: stop scheduling, flush, terminalize as interrupted.

    An `Interrupt`, so the runner lets it through a module call (never a stage failure).
    """


@dataclass(frozen=True)
class RunSettings:
    """What P1 established without allocating anything: the run's settings object."""

    spec: PipelineSpec
    pipeline_path: str
    config: Any  # the effective settings (cli/settings `EffectiveConfig`)
    user_profiles: dict[str, Any]
    overrides: dict[str, str]
    policy: RecomputePolicy
    llm: Any  # the checked LLM options (`LLMPlan`)
    pipeline_arg: str = ""  # the pipeline as the user named it (in hints and remedies)
    recompute: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    modules: dict[str, Any] = field(default_factory=dict)  # loaded to check --set keys
    argv: tuple[str, ...] = ()  # the invocation, as `RunAllocated` records it (redacted)
    report: bool = False  # also write report.html into the run directory
    # the OTLP/HTTP traces URL the run streams its trace to while it goes (app/telemetry.py
    # `TraceStream`, docs/operations.md "Traces and lineage"); None: no trace is sent
    trace_to: str | None = None
    # `run --verify`: read and hash every input even with `input_check = "stat"`
    # (docs/configuration.md `input_check`)
    verify_inputs: bool = False

    @property
    def pipeline_dir(self) -> str:
        return os.path.dirname(self.pipeline_path)


@dataclass(frozen=True)
class RunPorts:
    """The collaborators a run is wired with: made by the composition root only
    (cli/compose.py `run_ports`), each a factory or a function of the run."""

    made: Any  # the `Factories`: executor, runner, profiles, checkpoint writes, ...
    roots: Callable[[Any], Any]  # config -> Roots (each root opened once)
    journal_for: Callable[..., Any]
    build_collaborators: Callable[..., Any]
    live_views: Callable[[Any], Any]
    output_objects: Callable[[Any], Any]
    stage_leases: Callable[..., Any]
    workspace_dir: Callable[[Any, str], str]
    allocate_debug_bundle: Callable[..., Any]
    checkpoint_writes: Callable[[Any, int], Any]  # (recorder, jobs) -> pool or None
    checkpoint_reader: Callable[[Any, str], Any]  # (cache root, pipeline) -> a loader (with)
    write_run_report: Callable[..., tuple[str | None, list[str]]]
    # output root -> the run's spool (adapters/spool.py), or None: everything held in memory
    spool: Callable[[Any], Any] | None = None


class QuietStop:
    """Signals as a library caller has them: none installed; a KeyboardInterrupt still
    ends the run as interrupted, recorded."""

    requested = False
    expired = False

    def stages_done(self) -> None:
        pass

    def settling(self) -> None:
        pass

    def grace_left(self) -> float:
        return 0.0

    def restore(self) -> None:
        pass


@dataclass
class RunView:
    """What the caller shows while the run goes: its progress display (fed the journal's
    events) and what it does with signals while the stages run (`interrupts(stop,
    refuse_new)`, installed around P4: cli/run_cmd.py's `Signals`)."""

    progress: Any
    interrupts: Callable[[Callable[[], None], Callable[[], None]], Any] = lambda stop, refuse: (
        QuietStop()
    )


@dataclass
class RunResult:
    """One run that reached its stages, whatever its outcome (docs/python-api.md)."""

    run_id: str
    status: str  # succeeded, failed, interrupted
    end: RunEnd
    document: dict[str, Any]  # the `run --json` document (docs/operations.md "JSON documents")
    error: RunError | None
    notes: Any  # the hints, warnings, sinks and traceback of the run (`RunNotes`)
    internal_error: str | None = None
    trace: Any = None  # what `trace_to` received (`TraceSent`), once the run ended
    trace_error: str | None = None  # why the trace was not sent in full

    @property
    def succeeded(self) -> bool:
        return self.status == RunStatus.SUCCEEDED.value

    @property
    def persistence_errors(self) -> list[str]:
        return list(self.document.get("persistence_errors") or [])


@dataclass
class _Invocation:
    """What P2 allocated: held for the rest of the run (closed by the run's ExitStack)."""

    run_id: str
    journal: Any
    collab: Any
    session: Any
    manifest: Any
    summary: Any
    bundle: Any
    terminal: Terminalizer
    roots: Any
    release_collab: Callable[[], None]
    llm: Any = None  # the run's RunLLM, from P3 on
    committed: CommittedFold | None = None  # the journal's fold, batch by batch
    # the input stat cache, with `input_check = "stat"`; otherwise the inputs' paths
    # (adapters/sources.py `SourceFiles`): the runner's `KnownChunks`
    input_stats: Any = None


def _now() -> datetime:
    return datetime.now(UTC)


def _new_run_id() -> str:
    return make_run_id(_now().strftime("%Y%m%dT%H%M%SZ"), secrets.token_hex(4))


def _once(close: Callable[[], Any]) -> Callable[[], None]:
    """`close`, run at most once: released early where the order matters, and by the
    run's ExitStack in any case."""
    done = False

    def run() -> None:
        nonlocal done
        if not done:
            done = True
            close()

    return run


def _closing(close: Callable[[], Any]) -> Callable[..., bool]:
    """An ExitStack exit callback: `close()`; its own error is suppressed while another
    error unwinds (the first error is the one reported)."""

    def exit_(exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc_type is None:
            close()
        else:
            with contextlib.suppress(Exception):
                close()
        return False

    return exit_


def run(settings: RunSettings, ports: RunPorts, view: RunView) -> RunResult:
    """One run: P2-P5. Raises a `RunjournalError` when the run could not reach its
    stages; a run that did (succeeded, failed, interrupted) is a `RunResult`."""
    run_id: str | None = None
    try:
        with contextlib.ExitStack() as stack:
            executor = _start_executor(ports, settings.config)
            stack.push(_closing(executor.close))  # closed last, after the roots
            stream = _trace_stream(settings)
            if stream is not None:
                stack.push(_closing(stream.stop))  # a run that ends early sends no more
            inv = _allocate(settings, ports, view, stack, stream)
            run_id = inv.run_id
            resolved = _resolve(settings, ports, view, inv, stack, executor)
            notes = before_execution(
                recorder=inv.session,
                store=inv.journal,
                spec=settings.spec,
                resolved=resolved,
                run_id=inv.run_id,
                cache_root=inv.roots.existing_cache,
                output_root=inv.roots.output,
                pipeline_arg=settings.pipeline_arg,
                resumed=settings.config.resume or settings.policy.active,
                reader=ports.checkpoint_reader,
            )
            result = _execute_and_terminalize(
                settings, ports, view, inv, resolved, notes, executor, stack
            )
            if stream is not None:
                _finish_trace(stream, result)
            return result
    except JournalError as exc:
        # Once the run is allocated (its RunAllocated is committed) the failure is this
        # run's, so `--json` names it and says failed (docs/operations.md "Exit codes").
        raise RunFailedError(f"journal: {exc}", run_id=run_id) from None


def _trace_stream(settings: RunSettings) -> Any:
    """The trace streamed while the run goes, when `trace_to` names a receiver."""
    if settings.trace_to is None:
        return None
    from runjournal.app.telemetry import TraceStream

    return TraceStream(settings.trace_to, interval=_stream_interval())


def _stream_interval() -> float:
    """Seconds between the trace's sends while the run goes: OpenTelemetry's own
    `OTEL_BSP_SCHEDULE_DELAY` (milliseconds; 5000 by default) when it is set and valid."""
    try:
        value = float(os.environ.get("OTEL_BSP_SCHEDULE_DELAY", "5000")) / 1000
    except ValueError:
        value = 5.0
    return value if 0 < value <= 3600 else 5.0


def _finish_trace(stream: Any, result: RunResult) -> None:
    """Send what the stream still holds, once the run has ended; a failure is noted on
    the result (the run's outcome stays what it is)."""
    try:
        result.trace = stream.close()
    except RunjournalError as exc:
        result.trace_error = exc.message


def _start_executor(ports: RunPorts, config: Any) -> Any:
    """The run's executor (`--executor`, `--jobs`), before anything is allocated: a
    missing extra or an unreachable scheduler is a usage error (exit 2)."""
    from runjournal.adapters.executors import ExecutorUnavailable

    try:
        return ports.made.executor(config.jobs, config.executor)
    except ExecutorUnavailable as exc:
        raise UsageError(f"executor: {exc}") from None


def _allocate(
    settings: RunSettings,
    ports: RunPorts,
    view: RunView,
    stack: contextlib.ExitStack,
    stream: Any = None,
) -> _Invocation:
    """P2: journal, collaborators, run id, RunAllocated, then the debug bundle if asked."""
    config, spec = settings.config, settings.spec
    view.progress.phase("opening the journal")
    roots = ports.roots(config)  # each root is opened once, here or on first use
    stack.push(_closing(roots.close))  # after the journal and every writer under a root
    try:
        journal = ports.journal_for(config, roots=roots)
    except JournalError as exc:
        raise RunFailedError(str(exc)) from None
    stack.push(_closing(journal.close))
    try:
        collab = ports.build_collaborators(
            config,
            pipeline=spec.name,
            resume=config.resume,
            recompute=settings.policy.active,
            roots=roots,
        )
    except FsError as exc:
        raise UsageError(f"cache root {config.cache_remote or config.cache_root}: {exc}") from None
    except CacheLockBusy as exc:  # a gc held the lock for longer than CACHE_LOCK_WAIT
        raise RunFailedError(
            f"cache root {config.cache_remote or config.cache_root}: {exc}"
        ) from None
    release_collab = _once(collab.close)
    stack.push(_closing(release_collab))
    try:
        roots.output()  # opened (and created) now: the run directory is made under this handle
    except FsError as exc:
        raise UsageError(f"output root {config.output_root}: {exc}") from None
    run_id = _new_run_id()
    views = ports.live_views(config)  # the projections the session feeds (cli/compose.py)
    manifest, report, spans, summary = views.manifest, views.report, views.spans, views.summary
    listeners: list[Any] = [manifest.apply, report.apply, spans, view.progress.event]
    if summary is not None:
        listeners.append(summary.apply)
    if stream is not None:  # the trace streamed while the run goes: a fold, no I/O here
        listeners.append(stream.listen)
    # The aggregate checks the runner's decisions, checkpoints and executions as they are
    # recorded (domain/run.py), not only `journal audit` afterwards.
    aggregate = Run(run_aggregate_id(run_id), _now)
    # Checkpoints are durable in groups: one sync before each batch that records them
    # commits (docs/internals.md "Group durability").
    recorder = collab.recorder
    # the journal's own fold of the manifest, batch by batch as it commits: the self-check
    # at the end then reads nothing back (app/manifest_check.py)
    committed = CommittedFold()
    summarize = config.reuse_summary and (config.resume or settings.policy.active)
    session = journal.session(
        aggregate,
        batch_size=config.batch_size,
        listeners=listeners,
        before_commit=recorder.sync if recorder is not None else None,
        behind=True,  # full batches commit on their own thread while the run goes on
        # a fully reused lane as one summary naming an earlier run of the pipeline
        # (docs/internals.md "Reuse summaries"); only a resume reuses anything
        reuse_sources=journal.reuse_sources(run_id, spec.name) if summarize else None,
        # and units equal to the last run's as block summaries ("Block summaries")
        block_sources=(
            journal.block_sources(run_id, spec.name) if summarize and config.block_summary else None
        ),
        committed=committed.committed,
    )
    _record_allocation(session, settings, ports, run_id, journal.url)
    terminal = Terminalizer(
        session=session,
        manifest=manifest,
        report=report,
        output_root=config.output_root,
        output_fs=roots.output,
        objects=ports.output_objects,
        run_id=run_id,
    )
    # The bundle: after a safe run id and RunAllocated, before resolution
    # (docs/internals.md "One run, phase by phase").
    command = {
        "argv": list(settings.argv),
        "run_id": run_id,
        "tool_version": __version__,
        "pipeline": spec.name,
        "pipeline_file": settings.pipeline_path,
        "overrides": settings.overrides,
        "resume": config.resume,
        "recompute": settings.recompute,
        "inputs": settings.inputs,
        "debug": config.debug.value,
    }
    bundle = _allocate_bundle(session, terminal, ports, config, spans, command, roots)
    session.flush()
    terminal.attach_bundle(bundle, summary)
    return _Invocation(
        run_id,
        journal,
        collab,
        session,
        manifest,
        summary,
        bundle,
        terminal,
        roots,
        release_collab,
        committed=committed,
    )


def _record_allocation(
    session: Any, settings: RunSettings, ports: RunPorts, run_id: str, journal_url: str
) -> None:
    """RunAllocated (with what `recover` and the report need) and the redacted effective
    configuration."""
    config, spec = settings.config, settings.spec
    session.allocated(
        run_id=run_id,
        pipeline=spec.name,
        pipeline_file=settings.pipeline_path,
        argv=redact_argv(list(settings.argv)),
        tool_version=__version__,
        run_dir=os.path.join(config.output_root, run_id),
        output_root=config.output_root,
        cache_root=config.cache_remote or config.cache_root,  # s3://: the bucket is the cache
        workspace=ports.workspace_dir(config, spec.name) if config.checkpoints else None,
        debug_bundle=os.path.join(config.debug_root, run_id) if config.debug_summary else None,
        host=host_name(),
        pid=os.getpid(),
        process_start=current_process_start(),
        debug_root=config.debug_root,
        journal=journal_url,
        recompute=list(settings.policy.selected),
        forced=list(settings.policy.forced),
    )
    session.configuration_resolved(
        [
            Setting(name=str(r["name"]), value=redact_obj(r["value"]), origin=str(r["origin"]))
            for r in config.as_rows()
        ],
    )


def _allocate_bundle(
    session: Any,
    terminal: Terminalizer,
    ports: RunPorts,
    config: Any,
    spans: Any,
    command: dict[str, Any],
    roots: Any,
) -> Any:
    """Allocate the requested debug bundle; a failure ends the run (NotPersistedError)."""
    if not config.debug_summary:
        return None
    # The bundle writer is imported only when `--debug` asks for a bundle.
    from runjournal.adapters.debug_bundle import COMMAND, BundleAllocationError, command_payload

    run_id = command["run_id"]
    try:
        bundle = ports.allocate_debug_bundle(
            roots.debug, config.debug_root, run_id, trace=config.debug_trace
        )
    except BundleAllocationError as exc:
        terminal.fail_before_execution(safe_error_text(str(exc)), RunPhase.ALLOCATION)
        session.flush()
        raise NotPersistedError(
            str(exc), document=_allocation_failure(terminal, str(exc))
        ) from None
    session.debug_bundle_allocated(bundle.path, trace=config.debug_trace)
    spans.attach(bundle.trace)
    bundle.summary.write(COMMAND, command_payload(**command))
    return bundle


def _allocation_failure(terminal: Terminalizer, message: str) -> dict[str, Any]:
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
    return doc


def _resolve(
    settings: RunSettings,
    ports: RunPorts,
    view: RunView,
    inv: _Invocation,
    stack: contextlib.ExitStack,
    executor: Any = None,
) -> ResolvedPipeline:
    """P3: modules, inputs, references, profiles; an error is journaled, then raised."""
    config, session, bundle = settings.config, inv.session, inv.bundle
    view.progress.phase(f"resolving pipeline '{settings.spec.name}'")
    # The LLM runtime of this invocation (docs/internals.md "The LLM runtime").
    cache_root = inv.collab.cache_root
    inv.llm = build_services(
        settings.llm,
        bundle.llm_text if bundle else None,
        made=ports.made,
        cache_dir=cache_root.path if cache_root is not None else None,
        run_id=inv.run_id,
        packed=inv.collab.packed,
        # batch mode (docs/operations.md "Batch runs"): the setting over the profiles',
        # the executor's parking for calls that wait for a batch, the batch events
        mode=None if config.llm_mode.value == "profile" else config.llm_mode.value,
        parking=getattr(executor, "allow_parking", None),
        journal=session,
        # a resume imports the LLM client only when a stage executes (a no-op resume
        # never does; docs/performance.md "Start-up")
        prefetch_client=not config.resume,
        # the attempts journaled so far: the call log lets go of their lines (issue 29)
        journaled=lambda: inv.manifest.llm.attempt_keys,
    )
    stack.callback(inv.llm.stop)  # wakes calls waiting on a backoff or a rate limit
    # The input stat cache (docs/configuration.md `input_check`): with `stat`, an input
    # whose stat facts are those recorded with its digest is not hashed again; `--verify`
    # reads and hashes every one and records them anew.
    input_stats = None
    if config.input_check.value == "stat" and cache_root is not None:
        # a trusted input is not even opened until an extract of it executes
        # (docs/internals.md "Inputs a resume does not read")
        input_stats = ports.made.input_stats(
            cache_root, trust=not settings.verify_inputs, defer_reads=True
        )
        stack.callback(input_stats.close)
        inv.input_stats = input_stats
        if not settings.verify_inputs:
            # and the checkpoints' facts kept in the packed index: a lane is decided
            # from them, reading only the payloads it uses (see
            # docs/internals.md "Decision facts in the index")
            trust = getattr(inv.collab.loader, "trust_index_facts", None)
            if trust is not None:
                trust()
    # otherwise the inputs are read and hashed here, and the run keeps only their names,
    # sizes and digests, reading each again when it needs its bytes (issue 29: peak RSS)
    source_files = ports.made.source_files() if input_stats is None else None
    if source_files is not None:
        inv.input_stats = source_files
    try:
        profiles = ports.made.load_profiles(
            config.profiles_file, user_profiles=settings.user_profiles
        )
        # Every key and URL credential the profiles give this process is hidden by value
        # from here on, wherever text is redacted (docs/internals.md "Known secrets").
        profiles.remember_secrets(os.environ)
        resolved, resolution = resolve_pipeline(
            settings.spec,
            pipeline_dir=settings.pipeline_dir,
            inputs_override=settings.inputs or None,
            cwd=os.getcwd(),
            overrides=settings.overrides,
            default_profile=config.profile,
            profiles=profiles,
            modules=settings.modules,
            runtimes=inv.llm.runtime_for,
            input_stats=input_stats,
            source_files=source_files,
        )
    except (Interrupted, KeyboardInterrupt):
        # Ctrl-C (or SIGTERM) while modules load: the run ends interrupted, recorded.
        inv.llm.stop()
        inv.terminal.fail_before_execution(
            "interrupted", RunPhase.RESOLUTION, RunStatus.INTERRUPTED
        )
        inv.terminal.finish_bundle()
        session.flush()
        raise RunInterruptedError("interrupted", run_id=inv.run_id) from None
    except (ResolutionError, ProfileError) as exc:
        inv.llm.stop()
        message = safe_error_text(f"{settings.pipeline_path}: {exc}")  # as stderr shows it
        if bundle is not None:
            from runjournal.adapters.debug_bundle import RESOLUTION, resolution_payload

            bundle.summary.write(RESOLUTION, resolution_payload(config.as_rows(), error=message))
        inv.terminal.fail_before_execution(message, RunPhase.RESOLUTION)
        not_persisted = inv.terminal.finish_bundle()
        session.flush()
        raise UsageError(message, run_id=inv.run_id, persistence_errors=not_persisted) from None
    if input_stats is not None:
        input_stats.flush()  # the digests recorded now, not when the run ends
    for step_id, profile in resolution.profiles.items():
        session.profile_observed(
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
    settings: RunSettings,
    ports: RunPorts,
    view: RunView,
    inv: _Invocation,
    resolved: ResolvedPipeline,
    notes: Any,
    executor: Any,
    stack: contextlib.ExitStack,
) -> RunResult:
    """P4 and P5: run the stages, then one guarded terminalization, then the result."""
    config, policy, terminal, progress = (
        settings.config,
        settings.policy,
        inv.terminal,
        view.progress,
    )
    made = ports.made
    recorder = inv.collab.recorder
    # The stage machinery, released in this order once the stages are done (each also by
    # the run's ExitStack, should anything below raise first).
    close_executor = _once(executor.close)
    # a bucket cache root: workers read and write checkpoints there themselves
    # (docs/internals.md "Object-storage cache"); a local one stays this process's
    share_cache = getattr(executor, "share_cache", None)
    if share_cache is not None and inv.collab.packed is not None:
        share_cache(inv.collab.packed, settings.spec.name)
    writes = ports.checkpoint_writes(recorder, config.jobs) if recorder is not None else None
    close_writes = _once(writes.close if writes is not None else lambda: None)
    stack.push(_closing(close_writes))
    leases = ports.stage_leases(inv.collab, inv.run_id, config.lease_wait.value == "wait")
    # after every checkpoint write: each releases its stage's lease
    close_leases = _once(leases.close if leases is not None else lambda: None)
    stack.push(_closing(close_leases))
    # artifacts no step consumes and the output files wait here for P5, not in memory
    # (docs/internals.md "Run outputs as links"); closed with the run's other resources
    spool = ports.spool(inv.roots.output()) if ports.spool is not None else None
    if spool is not None:
        stack.push(_closing(spool.close))
    runner = made.runner(
        journal=inv.session,
        loader=inv.collab.loader,
        recorder=inv.collab.recorder,
        plan_store=inv.collab.plan_store,
        trace=inv.bundle.trace if inv.bundle is not None else None,
        recompute=policy,
        progress=progress,
        executor=progress.track(executor),
        keep_going=config.keep_going,
        checkpoint_writes=writes,
        on_execute=inv.llm.client_needed,
        known_chunks=inv.input_stats,
        **({"parts": inv.collab.parts} if inv.collab.parts is not None else {}),
        **({"leases": leases} if leases is not None else {}),
        **({"spool": spool} if spool is not None else {}),
    )
    outcome: RunOutcome | None = None
    failures: list[dict[str, Any]] = []
    end = RunEnd.OK
    progress.expect(resolved)
    signals = view.interrupts(runner.stop, inv.llm.refuse_new)
    try:
        try:
            # plugin print() output, redacted, on stderr; the start-up heap left out of
            # the collector's passes while the stages run (app/heap.py)
            with module_stdout_to_stderr(), settled_heap():
                outcome = runner.run(resolved)
        except RunStopped:
            raise Interrupted() from None
        signals.stages_done()
        _finish_progress(inv.session, progress)
        _settle_llm(ports, inv)
        terminal.not_persisted(outcome.persistence_errors)
        try:
            # handed over: P5 lets each output go once its event is recorded (issue 29)
            outputs, outcome.outputs = outcome.outputs, []
            state = terminal.succeed(
                outputs,
                chunk_map=outcome.chunk_map,
                write_map=config.chunk_map,
                write_index=config.chunk_map_index,
                attribution=outcome.attribution,
            )
        except OutputsRefused as exc:
            state = terminal.fail(RunError(message=str(exc)), refused=exc.refused)
            end = RunEnd.FAILED
        except FsError as exc:
            state = terminal.fail(RunError(message=f"cannot write outputs: {exc}"))
            end = RunEnd.FAILED
    except StageFailure as exc:
        _finish_progress(inv.session, progress)
        error = RunError(
            message=exc.message,
            step=exc.step,
            lane=exc.lane,
            reason_code=exc.code,
            cause=exc.cause,
        )
        notes.traceback = keep_traceback(exc, inv.bundle.trace if inv.bundle else None)
        failures = [_failure_view(f) for f in exc.failures]
        _settle_llm(ports, inv)
        state = terminal.fail(
            error,
            detail=failure_detail(error, settings.pipeline_arg),
            failures=failures,
            partial=exc.partial,  # outputs of `partial = true` steps (--keep-going)
        )
        end = RunEnd.FAILED
    except LeaseRefused as exc:  # --lease-wait fail: one line naming the other run
        _finish_progress(inv.session, progress)
        state = terminal.fail(RunError(message=str(exc), step=exc.key.step, lane=exc.key.lane))
        end = RunEnd.LEASED
    except (Interrupt, KeyboardInterrupt) as exc:  # a refused LLM request too (CallsStopped)
        _finish_progress(inv.session, progress)
        # replies in flight within the grace are kept: their attempts are journaled
        # before the terminal event, the rest as in doubt (docs/operations.md "LLM call log")
        signals.settling()
        _settle_llm(ports, inv, drain=signals.grace_left(), expired=lambda: signals.expired)
        # `--no-wait` (docs/operations.md "Batch runs"): stopped once its batches were sent
        message = NO_WAIT_MESSAGE if getattr(exc, "batch_pending", False) else "interrupted"
        state = terminal.fail(RunError(message=message), status=RunStatus.INTERRUPTED)
        end = RunEnd.INTERRUPTED
    except JournalError:
        raise  # the journal itself failed: `run` names the run (exit 1)
    except BaseException as exc:  # whatever a module raised ends the run here
        # SystemExit, a BaseException subclass, an exception whose str() raises, an event
        # the aggregate refuses: the run is terminalized as failed, its decided events
        # flushed, and the exit code is 1 (docs/operations.md "Hardening guarantees").
        progress.finish()
        notes.traceback = _escaped_traceback(ports, exc)
        if terminal.state.status is RunStatus.RUNNING:
            with contextlib.suppress(Exception):
                _settle_llm(ports, inv)
            state = terminal.fail(RunError(message=_escaped_message(exc)))
        else:  # the terminal event is already recorded: what failed after it is reported
            state = terminal.state
            terminal.not_persisted([_escaped_message(exc)])
        end = RunEnd.FAILED
    finally:
        signals.restore()
        inv.llm.stop()  # wakes calls waiting on a backoff or a rate limit
        close_executor()
        close_writes()
        close_leases()
        inv.release_collab()
    return _finish(settings, ports, inv, state, notes, failures, end)


def _finish(
    settings: RunSettings,
    ports: RunPorts,
    inv: _Invocation,
    state: Any,
    notes: Any,
    failures: list[dict[str, Any]],
    end: RunEnd,
) -> RunResult:
    """P5's tail: the cassette, the bundle, the manifest self-check, `report.html`,
    `latest`, and the run's `--json` document."""
    terminal, config = inv.terminal, settings.config
    terminal.not_persisted(inv.llm.close())  # saves the --llm-record cassette
    recorder = inv.collab.recorder
    if recorder is not None:
        terminal.not_persisted(recorder.sync_errors)  # a failed group sync of checkpoints
    terminal.finish_bundle()
    report_html = None
    inv.session.flush()
    inv.llm.finish(settled=True)  # every attempt of its call log is journaled
    # its manifest against its journal, every event committed (app/manifest_check.py)
    internal = check_run_manifest(
        inv.journal,
        inv.run_id,
        inv.manifest,
        state.manifest is not None,
        inv.roots.output,
        inv.committed,
    )
    if settings.report:  # after every event is in the journal: the page is its projection
        report_html, failed = ports.write_run_report(
            inv.journal, inv.session, inv.run_id, state.run_dir, inv.roots.output()
        )
        terminal.not_persisted(failed)
    doc = terminal.report_view()  # the report's fold: counts, warnings, hints, roots
    if state.status is RunStatus.SUCCEEDED:
        notes.latest, problem = point_latest(inv.roots.output(), config.output_root, inv.run_id)
        if problem:
            doc["warnings"].append({"step": None, "lane": None, "message": problem})
    persistence = terminal.persistence_errors
    if end is RunEnd.OK and persistence:
        end = RunEnd.NOT_PERSISTED
    if internal is not None and end in (RunEnd.OK, RunEnd.NOT_PERSISTED):
        end = RunEnd.INTERNAL
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
        partial=state.partial,
        persistence_errors=persistence,
        internal_error=internal,
        main_outputs=main_outputs(state.outputs, notes.sinks),
        latest=notes.latest,
        llm=llm_report(inv.manifest.llm.view(), settings.llm),
    )
    return RunResult(
        run_id=inv.run_id,
        status=state.status.value,
        end=end,
        document=doc,
        error=state.error,
        notes=notes,
        internal_error=internal,
    )


def _finish_progress(session: Any, progress: Any) -> None:
    """The stages are done: what the session holds back for block summaries is recorded
    (and shown) first, then the progress line is cleared (docs/internals.md "Block
    summaries"). A journal that fails here fails again, and is reported, at the terminal
    event."""
    with contextlib.suppress(Exception):
        session.settle()
    progress.finish()


def _settle_llm(
    ports: RunPorts,
    inv: _Invocation,
    *,
    drain: float = 0.0,
    expired: Callable[[], bool] | None = None,
) -> None:
    """Journal the LLM attempts the run's call log holds and its journal lacks (stages
    interrupted or stopped before they stored their results), before the terminal event."""
    if inv.llm is None:
        return
    pending = inv.llm.settle(inv.manifest.llm.attempt_keys, drain=drain, expired=expired)
    journal_pending(inv.session, pending)


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


def _escaped_traceback(ports: RunPorts, exc: BaseException) -> str | None:
    """For `-v`: the traceback of what escaped, redacted; None if even that cannot be made."""
    try:
        return module_traceback(exc)
    except BaseException:  # a hostile __repr__ or __str__ in the frames
        return None


__all__ = [
    "Interrupted",
    "QuietStop",
    "RunPorts",
    "RunResult",
    "RunSettings",
    "RunView",
    "run",
]
