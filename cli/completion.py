"""Value completion for the shell (click `shell_complete`), see docs/operations.md
"Shell completion".

Each function gets the partly parsed command line (`ctx.params`) and returns the values
that start with what was typed so far: step ids of the pipeline named on the line, run
ids of the journal the line's settings select (plus `latest`), profile ids. A completion
never prints and never fails: when the pipeline, the settings or the journal cannot be
read, it offers nothing. Heavy modules are imported only when a completion runs.
"""

from __future__ import annotations

from typing import Any

import click
from click.shell_completion import CompletionItem


def _matching(values: list[str], incomplete: str, help_of: dict[str, str] | None = None):
    seen: set[str] = set()
    items = []
    for value in values:
        if value.startswith(incomplete) and value not in seen:
            seen.add(value)
            items.append(CompletionItem(value, help=(help_of or {}).get(value)))
    return items


def _params(ctx: click.Context) -> dict[str, Any]:
    """The parameters parsed so far on the command line (this command's only).

    While an option still waits for its value (`run p.toml --recompute <TAB>`), click's
    resilient parsing stops there and leaves the positional arguments unparsed in
    `ctx.args`; they are taken for the command's arguments, in order.
    """
    params = dict(ctx.params)
    left = list(ctx.args)
    for arg in ctx.command.params:
        if isinstance(arg, click.Argument) and arg.name and params.get(arg.name) is None and left:
            params[arg.name] = left.pop(0)
    return params


def complete_steps(ctx: click.Context, param: click.Parameter, incomplete: str):
    """Step ids of the PIPELINE given on the line (for `run --recompute`)."""
    from runjournal.cli.exit_codes import CliError
    from runjournal.cli.pipeline_input import load_pipeline_spec

    pipeline = _params(ctx).get("pipeline")
    if not pipeline:
        return []
    try:
        spec, _ = load_pipeline_spec(str(pipeline))
    except CliError:
        return []
    modules = {step.id: step.module for step in spec.steps}
    return _matching(list(spec.step_ids), incomplete, modules)


def complete_runs(ctx: click.Context, param: click.Parameter, incomplete: str):
    """The named run references (`latest`, `latest-ok`, …), then the run ids of the journal
    the line selects, newest first."""
    from runjournal.adapters.journal import JournalError
    from runjournal.cli.exit_codes import CliError
    from runjournal.cli.query_cmds import open_cli_journal

    try:
        store = open_cli_journal(_params(ctx), read_only=True)
    except CliError:
        return []
    try:
        runs = store.list_runs()
    except JournalError:
        return []
    finally:
        store.close()
    runs.sort(key=lambda r: r.started, reverse=True)
    status = {r.run_id: f"{r.status.value} {r.pipeline}" for r in runs}
    from runjournal.adapters.journal.store import RUN_REFS

    status.update(RUN_REFS)
    return _matching([*RUN_REFS, *(r.run_id for r in runs)], incomplete, status)


def _run_lanes(ctx: click.Context) -> list[tuple[str, str]]:
    """(step, lane) of each LaneResolved of the RUN given on the line, in order."""
    from runjournal.adapters.journal import JournalError
    from runjournal.cli.exit_codes import CliError
    from runjournal.cli.query_cmds import open_cli_journal
    from runjournal.domain.events import LaneResolved

    params = _params(ctx)
    if not params.get("run"):
        return []
    try:
        store = open_cli_journal(params, read_only=True)
    except CliError:
        return []
    try:
        run_id = store.resolve_run(str(params["run"]))
        return [(e.step, e.lane) for e in store.events(run_id) if isinstance(e, LaneResolved)]
    except JournalError:
        return []
    finally:
        store.close()


def complete_run_steps(ctx: click.Context, param: click.Parameter, incomplete: str):
    """Step ids of the RUN given on the line (for `explain RUN --step`)."""
    return _matching([step for step, _lane in _run_lanes(ctx)], incomplete)


def complete_run_lanes(ctx: click.Context, param: click.Parameter, incomplete: str):
    """Lane ids of the RUN given on the line (for `explain RUN --lane`)."""
    return _matching([lane for _step, lane in _run_lanes(ctx)], incomplete)


def complete_reason_codes(ctx: click.Context, param: click.Parameter, incomplete: str):
    """Every reason code, with its description (for `explain --code`)."""
    from runjournal.domain.reasons import DESCRIPTIONS, ReasonCode

    codes = [code.value for code in ReasonCode]
    return _matching(codes, incomplete, {c.value: DESCRIPTIONS[c] for c in ReasonCode})


def complete_profiles(ctx: click.Context, param: click.Parameter, incomplete: str):
    """Profile ids: the built-in ones, the user config's and the profiles file's."""
    from runjournal.adapters.profiles import ProfileError, ProfileRegistry
    from runjournal.cli.exit_codes import CliError
    from runjournal.cli.pipeline_input import load_pipeline_spec, resolve_config_and_profiles
    from runjournal.cli.query_cmds import resolve_cli_settings
    from runjournal.cli.settings import SettingsError, load_user_config
    from runjournal.cli.settings.click_options import settings_flags

    params = _params(ctx)
    try:
        if params.get("pipeline"):
            spec, path = load_pipeline_spec(str(params["pipeline"]))
            config, user_profiles = resolve_config_and_profiles(
                spec, path, settings_flags({**params, "profile": None})
            )
        else:
            config = resolve_cli_settings(params)
            user_profiles = dict(load_user_config()[0].get("profiles") or {})
        registry = ProfileRegistry.load(config.profiles_file, user_profiles=user_profiles)
    except (CliError, ProfileError, SettingsError):
        return []
    return _matching(registry.ids(), incomplete)
