"""`recover`, `gc` and `init`: recovery after crashes, retention, and a starter pipeline.

`recover` and `gc` parse, call their use-case (app/recover_runs.py,
app/collect_garbage.py) and render its report; `init` writes the starter pipeline.
"""

from __future__ import annotations

import os
import shlex
from typing import Any

import click
from runjournal.adapters.fsroot import FsError
from runjournal.adapters.starter import STARTER_FILES, starter_pipeline
from runjournal.app.collect_garbage import GcRequest, collect_garbage
from runjournal.app.recover_runs import recover_runs
from runjournal.cli.age import AGE_UNITS, parse_age
from runjournal.cli.cache_gc_cmd import echo_cache, parse_size
from runjournal.cli.compose import factories, maintenance_ports
from runjournal.cli.exit_codes import CliError, ExitCode
from runjournal.cli.output import emit_json
from runjournal.cli.query_cmds import resolve_cli_settings
from runjournal.cli.settings import (
    SettingsError,
    is_postgres_url,
    redact_journal,
    resolve_settings,
)
from runjournal.cli.settings.click_options import settings_flags

# --- recover ---------------------------------------------------------------------


def recover(opts: dict[str, Any]) -> int:
    """Terminalize dead runs as abandoned; sweep leftover temp files under the roots and
    the output roots the journal's runs recorded (app/recover_runs.py)."""
    dry_run = bool(opts.get("dry_run"))
    report = recover_runs(resolve_cli_settings(opts), maintenance_ports(), dry_run=dry_run)
    if opts.get("as_json"):
        emit_json(report.document())
        return 0
    verb = "would abandon" if dry_run else "abandoned"
    if not report.journal_found:
        click.echo(f"no journal at {report.journal}: no runs to abandon")
    for row in report.abandoned:
        click.echo(f"{verb} {row['run_id']} (pid {row['pid']} on {row['host']} is gone)")
        if row.get("llm_attempts"):
            verb_llm = "would journal" if dry_run else "journaled"
            click.echo(
                f"  {verb_llm} {row['llm_attempts']} LLM attempt(s) from its call log "
                f"({row['llm_in_doubt']} in doubt, counted at their upper bound)"
            )
    for row in report.skipped:
        click.echo(f"left {row['run_id']}: {row['why']}")
    if report.skipped:
        click.echo("temp files left alone: a run may still be writing")
    for label, names in report.temp_files.items():
        for name in names:
            click.echo(f"{'would remove' if dry_run else 'removed'} {label} temp file {name}")
    if not report.abandoned and not any(report.temp_files.values()):
        click.echo("nothing to recover")
    return 0


# --- gc ----------------------------------------------------------------------------


def gc(opts: dict[str, Any]) -> int:
    """Delete run directories (and debug bundles) of finished runs beyond the retention
    (app/collect_garbage.py)."""
    request = GcRequest(
        keep=opts.get("keep"),
        older_than=parse_age(opts["older_than"]) if opts.get("older_than") else None,
        cache=bool(opts.get("cache")),
        max_cache_size=(parse_size(opts["max_cache_size"]) if opts.get("max_cache_size") else None),
        forget_missing=bool(opts.get("forget_missing")),
        include_unregistered=bool(opts.get("include_unregistered")),
        dry_run=bool(opts.get("dry_run")),
    )
    if request.keep is None and request.older_than is None and not request.collects_cache:
        raise CliError(
            "gc needs --keep N and/or --older-than AGE, or --cache "
            f"(AGE: a number and a unit, {', '.join(AGE_UNITS)}; e.g. 30d)"
        )
    report = collect_garbage(resolve_cli_settings(opts), request, maintenance_ports())
    if opts.get("as_json"):
        emit_json(report.document())
        return 0
    verb = "would remove" if report.dry_run else "removed"
    for path in report.removed:
        click.echo(f"{verb} {path}")
    if report.objects_removed:
        click.echo(f"removed {report.objects_removed} output object(s) no run directory links")
    if not report.removed and not report.objects_removed and report.cache is None:
        click.echo("nothing to remove")
    if report.cache is not None:
        echo_cache(report.cache)
    return 0


# --- init --------------------------------------------------------------------------


def init(opts: dict[str, Any], *, directory: str) -> int:
    """Write a runnable starter pipeline into DIRECTORY (never overwriting a file).

    `--output-root` and `--journal` are written into its `[runjournal]` table (checked
    first, exactly as `run` checks a flag), so they take effect for every run of it.
    """
    settings = _init_settings(opts, directory)
    if "output_root" not in settings:
        # Relative to the pipeline's directory: `runs list`, `explain` and the rest find
        # the project from there or below without flags (docs/configuration.md
        # "Finding the project").
        settings = {"output_root": DEFAULT_INIT_OUTPUT_ROOT, **settings}
    files = dict(STARTER_FILES)
    files["pipeline.toml"] = starter_pipeline(settings)
    try:
        with factories().open_root(directory, create=True) as root:
            for name in files:
                if root.exists(name):
                    raise CliError(f"{os.path.join(directory, name)} already exists")
            for name, text in files.items():
                root.write_bytes(name, text.encode("utf-8"), overwrite=False)
    except FsError as exc:
        raise CliError(f"cannot write the starter pipeline: {exc}", ExitCode.FAILED) from None
    pipeline = os.path.join(os.path.abspath(directory), "pipeline.toml")
    if opts.get("as_json"):
        emit_json({"pipeline": pipeline, "files": sorted(files), "settings": settings})
    else:
        written = "".join(f"; {k} = {v}" for k, v in settings.items())
        # The project is found from the pipeline's directory (docs/configuration.md
        # "Finding the project"): `explain latest` and the rest work from there.
        where = shlex.quote(directory)
        click.echo(
            f"wrote {pipeline}{written}; run it with: cd {where} && runjournal run pipeline.toml"
        )
    return 0


# What `init` writes as `output_root` when --output-root is not given.
DEFAULT_INIT_OUTPUT_ROOT = "runs"


def _init_settings(opts: dict[str, Any], directory: str) -> dict[str, str]:
    """The `[runjournal]` values for `init`'s setting flags, as the pipeline file needs them.

    A relative flag means "relative to the current directory" (docs/configuration.md), a
    relative value in the pipeline file "relative to the pipeline's directory": it is
    rewritten so both name the same place. A journal URL with a password is refused: the
    pipeline file is meant to be shared (use RUNJOURNAL_JOURNAL or the user config).
    """
    given = {k: v for k, v in settings_flags(opts).items() if v is not None}
    if not given:
        return {}
    cwd = os.getcwd()
    try:
        config = resolve_settings(
            flags=given,
            env={},
            pipeline_table=None,
            pipeline_dir=cwd,
            user_config=None,
            user_config_path=None,
            cwd=cwd,
        )
    except SettingsError as exc:
        raise CliError(str(exc)) from None
    base = os.path.realpath(os.path.join(cwd, directory))
    out: dict[str, str] = {}
    for name, raw in given.items():
        value = str(getattr(config, name))
        text = str(raw)
        if name == "journal" and is_postgres_url(value):
            if redact_journal(value) != value:
                raise CliError(
                    "init --journal: the URL holds a password, which would be written into "
                    "the pipeline file; give it with RUNJOURNAL_JOURNAL or the user config"
                )
            out[name] = value
            continue
        if name == "journal" and text.lower().startswith("sqlite:"):
            text = text[len("sqlite:") :].removeprefix("//")
        relative = not os.path.isabs(os.path.expanduser(text))
        out[name] = os.path.relpath(value, base) if relative else value
        try:
            out[name].encode("utf-8")
        except UnicodeEncodeError:
            raise CliError(f"init --{name.replace('_', '-')}: not valid UTF-8") from None
    return out
