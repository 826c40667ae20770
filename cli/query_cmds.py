"""Read-only commands over the journal: runs, journal show, explain, reasons, config show."""

from __future__ import annotations

import os
import sys
from typing import Any

import click
from runjournal.adapters.journal import (
    JournalError,
    JournalStore,
    journal_event_to_json,
)
from runjournal.app.journals import journal_exists
from runjournal.app.queries import resolve_run, run_rows, stream_events
from runjournal.cli.compose import journal_for, run_dirs
from runjournal.cli.exit_codes import CliError, ExitCode, print_warning
from runjournal.cli.output import emit_json, emit_json_streamed, jsonl_line
from runjournal.cli.pipeline_input import load_pipeline_spec, resolve_config
from runjournal.cli.settings import (
    EffectiveConfig,
    SettingsError,
    format_table,
    load_user_config,
    resolve_project_settings,
)
from runjournal.cli.settings.click_options import settings_flags
from runjournal.cli.style import stdout_styler
from runjournal.domain.events import RunAllocated, RunEvent
from runjournal.domain.reasons import CATEGORY_OF, DESCRIPTIONS, ReasonCode
from runjournal.domain.redaction import safe_error_text
from runjournal.projections.base import fold, fold_together
from runjournal.projections.llm_batches import LLMBatchesFold
from runjournal.projections.llm_usage import usage_line
from runjournal.projections.manifest import ManifestProjection
from runjournal.projections.reasons_report import ReasonReportProjection


def resolve_cli_settings(opts: dict[str, Any]) -> EffectiveConfig:
    """Settings for commands without a pipeline: flags, env, the project's pipeline table
    (docs/configuration.md "Finding the project"), user config, defaults."""
    flags = {k: v for k, v in settings_flags(opts).items() if v is not None}
    try:
        user_config, user_path = load_user_config()
        return resolve_project_settings(
            flags=flags,
            env=os.environ,
            user_config=user_config,
            user_config_path=user_path,
            cwd=os.getcwd(),
            home=os.path.expanduser("~"),
            warn=print_warning,
        )
    except SettingsError as exc:
        raise CliError(str(exc)) from None


def open_cli_journal(opts: dict[str, Any], *, read_only: bool = False) -> JournalStore:
    """The journal named by --journal, env, the project's pipeline, user config, or
    <output root>/journal.sqlite3.

    Commands that only read pass `read_only`: a SQLite journal is then opened without
    writing to it (a read-only file system or file works).
    """
    config = resolve_cli_settings(opts)
    if journal_exists(config.journal):
        try:
            return journal_for(config, read_only=read_only)
        except JournalError as exc:
            raise CliError(str(exc), ExitCode.FAILED) from None
    raise CliError(
        f"no journal at {config.journal} (use --journal or --output-root, "
        "or run the command in the pipeline's directory)"
    )


# The read-only use-cases (app/queries.py): run ids, the event stream, the runs, explain.
_resolve = resolve_run


def runs_list(opts: dict[str, Any]) -> int:
    store = open_cli_journal(opts, read_only=True)
    try:
        rows = run_rows(store)
    finally:
        store.close()
    if opts.get("as_json"):
        emit_json({"runs": rows})
        return 0
    if not rows:
        click.echo("no runs")
        return 0
    paint = stdout_styler()
    for row in rows:
        status = paint.status(f"{row['status']:<11}", row["status"])
        click.echo(f"{row['run_id']}  {status} {row['pipeline']:<20} {row['started']}")
    return 0


def runs_show(opts: dict[str, Any], *, run: str, outputs: bool = False) -> int:
    """The run's manifest view; its outputs with provenance (`--outputs`: only those)."""
    from runjournal.cli.run_reports import output_lines
    from runjournal.projections.run_facts import RunFactsProjection, provenance

    store = open_cli_journal(opts, read_only=True)
    run_facts, manifest, allocated = RunFactsProjection(), ManifestProjection(), _Allocated()
    counted = _Counted()
    try:
        run_id = _resolve(store, run)
        # One pass, folding every view it prints: the run is never held.
        fold_together(stream_events(store, run_id), run_facts, manifest, allocated, counted)
    finally:
        store.close()
    if not counted.events:  # listed, but its rows are gone: no view to show of nothing
        raise CliError(
            f"run {run_id} is listed but the journal holds none of its events "
            "(its rows were removed; `journal audit` checks the rest)",
            ExitCode.FAILED,
        )
    facts = provenance(run_facts.view())
    paint = stdout_styler()
    if outputs:
        if opts.get("as_json"):
            emit_json(facts)
            return 0
        click.echo(f"run {run_id}: {len(facts['outputs'])} outputs")
        lines = output_lines(facts["outputs"], paint, limit=None)
        if lines:
            click.echo("\n".join(lines))
        return 0
    view = manifest.view()
    if opts.get("as_json"):
        emit_json(view)
        return 0
    status = paint.status(str(view["status"]), str(view["status"]))
    click.echo(f"run {view['run_id']}  {status}  pipeline {view['pipeline']}")
    click.echo(f"  started {view['started']}  ended {view['ended']}")
    click.echo(f"  run directory {_where_it_lives(allocated.event)}")
    click.echo(
        f"  lanes {view['lanes']}  artifacts {view['artifacts']}  outputs {len(view['outputs'])}"
    )
    decisions = ", ".join(f"{paint.code(k, k)} {v}" for k, v in view["decisions"].items()) or "none"
    click.echo(f"  decisions: {decisions}")
    if view.get("not_started"):  # docs/operations.md "`explain`": decided, never executed
        never = ", ".join(f"{paint.code(k, k)} {v}" for k, v in view["not_started"].items())
        click.echo(f"  not started: {never} (decided, never executed: the run stopped first)")
    if view.get("llm"):  # docs/operations.md "LLM usage: spent and saved"
        click.echo(f"  llm: {usage_line(view['llm'])}")
    if view["error"]:
        err = view["error"]
        where = f"step '{err['step']}' lane '{err['lane']}' " if err["step"] else ""
        cause = f"({err['cause']}) " if err.get("cause") else ""
        click.echo(f"  error: {where}{cause}{err['message']}")
    if facts["outputs"]:
        click.echo("  outputs (produced by: step · lane: its decisions):")
        click.echo("\n".join(output_lines(facts["outputs"], paint)))
    return 0


class _Counted:
    """How many events the fold saw."""

    def __init__(self) -> None:
        self.events = 0

    def apply(self, event: RunEvent) -> None:
        self.events += 1


class _Allocated:
    """The run's first `RunAllocated`, caught while the views fold."""

    def __init__(self) -> None:
        self.event: RunAllocated | None = None

    def apply(self, event: RunEvent) -> None:
        if self.event is None and isinstance(event, RunAllocated):
            self.event = event


def _where_it_lives(allocated: RunAllocated | None) -> str:
    """The run directory the journal recorded, and whether it is there now
    (docs/operations.md "Where a run lives")."""
    if allocated is None:
        return "- (not allocated)"
    with run_dirs() as dirs:
        there = dirs.holding(allocated.run_id, allocated.run_dir) is not None
    return allocated.run_dir + ("" if there else " (not there: never written, or removed)")


def runs_diff(opts: dict[str, Any], *, run_a: str, run_b: str) -> int:
    """What changed between two runs: settings, inputs, identity, decisions, outputs."""
    from runjournal.cli.run_reports import diff_lines
    from runjournal.projections.run_facts import RunFactsProjection, diff_runs

    store = open_cli_journal(opts, read_only=True)
    try:
        id_a, id_b = _resolve(store, run_a), _resolve(store, run_b)
        view_a = fold(RunFactsProjection(), stream_events(store, id_a)).view()
        view_b = fold(RunFactsProjection(), stream_events(store, id_b)).view()
    finally:
        store.close()
    diff = diff_runs(view_a, view_b)
    if opts.get("as_json"):
        emit_json(diff)
        return 0
    click.echo("\n".join(diff_lines(diff, stdout_styler())))
    return 0


def journal_show(opts: dict[str, Any], *, run: str, jsonl: bool = False) -> int:
    """RUN's events: text lines or `--jsonl` streamed as they are read; `--json` too.

    The text and `--jsonl` forms print each event as it is decoded and hold one page of
    rows at a time (docs/operations.md "Reading a journal"). `--json` is one document:
    the run is read twice, once to know every row decodes (a row that does not is one
    error line and nothing else on stdout, as before), then printed event by event.
    """
    if jsonl and opts.get("as_json"):
        raise CliError("--json and --jsonl cannot be combined: choose one")
    store = open_cli_journal(opts, read_only=True)
    try:
        run_id = _resolve(store, run)
        if opts.get("as_json"):
            try:
                for _ in store.events(run_id):
                    pass
            except JournalError as exc:
                raise CliError(f"cannot read run {run_id}: {exc}", ExitCode.FAILED) from None
            events = (journal_event_to_json(e) for e in store.events(run_id))
            emit_json_streamed({"run_id": run_id}, "events", events)
            return 0
        return _stream_events(store, run_id, jsonl)
    finally:
        store.close()


def _stream_events(store: JournalStore, run_id: str, jsonl: bool) -> int:
    """Print events as they decode; a row that does not decode ends the stream, exit 1."""
    out = sys.stdout
    try:
        for event in store.events(run_id):
            e = journal_event_to_json(event)
            if jsonl:
                out.write(jsonl_line({"run_id": run_id, **e}))
                continue
            brief = ", ".join(
                f"{k}={v}"
                for k, v in e["data"].items()
                if isinstance(v, str | int | float) and k != "detail"
            )
            out.write(f"{e['version']:>6}  {e['timestamp']}  {e['type']:<22} {brief[:140]}\n")
    except JournalError as exc:
        out.flush()
        message = f"cannot read run {run_id}: {exc}"
        if jsonl:  # the stream says it is incomplete, in its own format
            out.write(jsonl_line({"run_id": run_id, "error": safe_error_text(message, 1000)}))
            out.flush()
        raise CliError(message, ExitCode.FAILED) from None
    out.flush()
    return 0


def explain(opts: dict[str, Any], *, run: str, step: str | None, **drill: Any) -> int:
    """The summary by step and reason, then the selected decisions (cli/explain.py)."""
    from runjournal.cli import explain as explaining

    selection = explaining.Selection(step=step, **drill)
    store = open_cli_journal(opts, read_only=True)
    try:
        run_id = _resolve(store, run)
        reasons, batches = ReasonReportProjection(step), LLMBatchesFold()
        fold_together(stream_events(store, run_id), reasons, batches)
    finally:
        store.close()
    if step is not None and not reasons.step_names():
        raise CliError(f"run {run_id} has no decisions for step '{step}'")
    if opts.get("as_json") and not selection.any and not batches.batches:
        # The whole view, streamed a lane at a time: the decisions are held compact,
        # never all as dicts (docs/performance.md "Reading commands on a large run").
        streamed = reasons.streamed_view()
        emit_json_streamed(streamed.doc, "steps", streamed.items)
        return 0
    view = batches.annotate(reasons.view())  # a batch run: which stage, which batch
    explaining.check_selection(selection, view, run_id)
    if opts.get("as_json"):
        emit_json(explaining.json_document(view, selection))
        return 0
    click.echo("\n".join(explaining.text_lines(run_id, view, selection, stdout_styler())))
    return 0


def reasons(opts: dict[str, Any]) -> int:
    rows = [
        {"code": code.value, "category": CATEGORY_OF[code].value, "description": DESCRIPTIONS[code]}
        for code in ReasonCode
    ]
    if opts.get("as_json"):
        emit_json({"reasons": rows})
        return 0
    paint = stdout_styler()
    for row in rows:
        code = paint.category(f"{row['code']:<31}", row["category"])
        category = paint.category(f"{row['category']:<20}", row["category"])
        click.echo(f"{code} {category} {row['description']}")
    return 0


def config_show(opts: dict[str, Any], *, pipeline: str) -> int:
    spec, path = load_pipeline_spec(pipeline)
    flags = settings_flags(opts)
    config = resolve_config(spec, path, flags)
    if opts.get("as_json"):
        emit_json({"pipeline": path, "settings": config.as_rows()})
        return 0
    click.echo(format_table(config))
    return 0
