"""`runjournal run`: parse, call the run use-case (app/run_pipeline.py), render, map errors to exit
codes (docs/internals.md "One run, phase by phase").

P1 (parse: the pipeline file, settings, overrides, recompute names, LLM options) is here
and allocates nothing; P2-P5 are `app.run.run`. This module constructs no collaborator,
records no event and closes nothing: the composition root (cli/compose.py) wires the run,
the use-case owns its resources, and every failure reaches one boundary
(`run_command_body`) that prints one line and returns its code from the one error table
(cli/exit_codes.py `EXIT_CODES`). Progress and signals are this module's renderers.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click
from runjournal.adapters.journal.journal_errors import JournalError
from runjournal.app.check_pipeline import PipelineCheckError, check_pipeline, raise_problems
from runjournal.app.errors import RunjournalError
from runjournal.app.run_guidance import RunNotes
from runjournal.app.run_pipeline import Interrupted, RunResult, RunSettings, RunView
from runjournal.app.run_pipeline import run as run_use_case
from runjournal.cli.compose import factories, run_ports
from runjournal.cli.exit_codes import (
    RUN_END_CODES,
    CliError,
    ExitCode,
    error_document,
    exit_code_of,
    print_error,
    print_warning,
)
from runjournal.cli.keys_cmds import signing_hints
from runjournal.cli.llm_wiring import LLMRequest, cassette_content, plan_llm
from runjournal.cli.output import emit_json, emit_json_streamed
from runjournal.cli.overrides import check_overrides
from runjournal.cli.pipeline_input import load_pipeline_spec, resolve_config_and_profiles
from runjournal.cli.run_summary import (
    failure_line,
    print_hint,
    print_traceback,
    summary_lines,
)
from runjournal.cli.style import stdout_styler
from runjournal.domain.recompute import UnknownStepError, plan_recompute
from runjournal.domain.redaction import redact_url

__all__ = ["Interrupted", "RunRequest", "Signals", "parse_run", "run_command_body"]


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
    otel_endpoint: str | None = None  # --otel-endpoint: the trace sent when the run ends
    otel_content: bool = False  # --otel-content: with the cassette's prompts and replies
    verify_inputs: bool = False  # --verify: read and hash every input (no stat fast path)


def parse_overrides(pairs: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--set takes NAME=VALUE pairs; got '{pair}'")
        out[key.strip()] = value
    return out


def parse_run(
    pipeline: str,
    *,
    flags: dict[str, Any],
    inputs: tuple[str, ...] = (),
    overrides: tuple[str, ...] = (),
    recompute: tuple[str, ...] = (),
    llm: LLMRequest | None = None,
    argv: tuple[str, ...] = (),
    report: bool = False,
    with_llm: bool = True,
    source: tuple[Any, str] | None = None,
    modules: dict[str, Any] | None = None,
) -> RunSettings:
    """P1: the pipeline file, settings, overrides, recompute names; nothing is allocated.
    Shared by `run` and the Python API (api.py), so both run with the same settings."""
    # `source`: a pipeline built in code (api.py `Pipeline`): its spec and where it lives
    spec, pipeline_path = source if source is not None else load_pipeline_spec(pipeline)
    config, user_profiles = resolve_config_and_profiles(spec, pipeline_path, flags)
    parsed_overrides = parse_overrides(overrides)
    try:
        policy = plan_recompute(spec.step_ids, {s.id: s.consumes for s in spec.steps}, recompute)
    except UnknownStepError as exc:
        raise CliError(str(exc)) from None
    loaded = check_overrides(spec, os.path.dirname(pipeline_path), parsed_overrides)
    modules = {**(modules or {}), **loaded}  # built in code, then loaded for --set
    # What `runjournal check` finds, found here too: before anything is allocated
    # (docs/operations.md "`check`"). The modules it loads are handed on to resolution.
    checked = check_pipeline(
        spec,
        pipeline_dir=os.path.dirname(pipeline_path),
        default_profile=config.profile,
        load_profiles=lambda: factories().load_profiles(
            config.profiles_file, user_profiles=user_profiles
        ),
        modules=modules,
        where=pipeline_path,
    )
    raise_problems(checked)
    modules = {**checked.modules, **modules}
    return RunSettings(
        spec=spec,
        pipeline_path=pipeline_path,
        config=config,
        user_profiles=user_profiles,
        overrides=parsed_overrides,
        policy=policy,
        llm=plan_llm(llm) if with_llm else None,
        pipeline_arg=pipeline,
        recompute=recompute,
        inputs=inputs,
        modules=modules,
        argv=argv,
        report=report,
    )


def _otel_from_environment() -> bool:
    """An OTLP endpoint set in the environment, and OpenTelemetry's own switches not off
    (`OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER=none`): the run sends its trace when it
    ends (docs/operations.md "Traces and lineage")."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    names = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
    return any(env.get(name, "").strip() for name in names)


def execute_run(req: RunRequest, argv: list[str]) -> int:
    """Parse, run, render: the exit code of a run that reached its stages."""
    if req.otel_endpoint is not None:
        from runjournal.app.telemetry import check_http_url

        check_http_url(req.otel_endpoint, "--otel-endpoint")
    cassette = req.llm and (req.llm.record or req.llm.replay)
    if req.otel_content and not cassette:
        raise CliError(
            "--otel-content takes the prompts and replies from the run's cassette: "
            "add --llm-record FILE (or --llm-replay FILE)"
        )
    settings = parse_run(
        req.pipeline,
        flags=req.flags,
        inputs=req.inputs,
        overrides=req.overrides,
        recompute=req.recompute,
        llm=req.llm,
        argv=tuple(argv),
        report=req.report,
    )
    config = settings.config
    progress = factories().progress(enabled=config.progress and not req.quiet and not req.json)
    view = RunView(
        progress=progress, interrupts=lambda stop, refuse: Signals(stop, refuse).install()
    )
    if req.verify_inputs:
        settings = dataclasses.replace(settings, verify_inputs=True)
    tracing = req.otel_endpoint is not None or _otel_from_environment()
    if tracing:
        settings = dataclasses.replace(
            settings, trace_to=_streamed_to(req.otel_endpoint, req.otel_content)
        )
    result = run_use_case(settings, run_ports(), view)
    _print_result(req, result)
    quiet = req.quiet or req.json
    if result.trace_error is not None:
        print_warning(
            f"trace of run {result.run_id} not sent in full: {redact_url(result.trace_error)}"
        )
    elif result.trace is not None and not quiet:
        sent = result.trace
        click.echo(
            f"sent the trace of run {result.run_id}: {sent.spans} span(s) to {sent.endpoint}",
            err=True,
        )
    elif tracing and settings.trace_to is None:  # sent once the run has ended, if it can be
        _send_trace(
            config,
            result.run_id,
            req.otel_endpoint,
            quiet=quiet,
            content=cassette if req.otel_content else None,
        )
    return int(RUN_END_CODES[result.end])


def _streamed_to(endpoint: str | None, content: bool) -> str | None:
    """The traces URL the run streams to while it goes; None when there is none, when
    the prompts must come from the cassette the run records (`--otel-content`: sent once
    the run has ended), or when the URL is unusable (the run says so once it has ended)."""
    from runjournal.app.errors import UsageError
    from runjournal.app.telemetry import check_http_url, trace_url

    url = trace_url(endpoint)
    if url is None or content:
        return None
    try:
        check_http_url(url, "OTLP endpoint")
    except UsageError:
        return None
    return url


def _send_trace(
    config: Any, run_id: str, endpoint: str | None, *, quiet: bool, content: str | None = None
) -> None:
    """`run --otel-endpoint` (or an OTLP endpoint in the environment): send the run's
    trace once it has ended (app/telemetry.py). A failure is a warning: the run's outcome
    and exit code stay what they are."""
    from runjournal.app.telemetry import send_trace, trace_url
    from runjournal.cli.compose import maintenance_ports

    url = trace_url(endpoint)
    if url is None:
        return
    try:
        content_of = cassette_content(content, "--otel-content") if content is not None else None
        sent = send_trace(
            config,
            maintenance_ports(),
            run=run_id,
            url=url,
            content=content_of,
            url_name="OTLP endpoint",
        )
    except RunjournalError as exc:
        print_warning(f"trace of run {run_id} not sent: {redact_url(exc.message)}")
        return
    if not quiet:
        click.echo(
            f"sent the trace of run {run_id}: {sent.spans} span(s) to {sent.endpoint}", err=True
        )


def _print_result(req: RunRequest, result: RunResult) -> None:
    notes: RunNotes = result.notes or RunNotes()
    doc, error = result.document, result.error
    if error is not None:
        if req.verbose and notes.traceback:
            print_traceback(notes.traceback)
        print_error(failure_line(doc, error, req.pipeline))
    for line in result.persistence_errors:
        print_error(f"not persisted: {line}")
    if req.json and isinstance(doc.get("outputs"), list):
        # its outputs one at a time: no whole text of a run of many (issue 29: peak RSS)
        rest = {k: v for k, v in doc.items() if k != "outputs"}
        emit_json_streamed(rest, "outputs", doc["outputs"])
    elif req.json:
        emit_json(doc)
    elif not req.quiet:
        for hint in [*notes.hints, *signing_hints()]:
            print_hint(hint)
        click.echo("\n".join(summary_lines(doc, notes, stdout_styler())))
    if result.internal_error is not None:
        print_error(result.internal_error)


# After the first SIGINT/SIGTERM, how long calls in flight may take to finish before the
# run is interrupted where it stands (docs/operations.md "`--jobs N`").
STOP_GRACE_S = 5.0


class Signals:
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

    def install(self) -> Signals:
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
    """The one boundary: every failure is one line and its exit code (traceback with -v)."""
    try:
        return execute_run(req, argv)
    except RunjournalError as exc:
        return _report_error(req, exc, exit_code_of(exc))
    except JournalError as exc:
        return _report_error(req, RunjournalError(f"journal: {exc}"), ExitCode.FAILED)
    except Exception as exc:
        if req.verbose:
            traceback.print_exc()
        message = f"internal error: {type(exc).__name__}: {exc}"
        return _report_error(req, RunjournalError(message), ExitCode.FAILED)


def _report_error(req: RunRequest, exc: RunjournalError, code: ExitCode) -> int:
    """One stderr line (then what was not persisted), and with --json one document on
    stdout (docs/operations.md "JSON documents"), then the code."""
    for line in exc.problems if isinstance(exc, PipelineCheckError) else [exc.message]:
        print_error(line)
    if exc.document is None:  # the run's own document already says what was not persisted
        for line in exc.persistence_errors:
            print_error(f"not persisted: {line}")
    if req.json and not getattr(exc, "json_printed", False):
        doc = exc.document
        if doc is None:
            doc = error_document(exc.message, code, exc.run_id)
            if exc.persistence_errors:
                doc["persistence_errors"] = exc.persistence_errors
        emit_json(doc)
    return int(code)
