"""The `runjournal` command group: thin commands that parse, call and format."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import Any, NoReturn

import click
from runjournal import __version__
from runjournal.app.errors import RunjournalError
from runjournal.cli.age import AGE_UNITS
from runjournal.cli.completion import (
    complete_reason_codes,
    complete_run_lanes,
    complete_run_steps,
    complete_runs,
    complete_steps,
)
from runjournal.cli.exit_codes import ExitCode, error_document, exit_code_of, print_error
from runjournal.cli.output import emit_json
from runjournal.cli.settings.click_options import ShownPath, setting_options, settings_flags

F = Callable[..., Any]

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Group(click.Group):
    """A command group that, given no command, prints its help as is and exits 2.

    Click's convention for a group without a command (help on stderr, usage exit code);
    done here so the help is printed whole instead of as one error line, whatever the
    click version (docs/operations.md "Exit codes").
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args and not ctx.resilient_parsing:
            click.echo(ctx.get_help(), err=True, color=ctx.color)
            ctx.exit(int(ExitCode.USAGE))
        return super().parse_args(ctx, args)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")(fn)


# Commands that read a journal but run no pipeline: where the journal is.
journal_options = setting_options("output_root", "journal")


def verbose_option(fn: F) -> F:
    return click.option("-v", "--verbose", is_flag=True, help="Tracebacks on errors.")(fn)


def run_argument(fn: F) -> F:
    return click.argument("run", shell_complete=complete_runs)(fn)


def pipeline_and_decision_options(fn: F) -> F:
    """PIPELINE and the options of `run` that change its decisions, shared with `plan`."""
    for option in reversed(
        (
            click.argument("pipeline", type=ShownPath(dir_okay=False)),
            click.option(
                "--input",
                "inputs",
                multiple=True,
                metavar="GLOB",
                type=ShownPath(dir_okay=False),
                help="Input file or glob, relative to the current directory (replaces `inputs`).",
            ),
            click.option(
                "--recompute",
                multiple=True,
                metavar="STEP",
                shell_complete=complete_steps,
                help="Force STEP and its consumers; restore the rest (repeatable).",
            ),
            click.option(
                "--set",
                "overrides",
                multiple=True,
                metavar="KEY=VALUE",
                help="Runtime override passed to every module as ctx.overrides (repeatable).",
            ),
        )
    ):
        fn = option(fn)
    return fn


@click.group(cls=Group, context_settings=CONTEXT)
@click.version_option(__version__, prog_name="runjournal")
def cli() -> None:
    """Run document pipelines so every run can be resumed, recomputed, explained, audited.

    \b
    Examples (a quick start):
      runjournal init demo
      cd demo
      runjournal run pipeline.toml
      runjournal run pipeline.toml --resume
      runjournal explain latest
      runjournal runs diff previous latest

    Commands without a pipeline file (explain, runs, journal, report, ...) find the
    project of the current directory (or a parent): run them from the pipeline's directory.

    Settings (flags, RUNJOURNAL_* variables, the pipeline's [runjournal] table, the user
    config file) are described in docs/configuration.md; `runjournal config show
    PIPELINE` prints the effective values. Shell completion: docs/operations.md.
    """


@cli.command("run")
@pipeline_and_decision_options
@click.option(
    "--report",
    "html_report",
    is_flag=True,
    help="Also write report.html, the run's HTML report, into the run directory.",
)
@setting_options()
@click.option(
    "--llm-record", default=None, metavar="FILE", help="Record every LLM exchange to FILE."
)
@click.option(
    "--llm-replay", default=None, metavar="FILE", help="Answer LLM calls from FILE (no network)."
)
@click.option(
    "--max-cost", default=None, metavar="AMOUNT", help="Make no new LLM call once AMOUNT is spent."
)
@click.option(
    "--max-tokens", default=None, metavar="N", help="Make no new LLM call once N tokens are spent."
)
@click.option(
    "--no-wait",
    is_flag=True,
    help="Batch mode: submit the LLM batches and stop; a later --resume collects them.",
)
@click.option(
    "--verify",
    "verify_inputs",
    is_flag=True,
    help="Read and hash every input, whatever input_check says (the stat cache is refreshed).",
)
@click.option(
    "--otel-endpoint",
    default=None,
    metavar="URL",
    help="When the run ends, send its trace there (OTLP/HTTP, as `journal otel`).",
)
@click.option(
    "--otel-content",
    is_flag=True,
    help="With the trace, the prompts and replies of the --llm-record/--llm-replay cassette.",
)
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
@verbose_option
@json_option
def run_cmd(pipeline: str, inputs: tuple[str, ...], **opts: Any) -> None:
    """Run PIPELINE (a pipeline TOML file, docs/pipeline.md).

    \b
    Examples:
      runjournal run examples/glossary/pipeline.toml
      runjournal run pipeline.toml --resume --json
      runjournal run pipeline.toml --recompute glossary
      runjournal run pipeline.toml --input 'notes/*.md' --jobs 4
      runjournal run pipeline.toml --executor processes --jobs 2
      runjournal run pipeline.toml --set audience=ops --debug summary
      runjournal run pipeline.toml --llm-replay cassette.json --max-cost 0.50
    """
    # Imported here: the run machinery is the heaviest import, and other commands (and
    # --help, --version, completion) never need it (docs/performance.md "Start-up").
    from runjournal.cli.llm_wiring import LLMRequest
    from runjournal.cli.run_cmd import RunRequest, run_command_body

    req = RunRequest(
        pipeline=pipeline,
        inputs=inputs,
        flags=settings_flags(opts),
        resume=opts["resume"],
        recompute=opts["recompute"],
        overrides=opts["overrides"],
        json=opts["as_json"],
        quiet=opts["quiet"],
        verbose=opts["verbose"],
        report=opts["html_report"],
        otel_endpoint=opts["otel_endpoint"],
        otel_content=opts["otel_content"],
        verify_inputs=opts["verify_inputs"],
        llm=LLMRequest(
            record=opts["llm_record"],
            replay=opts["llm_replay"],
            max_cost=opts["max_cost"],
            max_tokens=opts["max_tokens"],
            no_wait=opts["no_wait"],
        ),
    )
    sys.exit(run_command_body(req, sys.argv[1:]))


# The settings of `run` that change what a run decides, or where it reads (the roots).
PLAN_SETTINGS = (
    "output_root",
    "cache_root",
    "debug_root",
    "journal",
    "cache_mode",
    "checkpoints",
    "profile",
    "profiles_file",
    "resume",
    "llm_mode",  # a batch run's requests cost less: the forecast follows
)


@cli.command("plan")
@pipeline_and_decision_options
@setting_options(*PLAN_SETTINGS)
@verbose_option
@json_option
def plan(pipeline: str, inputs: tuple[str, ...], **opts: Any) -> None:
    """Predict every stage decision a run of PIPELINE would take, with its reason code.

    Takes the options of `run` that change decisions. Executes no module, calls no LLM,
    writes no file and no journal event; exit 0 whatever the prediction, 2 for a
    configuration error (docs/operations.md "`plan`").

    \b
    Examples:
      runjournal plan examples/glossary/pipeline.toml --resume
      runjournal plan pipeline.toml --recompute glossary --json
    """
    _call(lambda: _plan_cmd().plan, opts, pipeline=pipeline, inputs=inputs)


@cli.command("check")
@pipeline_and_decision_options
@setting_options("profile", "profiles_file")
@click.option(
    "--online",
    is_flag=True,
    help="Also ask each profile's endpoint for its models (one request each).",
)
@verbose_option
@json_option
def check(pipeline: str, inputs: tuple[str, ...], **opts: Any) -> None:
    """Check PIPELINE before running it: modules, params, LLM profiles.

    The checks `run` and `plan` make before anything is allocated: every step's module
    loads, its params are known and typed, every step that calls an LLM has a profile,
    the profiles load (a `base_url` must be a URL). One line per problem, exit 2; exit 0
    when there is none. Runs nothing, opens no journal (docs/operations.md "`check`").

    \b
    Examples:
      runjournal check pipeline.toml
      runjournal check pipeline.toml --profile smollm2-local --online
    """
    _call(lambda: _check_cmd().check, opts, pipeline=pipeline, inputs=inputs)


@cli.group("runs", cls=Group)
def runs_group() -> None:
    """Runs recorded in the journal.

    \b
    Examples:
      runjournal runs list
      runjournal runs show latest
      runjournal runs diff previous latest
    """


@runs_group.command("list")
@journal_options
@json_option
@verbose_option
def runs_list(**opts: Any) -> None:
    """List runs, oldest first.

    \b
    Examples:
      runjournal runs list
      runjournal runs list --output-root out --json
    """
    _call(lambda: _query_cmds().runs_list, opts)


@runs_group.command("show")
@run_argument
@click.option(
    "--outputs",
    "outputs",
    is_flag=True,
    help="Only the outputs, all of them, each with the step, lane and decisions behind it.",
)
@journal_options
@json_option
@verbose_option
def runs_show(run: str, outputs: bool, **opts: Any) -> None:
    """Show one run (RUN: a run id, a unique prefix, `latest`, `latest-ok`, …) and its outputs.

    Each output is listed with its provenance: the step and lane whose artifact it
    holds or renders, and that lane's decisions. --json prints the run's manifest
    view; with --outputs, the outputs with their provenance.

    \b
    Examples:
      runjournal runs show latest
      runjournal runs show latest --outputs
      runjournal runs show 20261130T150405Z --json
    """
    _call(lambda: _query_cmds().runs_show, opts, run=run, outputs=outputs)


@runs_group.command("diff")
@click.argument("run_a", metavar="RUN_A", shell_complete=complete_runs)
@click.argument("run_b", metavar="RUN_B", shell_complete=complete_runs)
@journal_options
@json_option
@verbose_option
def runs_diff(run_a: str, run_b: str, **opts: Any) -> None:
    """What changed from RUN_A to RUN_B: settings, inputs, identity, decisions, outputs.

    Identity is compared per step (which components differ: config, module,
    validators, references, overrides, profile, profile source; the declared module
    fingerprints; lanes added or removed); decisions per step and reason code;
    outputs by name and sha256.

    \b
    Examples:
      runjournal runs diff previous latest
      runjournal runs diff 20261130T1504 20261130T1610 --json
    """
    _call(lambda: _query_cmds().runs_diff, opts, run_a=run_a, run_b=run_b)


@cli.group("journal", cls=Group)
def journal_group() -> None:
    """The run journal itself.

    \b
    Examples:
      runjournal journal show latest
      runjournal journal audit latest
      runjournal journal export latest -o run.rjx
    """


@journal_group.command("show")
@run_argument
@journal_options
@json_option
@click.option("--jsonl", is_flag=True, help="One JSON object per event, streamed (for large runs).")
@verbose_option
def journal_show(run: str, jsonl: bool, **opts: Any) -> None:
    """Print RUN's events in order.

    \b
    Examples:
      runjournal journal show latest
      runjournal journal show latest --json
      runjournal journal show latest --jsonl | jq -c 'select(.type == "StageDecided")'
    """
    _call(lambda: _query_cmds().journal_show, opts, run=run, jsonl=jsonl)


def key_option(fn: F) -> F:
    return click.option(
        "--key",
        "keys",
        multiple=True,
        metavar="KEY",
        help="A trusted public key (name+id+base64, or a file holding one); default: "
        "your own key's (`keys init`).",
    )(fn)


@journal_group.command("audit")
@run_argument
@key_option
@journal_options
@json_option
@verbose_option
def journal_audit(run: str, keys: tuple[str, ...], **opts: Any) -> None:
    """Re-decide every recorded stage decision of RUN from its facts; exit 1 on any difference.

    Also verifies the hash chain, the run's Merkle tree and its signed checkpoints.

    \b
    Examples:
      runjournal journal audit latest
      runjournal journal audit 20261130T150405Z --json
      runjournal journal audit latest --key alice+1a2b3c4d+AeT...
    """
    _call(lambda: _journal_cmds().audit, opts, run=run, keys=keys)


@journal_group.command("checkpoint")
@run_argument
@journal_options
@json_option
@verbose_option
def journal_checkpoint(run: str, **opts: Any) -> None:
    """Print RUN's newest checkpoint (a signed note), to publish.

    \b
    Examples:
      runjournal journal checkpoint latest > published.note
      runjournal journal verify latest --checkpoint published.note
    """
    _call(lambda: _seal_cmds().checkpoint, opts, run=run)


@journal_group.command("verify")
@run_argument
@click.option(
    "--checkpoint",
    required=True,
    metavar="FILE",
    type=ShownPath(dir_okay=False),
    help="A checkpoint of RUN published earlier (a signed note).",
)
@key_option
@journal_options
@json_option
@verbose_option
def journal_verify(run: str, checkpoint: str, keys: tuple[str, ...], **opts: Any) -> None:
    """Check that RUN's history today extends a checkpoint published earlier.

    Exit 0 when the checkpoint's signature verifies and its tree is a prefix of the
    run's tree now (a consistency proof); 1 when it does not (a rewritten history, even
    by someone holding the signing key); 2 for a file that is not a checkpoint.

    \b
    Examples:
      runjournal journal verify latest --checkpoint published.note
    """
    _call(lambda: _seal_cmds().verify, opts, run=run, checkpoint=checkpoint, keys=keys)


@journal_group.command("export")
@run_argument
@click.option(
    "-o",
    "--output",
    required=True,
    metavar="FILE",
    type=ShownPath(dir_okay=False),
    help="The file to write.",
)
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@journal_options
@json_option
@verbose_option
def journal_export(run: str, output: str, force: bool, **opts: Any) -> None:
    """Write RUN's events to a portable, zstd-compressed, hash-chained file.

    \b
    Examples:
      runjournal journal export latest -o run.rjx
      runjournal journal export latest -o run.rjx --force
    """
    _call(lambda: _journal_cmds().export, opts, run=run, output=output, force=force)


@journal_group.command("import")
@click.argument("file", type=ShownPath(dir_okay=False))
@journal_options
@json_option
@verbose_option
def journal_import(file: str, **opts: Any) -> None:
    """Verify FILE (a `journal export`) and append its run; importing twice is harmless.

    Exit 2 when FILE is not a runjournal export, 1 when it fails verification.

    \b
    Examples:
      runjournal journal import run.rjx
      runjournal journal import run.rjx --journal other.sqlite3
    """
    _call(lambda: _journal_cmds().import_, opts, file=file)


@journal_group.command("otel")
@run_argument
@click.option(
    "--endpoint",
    default=None,
    metavar="URL",
    help="OTLP/HTTP endpoint (base URL, /v1/traces added); default: OTEL_EXPORTER_OTLP_ENDPOINT.",
)
@journal_options
@json_option
@verbose_option
@click.option(
    "--content",
    default=None,
    metavar="CASSETTE",
    type=ShownPath(dir_okay=False),
    help="Add the prompts and replies this cassette (--llm-record) holds, redacted.",
)
def journal_otel(run: str, endpoint: str | None, content: str | None, **opts: Any) -> None:
    """Send RUN as an OpenTelemetry trace (OTLP/HTTP protobuf): spans for the run, its
    steps, lanes and stages, and a `chat <model>` span per LLM attempt.

    Needs the `otel` extra. Ids and times come from the journal: sending twice sends the
    same trace. Exit 2 without an endpoint, 1 when the endpoint refuses it.

    \b
    Examples:
      runjournal journal otel latest --endpoint http://localhost:4318
      OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 runjournal journal otel latest
      runjournal journal otel latest --endpoint http://localhost:4318 --content cassette.json
    """
    _call(lambda: _telemetry_cmds().otel, opts, run=run, endpoint=endpoint, content=content)


@journal_group.command("lineage")
@run_argument
@click.option(
    "--transport",
    type=click.Choice(["console", "file", "http"]),
    default=None,
    help="Where the events go (default: console, or what --path / --url imply).",
)
@click.option(
    "--path",
    default=None,
    metavar="FILE",
    type=ShownPath(dir_okay=False),
    help="File transport: write one JSON event per line here.",
)
@click.option("--url", default=None, metavar="URL", help="HTTP transport: the server's base URL.")
@click.option(
    "--namespace", default="runjournal", show_default=True, help="The OpenLineage job namespace."
)
@click.option("--force", is_flag=True, help="Replace the --path file if it exists.")
@journal_options
@json_option
@verbose_option
def journal_lineage(
    run: str,
    transport: str | None,
    path: str | None,
    url: str | None,
    namespace: str,
    force: bool,
    **opts: Any,
) -> None:
    """RUN as OpenLineage run events: START, RUNNING, then COMPLETE, FAIL or ABORT, for
    the run and each of its steps, with its inputs and outputs as datasets.

    Needs the `lineage` extra. By default one JSON event per line on stdout.

    \b
    Examples:
      runjournal journal lineage latest
      runjournal journal lineage latest --path lineage.jsonl
      runjournal journal lineage latest --url http://localhost:5000
    """
    _call(
        lambda: _telemetry_cmds().lineage,
        opts,
        run=run,
        transport=transport,
        path=path,
        url=url,
        namespace=namespace,
        force=force,
    )


@cli.group("projections", cls=Group)
def projections_group() -> None:
    """Materialised views of the journal (manifest, reasons, runs index, …).

    \b
    Examples:
      runjournal projections status
      runjournal projections rebuild
    """


@projections_group.command("status")
@journal_options
@json_option
@verbose_option
def projections_status(**opts: Any) -> None:
    """List each projection, its version, and whether its materialised views are stale.

    \b
    Examples:
      runjournal projections status
      runjournal projections status --json
    """
    _call(lambda: _projection_cmds().status, opts, name=None)


@projections_group.command("rebuild")
@click.argument("name", required=False)
@click.option("--run", default=None, shell_complete=complete_runs, help="Only this run.")
@journal_options
@json_option
@verbose_option
def projections_rebuild(name: str | None, run: str | None, **opts: Any) -> None:
    """Rebuild materialised views from the journal (all projections, or NAME).

    \b
    Examples:
      runjournal projections rebuild
      runjournal projections rebuild manifest --run latest
    """
    _call(lambda: _projection_cmds().rebuild, opts, name=name, run=run)


@cli.command("explain")
@run_argument
@click.option(
    "--step",
    default=None,
    metavar="STEP",
    shell_complete=complete_run_steps,
    help="Only this step's decisions.",
)
@click.option(
    "--lane",
    default=None,
    metavar="LANE",
    shell_complete=complete_run_lanes,
    help="Only this lane's decisions.",
)
@click.option(
    "--code",
    default=None,
    metavar="CODE",
    shell_complete=complete_reason_codes,
    help="Only decisions with this reason code (see `runjournal reasons`).",
)
@click.option("--executed", is_flag=True, help="Only stages that ran (not reused).")
@click.option("--changed", is_flag=True, help="Only stages invalidated by a change.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="List at most N decisions (default 50).",
)
@journal_options
@json_option
@verbose_option
def explain(run: str, step: str | None, **opts: Any) -> None:
    """Explain RUN's decisions: a summary by step and reason, then what you select.

    The summary has one line per step and reason code with its count; each reason's
    description is printed once. --step, --lane, --code, --executed, --changed and
    --limit select decisions, which are then listed one per line.

    \b
    Examples:
      runjournal explain latest
      runjournal explain latest --executed
      runjournal explain latest --changed --step glossary
      runjournal explain latest --lane docs/intro.md --code input_changed
      runjournal explain 20261130T150405Z --json
    """
    drill = {k: opts.pop(k) for k in ("lane", "code", "executed", "changed", "limit")}
    _call(lambda: _query_cmds().explain, opts, run=run, step=step, **drill)


@cli.command("report")
@run_argument
@click.option(
    "-o",
    "--output",
    default=None,
    metavar="FILE",
    type=ShownPath(dir_okay=False, allow_dash=True),
    help="Write the page here (- for stdout) instead of <run dir>/report.html.",
)
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@click.option(
    "--watch",
    is_flag=True,
    help="Keep the page current while RUN goes (it reloads itself); stop when RUN ends.",
)
@click.option(
    "--interval",
    default=2.0,
    show_default=True,
    type=float,
    metavar="SECONDS",
    help="With --watch: how often the page is rewritten and reloads.",
)
@journal_options
@json_option
@verbose_option
def report(
    run: str, output: str | None, force: bool, watch: bool, interval: float, **opts: Any
) -> None:
    """Write RUN's HTML report: one self-contained page built from the journal.

    Without -o it goes into the run directory as report.html, replacing the one there.

    \b
    Examples:
      runjournal report latest
      runjournal report latest -o /tmp/run.html --force
      runjournal report latest -o - > run.html
      runjournal report latest --watch --interval 5   # while the run goes
    """
    _call(
        lambda: _report_cmds().report,
        opts,
        run=run,
        output=output,
        force=force,
        watch=watch,
        interval=interval,
    )


@cli.command("reasons")
@journal_options
@json_option
def reasons(**opts: Any) -> None:
    """The reason-code reference: code, category, description.

    It comes from the code, not a journal; --journal is accepted like everywhere else.

    \b
    Examples:
      runjournal reasons
      runjournal reasons --json
    """
    _call(lambda: _query_cmds().reasons, opts)


@cli.group("config", cls=Group)
def config_group() -> None:
    """Effective configuration.

    \b
    Examples:
      runjournal config show pipeline.toml
    """


@config_group.command("show")
@click.argument("pipeline", type=ShownPath(dir_okay=False))
@setting_options()
@json_option
@verbose_option
def config_show(pipeline: str, **opts: Any) -> None:
    """Print the effective configuration for PIPELINE with the origin of each value.

    Takes every setting flag `run` takes; nothing is run or allocated.

    \b
    Examples:
      runjournal config show pipeline.toml
      runjournal config show pipeline.toml --jobs 4 --json
      RUNJOURNAL_CACHE_MODE=bypass runjournal config show pipeline.toml
    """
    _call(lambda: _query_cmds().config_show, opts, pipeline=pipeline)


@cli.command("recover")
@click.option("--dry-run", is_flag=True, help="Say what would be done; change nothing.")
@setting_options("output_root", "cache_root", "debug_root", "journal")
@json_option
@verbose_option
def recover(**opts: Any) -> None:
    """Terminalize dead runs as abandoned and remove orphaned temp files.

    \b
    Examples:
      runjournal recover --dry-run
      runjournal recover
    """
    _call(lambda: _maintenance_cmds().recover, opts)


@cli.command("gc")
@click.option(
    "--keep",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Keep the N newest finished runs.",
)
@click.option(
    "--older-than",
    default=None,
    metavar="AGE",
    help="Only runs started more than AGE ago: a number and a unit, "
    f"{', '.join(AGE_UNITS)} (90m, 12h, 30d, 2w).",
)
@click.option(
    "--cache",
    is_flag=True,
    help="Also remove checkpoints and chunk plans that no kept run references.",
)
@click.option(
    "--max-cache-size",
    default=None,
    metavar="SIZE",
    help="With --cache (implied): then remove the least recently used entries only this "
    "journal uses until the cache fits in SIZE (500M, 2G; K, M, G, T are powers of 1024).",
)
@click.option(
    "--forget-missing",
    is_flag=True,
    help="With --cache (implied): drop the cache root's registry entries of journals that "
    "are gone, so what they referenced is no longer kept.",
)
@click.option(
    "--include-unregistered",
    is_flag=True,
    help="With --cache (implied): also remove unreferenced entries written before the "
    "cache root's journal registry existed (kept by default).",
)
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@setting_options("output_root", "cache_root", "debug_root", "journal")
@json_option
@verbose_option
def gc(**opts: Any) -> None:
    """Remove run directories and debug bundles of finished runs beyond the retention.

    One of --keep, --older-than or --cache is required; with both --keep and
    --older-than, only runs beyond the N newest that are also older than AGE are removed.
    AGE units: s (seconds), m (minutes), h (hours), d (days), w (weeks). Journal events
    are kept. --cache also removes the checkpoints and chunk plans no kept run of any
    journal registered in the cache root references (nothing while a run holds the cache
    root); the removal is a journal event.

    \b
    Examples:
      runjournal gc --keep 10 --dry-run
      runjournal gc --older-than 30d
      runjournal gc --keep 5 --older-than 2w
      runjournal gc --keep 5 --cache --max-cache-size 2G --dry-run
    """
    _call(lambda: _maintenance_cmds().gc, opts)


@cli.group("keys", cls=Group)
def keys_group() -> None:
    """The signing key that signs each run's checkpoint.

    \b
    Examples:
      runjournal keys init
      runjournal keys init --name alice@example.org --json
    """


@keys_group.command("init")
@click.option("--name", default="runjournal", show_default=True, help="The key's name.")
@click.option("--force", is_flag=True, help="Replace an existing key.")
@json_option
@verbose_option
def keys_init(name: str, force: bool, **opts: Any) -> None:
    """Make an Ed25519 signing key in your config dir (0600) and print its public key.

    \b
    Examples:
      runjournal keys init
      runjournal keys init --name alice@example.org
    """
    _call(lambda: _keys_cmds().keys_init, opts, name=name, force=force)


@cli.command("init")
@click.argument("directory", type=click.Path(file_okay=False))
@journal_options
@json_option
@verbose_option
def init(directory: str, **opts: Any) -> None:
    """Write a runnable starter pipeline into DIRECTORY.

    --output-root and --journal are written into the new pipeline's [runjournal] table,
    so every later run of it uses them.

    \b
    Examples:
      runjournal init demo
      runjournal init demo --output-root demo/out
      runjournal init demo --journal postgresql://db.example/runjournal
    """
    _call(lambda: _maintenance_cmds().init, opts, directory=directory)


def _call(
    target: Callable[[], Callable[..., int | None]], opts: dict[str, Any], **kwargs: Any
) -> None:
    """Run the command function `target()` returns, importing its module only now.

    Command modules pull in the journal, eventsourcing and the adapters; importing them
    lazily keeps `--version`, `--help` and completion fast. `target` is a lazy reference
    (`lambda: _query_cmds().runs_list`), not a string: a type checker and
    tests/unit/test_command_targets.py resolve every one.
    """
    fn = target()
    try:
        code = fn(opts, **kwargs)
    except RunjournalError as exc:  # CliError and the use-cases' typed errors (app/errors.py)
        _fail(opts, exc.message, exit_code_of(exc), lines=getattr(exc, "problems", None))
    except BrokenPipeError:
        raise
    except Exception as exc:
        if opts.get("verbose"):
            traceback.print_exc()
        _fail(opts, f"{type(exc).__name__}: {exc}", ExitCode.FAILED)
    sys.exit(int(code or 0))


# --- the command modules, imported on first use (see `_call`) ---------------------------


def _check_cmd() -> ModuleType:
    from runjournal.cli import check_cmd

    return check_cmd


def _journal_cmds() -> ModuleType:
    from runjournal.cli import journal_cmds

    return journal_cmds


def _keys_cmds() -> ModuleType:
    from runjournal.cli import keys_cmds

    return keys_cmds


def _maintenance_cmds() -> ModuleType:
    from runjournal.cli import maintenance_cmds

    return maintenance_cmds


def _plan_cmd() -> ModuleType:
    from runjournal.cli import plan_cmd

    return plan_cmd


def _projection_cmds() -> ModuleType:
    from runjournal.cli import projection_cmds

    return projection_cmds


def _query_cmds() -> ModuleType:
    from runjournal.cli import query_cmds

    return query_cmds


def _report_cmds() -> ModuleType:
    from runjournal.cli import report_cmds

    return report_cmds


def _telemetry_cmds() -> ModuleType:
    from runjournal.cli import telemetry_cmds

    return telemetry_cmds


def _seal_cmds() -> ModuleType:
    from runjournal.cli import seal_cmds

    return seal_cmds


def _fail(
    opts: dict[str, Any], message: str, code: ExitCode, *, lines: list[str] | None = None
) -> NoReturn:
    """One stderr line (one per problem of a pipeline check: `lines`); with --json also
    one document on stdout; then exit.

    See docs/operations.md "Exit codes".
    """
    for line in lines or [message]:
        print_error(line)
    if opts.get("as_json"):
        emit_json(error_document(message, code))
    sys.exit(int(code))


def main() -> None:
    os.umask(0o077)
    try:
        code = cli.main(standalone_mode=False)
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): not an error worth a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(int(ExitCode.OK))
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        print_error("aborted")
        sys.exit(int(ExitCode.INTERRUPTED))
    except click.ClickException as exc:
        print_error(exc.format_message())
        sys.exit(int(ExitCode.USAGE))
    # Commands exit themselves; what returns here is click's own exit (help, --version,
    # a group without a command).
    sys.exit(code if isinstance(code, int) else int(ExitCode.OK))


if __name__ == "__main__":
    main()
