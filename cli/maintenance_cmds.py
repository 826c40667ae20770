"""`recover`, `gc` and `init`: recovery after crashes, retention, and a starter pipeline.

Cleanup deletes only paths the journal recorded (run directories and debug bundles of
terminated runs), always through the confined filesystem adapter.
"""

from __future__ import annotations

import contextlib
import os
from datetime import UTC, datetime
from typing import Any

import click
from runjournal.adapters.fsroot import AlreadyExists, FsError, FsNotFound
from runjournal.adapters.journal import JournalError, JournalStore
from runjournal.adapters.process_identity import is_alive
from runjournal.adapters.starter import STARTER_FILES, starter_pipeline
from runjournal.app.terminal import Terminalizer
from runjournal.cli.age import AGE_UNITS, parse_age
from runjournal.cli.cache_gc_cmd import collect_cache, echo_cache, parse_size
from runjournal.cli.compose import factories, output_objects
from runjournal.cli.exit_codes import CliError, ExitCode
from runjournal.cli.llm_wiring import journal_pending
from runjournal.cli.output import emit_json
from runjournal.cli.query_cmds import journal_exists, open_cli_journal, resolve_cli_settings
from runjournal.cli.settings import (
    SettingsError,
    is_postgres_url,
    redact_journal,
    resolve_settings,
)
from runjournal.cli.settings.click_options import settings_flags
from runjournal.domain.events import RunStatus
from runjournal.domain.names import is_valid_run_id, recorded_run_parent

# --- recover ---------------------------------------------------------------------


def recover(opts: dict[str, Any]) -> int:
    """Terminalize dead runs as abandoned; sweep leftover temp files under the roots and
    the output roots the journal's runs recorded."""
    dry_run = bool(opts.get("dry_run"))
    config = resolve_cli_settings(opts)
    abandoned: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    # A run killed before its journal existed left no run to abandon, but maybe temp files.
    found = journal_exists(config.journal)
    store = open_cli_journal(opts) if found else None
    recorded: list[str] = []  # where the journal's runs put their run directories
    try:
        for summary in store.list_runs() if store is not None else ():
            recorded.append(recorded_run_parent(summary.run_id, summary.run_dir) or "")
            if summary.status is not RunStatus.RUNNING:
                continue
            alive = is_alive(summary.pid, summary.host, summary.process_start)
            row = {"run_id": summary.run_id, "pid": summary.pid, "host": summary.host}
            if alive is not False:
                skipped.append({**row, "why": "still running" if alive else "another host"})
                continue
            if store is not None:
                row.update(_abandon(store, summary.run_id, summary.pid, summary.host, dry_run))
            abandoned.append(row)
    finally:
        if store is not None:
            store.close()
    # A live writer's temp file must not vanish under it: sweep only when no run that may
    # still be writing (live here, or on another host) is in the journal.
    swept: dict[str, list[str]] = {}
    roots = [
        ("output", config.output_root),
        ("cache", config.cache_root),
        ("debug", config.debug_root),
    ]
    known = {os.path.realpath(path) for _, path in roots}
    for home in dict.fromkeys(filter(None, recorded)):
        if os.path.realpath(home) not in known:
            roots.append((f"output:{home}", home))  # an output root the journal recorded
    for label, path in roots if not skipped else ():
        if os.path.isdir(path):
            try:
                with factories().open_root(path) as root:
                    swept[label] = root.sweep_temp_files(dry_run=dry_run)
            except FsError as exc:
                raise CliError(f"cannot sweep {label} root: {exc}", ExitCode.FAILED) from None
    doc = {
        "dry_run": dry_run,
        "journal_found": found,
        "abandoned": abandoned,
        "skipped": skipped,
        "temp_files": swept,
        "temp_sweep": "skipped: a run may still be writing" if skipped else "done",
    }
    if opts.get("as_json"):
        emit_json(doc)
        return 0
    verb = "would abandon" if dry_run else "abandoned"
    if not found:
        click.echo(f"no journal at {config.journal}: no runs to abandon")
    for row in abandoned:
        click.echo(f"{verb} {row['run_id']} (pid {row['pid']} on {row['host']} is gone)")
        if row.get("llm_attempts"):
            verb_llm = "would journal" if dry_run else "journaled"
            click.echo(
                f"  {verb_llm} {row['llm_attempts']} LLM attempt(s) from its call log "
                f"({row['llm_in_doubt']} in doubt, counted at their upper bound)"
            )
    for row in skipped:
        click.echo(f"left {row['run_id']}: {row['why']}")
    if skipped:
        click.echo("temp files left alone: a run may still be writing")
    for label, names in swept.items():
        for name in names:
            click.echo(f"{'would remove' if dry_run else 'removed'} {label} temp file {name}")
    if not abandoned and not any(swept.values()):
        click.echo("nothing to recover")
    return 0


def _abandon(
    store: JournalStore, run_id: str, pid: int, host: str, dry_run: bool
) -> dict[str, int]:
    """Journal the attempts the run's LLM call log holds and its journal lacks, then
    terminalize it as abandoned (docs/operations.md "LLM call log"); what was accounted."""
    try:
        pending, log = _llm_pending(store, run_id)
        accounted = {
            "llm_attempts": len(pending),
            "llm_in_doubt": sum(1 for p in pending if p.attempt.status.value == "in_doubt"),
        }
        if dry_run:
            return accounted
        run = store.load_run(run_id)
        session = store.session(run)
        if pending:
            journal_pending(session, pending)
        terminal = Terminalizer(session=session, run_id=run_id)
        terminal.abandon(f"process {pid} on {host} ended without terminalizing")
        session.flush()
    except JournalError as exc:
        raise CliError(f"cannot abandon {run_id}: {exc}", ExitCode.FAILED) from None
    if log is not None:
        from runjournal.adapters.llm.calllog import remove_log

        with contextlib.suppress(OSError):
            remove_log(log)
    return accounted


def _llm_pending(store: JournalStore, run_id: str) -> tuple[list[Any], str | None]:
    """The attempts of `run_id`'s call log its journal lacks, and the log's path (None:
    the run left no log). Replies the log holds go back to the reply store first."""
    from runjournal.domain.events import RunAllocated
    from runjournal.projections.llm_usage import LLMUsageFold

    fold = LLMUsageFold()
    cache_root: str | None = None
    for event in store.events(run_id):
        if isinstance(event, RunAllocated):
            cache_root = event.cache_root
        fold.apply(event)
    if not cache_root:
        return [], None
    from runjournal.adapters.llm.calllog import (
        ReplyStore,
        log_path,
        pending_attempts,
        read_log,
        restore_replies,
    )

    path = log_path(cache_root, run_id)
    if not os.path.exists(path):
        return [], None
    lines = list(read_log(path))
    with contextlib.suppress(OSError):
        restore_replies(lines, ReplyStore(os.path.join(cache_root, "llm", "replies")))
    return pending_attempts(lines, fold.attempt_keys), path


# --- gc ----------------------------------------------------------------------------


def gc(opts: dict[str, Any]) -> int:
    """Delete run directories (and debug bundles) of finished runs beyond the retention."""
    keep = opts.get("keep")
    older = parse_age(opts["older_than"]) if opts.get("older_than") else None
    max_size = parse_size(opts["max_cache_size"]) if opts.get("max_cache_size") else None
    forget_missing, unregistered = (
        bool(opts.get("forget_missing")),
        bool(opts.get("include_unregistered")),
    )
    cache = bool(opts.get("cache")) or max_size is not None or forget_missing or unregistered
    if keep is None and older is None and not cache:
        raise CliError(
            "gc needs --keep N and/or --older-than AGE, or --cache "
            f"(AGE: a number and a unit, {', '.join(AGE_UNITS)}; e.g. 30d)"
        )
    dry_run = bool(opts.get("dry_run"))
    config = resolve_cli_settings(opts)
    store = open_cli_journal(opts, read_only=True)
    try:
        every_run = store.list_runs()
        runs = [r for r in every_run if r.status is not RunStatus.RUNNING]
        bundles = {r.run_id: _bundle_of(store, r.run_id) for r in runs}
    finally:
        store.close()
    runs.sort(key=lambda r: r.started, reverse=True)
    now = datetime.now(UTC)
    doomed = []
    for index, summary in enumerate(runs):
        beyond_keep = keep is not None and index >= keep
        too_old = older is not None and now - summary.started > older
        if keep is None and older is None:
            continue  # --cache alone: every run is kept
        if (keep is None or beyond_keep) and (older is None or too_old):
            doomed.append(summary)
    # A gc killed mid-way left its run directories renamed to tombstones: finish them, in
    # the roots and wherever the journal recorded a run directory or bundle.
    recorded = [(r.run_id, r.run_dir) for r in every_run]
    recorded += [(run_id, path) for run_id, path in bundles.items() if path]
    homes = (recorded_run_parent(run_id, path) for run_id, path in recorded)
    removed = [
        path
        for root in dict.fromkeys((config.output_root, config.debug_root, *filter(None, homes)))
        for path in _finish_tombstones(root, dry_run)
    ]
    for summary in doomed:
        for path in (summary.run_dir, bundles.get(summary.run_id)):
            if path and _delete_child(path, summary.run_id, dry_run):
                removed.append(path)
    # Objects live beside the run directories: in each output root a removed run was in.
    output_roots = (recorded_run_parent(r.run_id, r.run_dir) for r in doomed)
    objects_removed = sum(
        _prune_output_objects(root, dry_run)
        for root in dict.fromkeys((config.output_root, *filter(None, output_roots)))
    )
    doc: dict[str, Any] = {
        "dry_run": dry_run,
        "runs": [r.run_id for r in doomed],
        "removed": removed,
        "objects_removed": objects_removed,
        "cache": None,  # the cache root's collection, with --cache
    }
    if cache:
        with open_cli_journal(opts, read_only=dry_run) as store:
            dropped = {r.run_id for r in doomed}
            doc["cache"] = collect_cache(
                store,
                config,
                dropped,
                max_size=max_size,
                dry_run=dry_run,
                forget_missing=forget_missing,
                include_unregistered=unregistered,
            )
    if opts.get("as_json"):
        emit_json(doc)
        return 0
    verb = "would remove" if dry_run else "removed"
    for path in removed:
        click.echo(f"{verb} {path}")
    if objects_removed:
        click.echo(f"removed {objects_removed} output object(s) no run directory links")
    if not removed and not objects_removed and not cache:
        click.echo("nothing to remove")
    if cache:
        echo_cache(doc["cache"])
    return 0


def _prune_output_objects(output_root: str, dry_run: bool) -> int:
    """Objects no run directory links any more (docs/operations.md "Retention and cleanup")."""
    if dry_run or not os.path.isdir(output_root):
        return 0
    try:
        with factories().open_root(output_root) as fs:
            return len(output_objects(fs).prune())
    except FsError as exc:
        raise CliError(f"cannot prune output objects: {exc}", ExitCode.FAILED) from None


def _bundle_of(store: JournalStore, run_id: str) -> str | None:
    try:
        for event in store.events(run_id):
            return getattr(event, "debug_bundle", None)
    except JournalError as exc:
        raise CliError(f"cannot read run {run_id}: {exc}", ExitCode.FAILED) from None
    return None


TOMBSTONE_PREFIX = ".rj-gc-"
"""A run directory being removed by `gc` is first renamed `<root>/.rj-gc-<run id>`."""


def _delete_child(path: str, run_id: str, dry_run: bool) -> bool:
    """Delete `path` only if the journal recorded it as `<dir>/<run id>` (docs/operations.md
    "Where a run lives"), wherever that is: the command's roots do not matter.

    The directory is renamed to its tombstone first (atomic), then the tombstone is
    removed: a gc killed in between leaves the run directory either whole or gone, and the
    next gc finishes the tombstone. A directory another gc removed meanwhile counts as
    removed.
    """
    root = recorded_run_parent(run_id, path)
    if root is None or not os.path.isdir(path):
        return False
    if dry_run:
        return True
    tombstone = TOMBSTONE_PREFIX + run_id
    try:
        with factories().open_root(root) as fs:
            try:
                fs.rename(run_id, tombstone)
            except FsNotFound:
                return True  # another gc got there first
            except AlreadyExists:
                fs.remove_tree(tombstone, missing_ok=True)  # a stale one of the same run
                fs.rename(run_id, tombstone)
            fs.remove_tree(tombstone, missing_ok=True)
    except FsNotFound:
        return True
    except FsError as exc:
        raise CliError(f"cannot remove {path}: {exc}", ExitCode.FAILED) from None
    return True


def _finish_tombstones(root: str, dry_run: bool) -> list[str]:
    """Remove the tombstones a killed gc left under `root`; their run paths, sorted."""
    if not os.path.isdir(root):
        return []
    finished = []
    try:
        with factories().open_root(root) as fs:
            for name in fs.listdir():
                run_id = name[len(TOMBSTONE_PREFIX) :]
                if not name.startswith(TOMBSTONE_PREFIX) or not is_valid_run_id(run_id):
                    continue
                if not dry_run:
                    fs.remove_tree(name, missing_ok=True)
                finished.append(os.path.join(root, run_id))
    except FsError as exc:
        raise CliError(f"cannot finish removing under {root}: {exc}", ExitCode.FAILED) from None
    return finished


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
        click.echo(f"wrote {pipeline}{written}; run it with: runjournal run {pipeline}")
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
