"""The `runjournal` command group: thin commands that parse, call and format."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

import click
from runjournal import __version__
from runjournal.cli import journal_cmds, maintenance_cmds, projection_cmds, query_cmds
from runjournal.cli.errors import CliError, ExitCode, error_document, print_error
from runjournal.cli.output import emit_json
from runjournal.cli.run_cmd import RunRequest, run_command_body

F = Callable[..., Any]


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")(fn)


def journal_options(fn: F) -> F:
    fn = click.option(
        "--journal", default=None, help="Journal URL: sqlite:///path, a path, or postgresql://…"
    )(fn)
    fn = click.option("--output-root", default=None, help="Output root (default ./runs).")(fn)
    return fn


def verbose_option(fn: F) -> F:
    return click.option("-v", "--verbose", is_flag=True, help="Tracebacks on errors.")(fn)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="runjournal")
def cli() -> None:
    """Run document pipelines so every run can be resumed, recomputed, explained, audited.

    \b
    Quick start:
      runjournal run examples/glossary/pipeline.toml
      runjournal run examples/glossary/pipeline.toml --resume
      runjournal explain latest
    """


@cli.command("run")
@click.argument("pipeline", type=click.Path(dir_okay=True))
@click.option("--input", "inputs", multiple=True, help="Input file or glob (replaces `inputs`).")
@click.option("--output-root", default=None, help="Where run directories and the journal go.")
@click.option("--cache-root", default=None, help="Where checkpoints and chunk plans go.")
@click.option("--debug-root", default=None, help="Where debug bundles go.")
@click.option("--journal", default=None, help="Journal URL: sqlite:///path, a path, postgresql://…")
@click.option("--cache-mode", default=None, help="Chunk-plan store: use|refresh|read-only|bypass.")
@click.option(
    "--checkpoints/--no-checkpoints", default=None, help="Record checkpoints (default on)."
)
@click.option("--resume", is_flag=True, help="Reuse valid checkpoints.")
@click.option("--recompute", multiple=True, metavar="STEP", help="Force STEP and its consumers.")
@click.option("--debug", default=None, metavar="summary|trace", help="Write a debug bundle.")
@click.option("--profile", default=None, help="Default LLM profile id for steps.")
@click.option("--profiles-file", default=None, help="A TOML file of [profiles.<id>] tables.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Runtime override.")
@click.option("--jobs", default=None, help="Extract calls run at once within a lane (default 1).")
@click.option("--batch-size", default=None, help="Journal events per commit (default 256).")
@click.option("--chunk-map", is_flag=True, default=None, help="Write chunk-map.json.")
@click.option("--chunk-map-index", is_flag=True, default=None, help="Also write its index.")
@click.option("--no-progress", is_flag=True, help="No progress line on stderr.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
@verbose_option
@json_option
def run_cmd(pipeline: str, inputs: tuple[str, ...], **opts: Any) -> None:
    """Run PIPELINE (a pipeline TOML file).

    \b
    Examples:
      runjournal run examples/glossary/pipeline.toml
      runjournal run pipeline.toml --resume --json
      runjournal run pipeline.toml --recompute glossary
    """
    flags = {
        "output_root": opts["output_root"],
        "cache_root": opts["cache_root"],
        "debug_root": opts["debug_root"],
        "journal": opts["journal"],
        "cache_mode": opts["cache_mode"],
        "checkpoints": opts["checkpoints"],
        "jobs": opts["jobs"],
        "batch_size": opts["batch_size"],
        "debug": opts["debug"],
        "profile": opts["profile"],
        "profiles_file": opts["profiles_file"],
        "chunk_map": opts["chunk_map"] or None,
        "chunk_map_index": opts["chunk_map_index"] or None,
        "progress": False if opts["no_progress"] else None,
    }
    req = RunRequest(
        pipeline=pipeline,
        inputs=inputs,
        flags=flags,
        resume=opts["resume"],
        recompute=opts["recompute"],
        overrides=opts["overrides"],
        json=opts["as_json"],
        quiet=opts["quiet"],
        verbose=opts["verbose"],
    )
    sys.exit(run_command_body(req, sys.argv[1:]))


@cli.group("runs")
def runs_group() -> None:
    """Runs recorded in the journal."""


@runs_group.command("list")
@journal_options
@json_option
@verbose_option
def runs_list(**opts: Any) -> None:
    """List runs, oldest first."""
    _call(query_cmds.runs_list, opts)


@runs_group.command("show")
@click.argument("run")
@journal_options
@json_option
@verbose_option
def runs_show(run: str, **opts: Any) -> None:
    """Show one run (RUN: a run id, a unique prefix, or `latest`)."""
    _call(query_cmds.runs_show, opts, run=run)


@cli.group("journal")
def journal_group() -> None:
    """The run journal itself."""


@journal_group.command("show")
@click.argument("run")
@journal_options
@json_option
@verbose_option
def journal_show(run: str, **opts: Any) -> None:
    """Print a run's events in order."""
    _call(query_cmds.journal_show, opts, run=run)


@journal_group.command("audit")
@click.argument("run")
@journal_options
@json_option
@verbose_option
def journal_audit(run: str, **opts: Any) -> None:
    """Re-decide every recorded stage decision of RUN from its facts; exit 1 on any difference.

    \b
    Examples:
      runjournal journal audit latest
      runjournal journal audit 20261130T150405Z --json
    """
    _call(journal_cmds.audit, opts, run=run)


@journal_group.command("export")
@click.argument("run")
@click.option("-o", "--output", required=True, metavar="FILE", help="The export file to write.")
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@journal_options
@json_option
@verbose_option
def journal_export(run: str, output: str, force: bool, **opts: Any) -> None:
    """Write RUN's events to a portable, zstd-compressed, hash-chained file.

    \b
    Example:
      runjournal journal export latest -o run.rjx
    """
    _call(journal_cmds.export, opts, run=run, output=output, force=force)


@journal_group.command("import")
@click.argument("file")
@journal_options
@json_option
@verbose_option
def journal_import(file: str, **opts: Any) -> None:
    """Verify FILE (a `journal export`) and append its run; importing twice is harmless.

    Exit 2 when FILE is not a runjournal export, 1 when it fails verification.
    """
    _call(journal_cmds.import_, opts, file=file)


@cli.group("projections")
def projections_group() -> None:
    """Materialised views of the journal (manifest, reasons, runs index, …)."""


@projections_group.command("status")
@journal_options
@json_option
@verbose_option
def projections_status(**opts: Any) -> None:
    """List each projection, its version, and whether its materialised views are stale."""
    _call(projection_cmds.status, opts, name=None)


@projections_group.command("rebuild")
@click.argument("name", required=False)
@click.option("--run", default=None, help="Only this run (per-run projections).")
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
    _call(projection_cmds.rebuild, opts, name=name, run=run)


@cli.command("explain")
@click.argument("run")
@click.option("--step", default=None, help="Only this step.")
@journal_options
@json_option
@verbose_option
def explain(run: str, step: str | None, **opts: Any) -> None:
    """Explain every stage decision of RUN, grouped by step, lane, stage and reason."""
    _call(query_cmds.explain, opts, run=run, step=step)


@cli.command("reasons")
@journal_options
@json_option
def reasons(**opts: Any) -> None:
    """The reason-code reference: code, category, description.

    It comes from the code, not a journal; --journal is accepted like everywhere else.
    """
    _call(query_cmds.reasons, opts)


@cli.group("config")
def config_group() -> None:
    """Effective configuration."""


@config_group.command("show")
@click.argument("pipeline", type=click.Path(dir_okay=True))
@click.option("--output-root", default=None)
@click.option("--cache-root", default=None)
@click.option("--debug-root", default=None)
@click.option("--journal", default=None)
@click.option("--cache-mode", default=None)
@click.option("--checkpoints/--no-checkpoints", default=None)
@click.option("--jobs", default=None)
@click.option("--batch-size", default=None)
@click.option("--debug", default=None)
@click.option("--profile", default=None)
@click.option("--profiles-file", default=None)
@click.option("--chunk-map", is_flag=True, default=None)
@click.option("--chunk-map-index", is_flag=True, default=None)
@click.option("--no-progress", is_flag=True)
@json_option
@verbose_option
def config_show(pipeline: str, **opts: Any) -> None:
    """Print the effective configuration for PIPELINE with the origin of each value."""
    _call(query_cmds.config_show, opts, pipeline=pipeline)


@cli.command("recover")
@click.option("--dry-run", is_flag=True, help="Say what would be done; change nothing.")
@journal_options
@click.option("--cache-root", default=None, help="Cache root to sweep for temp files.")
@json_option
@verbose_option
def recover(**opts: Any) -> None:
    """Terminalize dead runs as abandoned and remove orphaned temp files."""
    _call(maintenance_cmds.recover, opts)


@cli.command("gc")
@click.option("--keep", type=click.IntRange(min=0), default=None, help="Keep the N newest runs.")
@click.option("--older-than", default=None, metavar="AGE", help="Only runs older than AGE (30d).")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@journal_options
@click.option("--debug-root", default=None, help="Debug root (default <output root>/debug).")
@json_option
@verbose_option
def gc(**opts: Any) -> None:
    """Remove run directories and debug bundles of finished runs beyond the retention."""
    _call(maintenance_cmds.gc, opts)


@cli.command("init")
@click.argument("directory", type=click.Path(file_okay=False))
@journal_options
@json_option
@verbose_option
def init(directory: str, **opts: Any) -> None:
    """Write a runnable starter pipeline into DIRECTORY."""
    _call(maintenance_cmds.init, opts, directory=directory)


def _call(fn: Callable[..., int | None], opts: dict[str, Any], **kwargs: Any) -> None:
    try:
        code = fn(opts, **kwargs)
    except CliError as exc:
        _fail(opts, exc.message, exc.exit_code)
    except BrokenPipeError:
        raise
    except Exception as exc:
        if opts.get("verbose"):
            traceback.print_exc()
        _fail(opts, f"{type(exc).__name__}: {exc}", ExitCode.FAILED)
    sys.exit(int(code or 0))


def _fail(opts: dict[str, Any], message: str, code: ExitCode) -> NoReturn:
    """One stderr line; with --json also one document on stdout (CLI.md); then exit."""
    print_error(message)
    if opts.get("as_json"):
        emit_json(error_document(message, code))
    sys.exit(int(code))


def main() -> None:
    os.umask(0o077)
    try:
        cli.main(standalone_mode=False)
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


if __name__ == "__main__":
    main()
