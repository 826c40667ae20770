"""The composition root: the only place that turns settings into physical collaborators.

Every adapter a command works with is made here, through `Factories` (docs/internals.md
"The command line (`cli/`)"): a command obtains them with `factories()`, and a test passes
its own (`CliRunner().invoke(cli, args, obj=Factories(open_root=...))`) to inject a fake,
in the spirit of cosmicpython's `bootstrap()`. Each root (output, cache, debug, the
directory of a SQLite journal) is opened once per invocation (`Roots`) and everything
beneath it works through that handle, so a root swapped for a symlink mid-run redirects
nothing (docs/internals.md "FsRoot").

It decides which collaborators exist (docs/internals.md "One run, phase by phase"): no chunk-plan
store in bypass mode, a checkpoint recorder only when recording is on, a loader only for a
`--resume` or `--recompute` invocation. Nothing here runs a stage.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click
from runjournal.adapters.cache_lock import CacheLock
from runjournal.adapters.checkpoints import CheckpointLoader, CheckpointRecorder, Workspace
from runjournal.adapters.chunkplans import ChunkPlanFileStore
from runjournal.adapters.debug_bundle.spans import JournalSpans
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.input_stats import InputStats
from runjournal.adapters.journal.journal_errors import JournalUnavailable
from runjournal.adapters.journal.url import (
    DEFAULT_CONNECT_TIMEOUT,
    SqliteLocation,
    parse_journal_url,
)
from runjournal.adapters.objects import OutputObjects
from runjournal.adapters.packed_store import PackedStore
from runjournal.adapters.profiles import ProfileRegistry
from runjournal.adapters.s3_store import (
    S3PackedStore,
    open_store,
    parse_s3_url,
    prepare_remote_cache,
)
from runjournal.adapters.sources import SourceFiles
from runjournal.adapters.stage_leases import BucketStageLeases, FileStageLeases
from runjournal.cli.parallel import CheckpointWritePool, JobPool
from runjournal.cli.progress import ProgressDisplay
from runjournal.cli.settings import EffectiveConfig
from runjournal.domain.decisions import CheckpointState, PredecessorState
from runjournal.domain.plan_keys import CacheMode
from runjournal.domain.ports import (
    CheckpointKey,
    LoadedCheckpoint,
    RestoredArtifact,
    TraceRecorder,
)
from runjournal.domain.redaction import safe_error_text
from runjournal.domain.runner import PipelineRunner
from runjournal.projections.debug_summary import DebugSummaryProjection
from runjournal.projections.manifest import ManifestProjection
from runjournal.projections.report import ReportProjection

if TYPE_CHECKING:
    from runjournal.adapters.cache_view import CacheView
    from runjournal.adapters.debug_bundle import DebugBundle
    from runjournal.adapters.journal import JournalStore
    from runjournal.adapters.projection_store import ProjectionStore
    from runjournal.adapters.run_dirs import RunDirs
    from runjournal.adapters.spool import FileSpool


def _llm_services(
    budget: Any,
    record: Any,
    replay: Any,
    text_trace: TraceRecorder | None,
    cache_dir: str | None = None,
    run_id: str | None = None,
    *,
    packed: PackedStore | None = None,
    mode: str | None = None,
    no_wait: bool = False,
    parking: Callable[[int], None] | None = None,
    journal: Any = None,
    prefetch_client: bool = True,
) -> Any:
    """The run's LLM runtime; imported here, when a step first needs it (not at start-up).
    With a cache root, its write-ahead replies (in the root's packed store) and intent
    log (docs/operations.md "LLM call log") and its batch records (docs/operations.md
    "Batch runs")."""
    from runjournal.adapters.llm.batch_records import BatchRecords
    from runjournal.adapters.llm.calllog import WriteAhead
    from runjournal.adapters.llm.runtime import LLMServices

    return LLMServices(
        budget=budget,
        record=record,
        replay=replay,
        text_trace=text_trace,
        wal=WriteAhead(cache_dir, run_id, packed),
        mode=mode,
        no_wait=no_wait,
        batches=BatchRecords(os.path.join(cache_dir, "llm", "batches") if cache_dir else None),
        batch_journal=journal,
        allow_parking=parking,
        prefetch_client=prefetch_client,
    )


def _open_journal(url: str, **kwargs: Any) -> JournalStore:
    """`open_journal`, imported when a command first opens a journal: eventsourcing is
    not loaded before (docs/performance.md "Start-up")."""
    from runjournal.adapters.journal.application import open_journal

    return open_journal(url, **kwargs)


def _executor(jobs: int, executor: str = "threads") -> Any:
    """The scheduler's executor for `--executor` (docs/operations.md "Executors"); only
    `threads` is loaded at start-up. Raises `ExecutorUnavailable` (a missing extra, a
    scheduler that cannot be reached)."""
    if executor == "threads":
        return JobPool(jobs)
    from runjournal.adapters.executors.offloading import OffloadingExecutor

    if executor == "processes":
        from runjournal.adapters.executors.processes import ProcessWorkers

        return OffloadingExecutor(ProcessWorkers(jobs), jobs)
    from runjournal.adapters.executors.dask_workers import DaskWorkers

    address = None if executor == "dask" else "tcp://" + executor.removeprefix("dask://")
    return OffloadingExecutor(DaskWorkers(jobs, address, open_cache=open_shared_cache), jobs)


def open_shared_cache(
    url: str, endpoint: str, pipeline: str, local_dir: str
) -> tuple[CheckpointRecorder, CheckpointLoader, S3PackedStore]:
    """A Dask worker's own recorder, loader and store of a bucket cache root, its
    read-through cache in `local_dir` (called in the worker process, once per bucket:
    docs/internals.md "Object-storage cache"). Its credentials are the worker's own."""
    local = FsRoot.open(local_dir, create=True)
    store = S3PackedStore(parse_s3_url(url), endpoint, local=local)
    workspace = Workspace.in_cache(local, pipeline, packed=store)
    return CheckpointRecorder(workspace), CheckpointLoader(workspace), store


# Test-only: the size of every directory-handle cache (`DirectoryHandles`), so a stress
# test can run a whole `run` subprocess with 1
# (docs/internals.md "Objects shared between threads"). Not a setting: users never need
# it, and it is not in the settings table.
DIR_HANDLES_ENV = "RJ_TEST_DIR_HANDLES"


def _dir_handles() -> int | None:
    """The directory-handle cache size `RJ_TEST_DIR_HANDLES` asks for; None: the default."""
    text = os.environ.get(DIR_HANDLES_ENV, "")
    return int(text) if text.isdigit() and int(text) > 0 else None


@dataclass(frozen=True)
class Factories:
    """How each adapter is made. The defaults are the real ones; a test replaces a field.

    `open_root(path, *, create=False) -> FsRoot` opens a trusted root (every root and every
    user-named directory a command writes to); `open_journal(url, *, read_only, timeout,
    directory)` opens a journal store; the rest build the run's collaborators.
    """

    open_root: Callable[..., FsRoot] = FsRoot.open
    open_journal: Callable[..., JournalStore] = _open_journal
    progress: Callable[..., ProgressDisplay] = ProgressDisplay
    executor: Callable[..., Any] = _executor  # (jobs, executor name)
    checkpoint_writes: Callable[..., CheckpointWritePool] = CheckpointWritePool
    runner: Callable[..., PipelineRunner] = PipelineRunner
    llm_services: Callable[..., Any] = _llm_services
    load_profiles: Callable[..., ProfileRegistry] = ProfileRegistry.load
    dir_handles: Callable[[], int | None] = _dir_handles  # cache size; None: each's default
    input_stats: Callable[..., InputStats] = InputStats  # (cache root, *, trust)
    source_files: Callable[[], SourceFiles] = SourceFiles  # a run's inputs, by path


DEFAULT_FACTORIES = Factories()


def factories() -> Factories:
    """The invocation's factories: the click context's `obj` when a test passed one."""
    ctx = click.get_current_context(silent=True)
    found = ctx.find_object(Factories) if ctx is not None else None
    return found if found is not None else DEFAULT_FACTORIES


# --- roots, opened once -----------------------------------------------------------------


@dataclass
class Roots:
    """The invocation's roots, each opened at most once, on first use, then kept open.

    A root that is never used is never opened (a run without `--debug` opens nothing under
    the debug root; a resolution error creates no output root that was not there).
    """

    config: EffectiveConfig
    made: Factories = field(default_factory=factories)
    _open: dict[str, FsRoot] = field(default_factory=dict)

    def _get(self, path: str, *, create: bool) -> FsRoot:
        key = os.path.abspath(path)
        root = self._open.get(key)
        if root is None:
            root = self.made.open_root(key, create=create)
            self._open[key] = root
        return root

    def opened(self, path: str) -> FsRoot | None:
        """The handle of `path` if this invocation opened it already."""
        return self._open.get(os.path.abspath(path))

    def output(self, *, create: bool = True) -> FsRoot:
        return self._get(self.config.output_root, create=create)

    def cache(self, *, create: bool) -> FsRoot:
        if self.config.cache_remote and self.opened(self.config.cache_root) is None:
            prepare_remote_cache(self.config, self.made.open_root)
            create = True
        return self._get(self.config.cache_root, create=create)

    def existing_cache(self) -> FsRoot | None:
        """The cache root if it exists (readers never create it; an `s3://` cache root
        exists in its bucket, and its local mirror directory is made for it)."""
        if self.config.cache_remote:
            return self.cache(create=True)
        if self.opened(self.config.cache_root) is None and not os.path.isdir(
            self.config.cache_root
        ):
            return None
        return self.cache(create=False)

    def debug(self) -> FsRoot:
        return self._get(self.config.debug_root, create=True)

    def directory(self, path: str, *, create: bool) -> FsRoot:
        """Any other trusted directory of this invocation (a SQLite journal's)."""
        return self._get(path, create=create)

    def close(self) -> None:
        for root in self._open.values():
            root.close()
        self._open.clear()


def run_dirs() -> RunDirs:
    """The directories holding run directories as the journal recorded them, opened
    through the factories (docs/operations.md "Where a run lives"); close it after use."""
    from runjournal.adapters.run_dirs import RunDirs

    return RunDirs(factories().open_root)


# --- the journal ------------------------------------------------------------------------


def journal_for(
    config: EffectiveConfig, *, read_only: bool = False, roots: Roots | None = None
) -> JournalStore:
    """The one way every command opens the journal its settings name.

    A SQLite journal is opened through its directory's handle (`roots`' when the command
    has them: the output root for the default `<output root>/journal.sqlite3`), so the
    database and its `-wal`/`-shm` files cannot be redirected (docs/internals.md
    "Backends"). Raises `JournalError`, or `FsError` for an unusable directory.
    """
    made = roots.made if roots is not None else factories()
    location = parse_journal_url(config.journal, connect_timeout=DEFAULT_CONNECT_TIMEOUT)
    if not isinstance(location, SqliteLocation):
        return _sealing(
            made.open_journal(config.journal, read_only=read_only, timeout=config.journal_timeout)
        )
    own = roots is None
    roots = roots or Roots(config, made)
    parent = os.path.dirname(location.path)
    try:
        try:
            directory = roots.directory(parent, create=not read_only)
        except (OSError, ValueError) as exc:
            raise JournalUnavailable(
                safe_error_text(f"cannot open journal {location.url}: {exc}")
            ) from None
        store = made.open_journal(
            config.journal,
            read_only=read_only,
            timeout=config.journal_timeout,
            directory=directory,
        )
    except BaseException:
        if own:
            roots.close()
        raise
    if own:
        store.on_close(roots.close)  # the directory stays open as long as the journal
    return _sealing(store)


def _sealing(store: JournalStore) -> JournalStore:
    """Runs this store ends are sealed with the user's key, if they made one
    (docs/operations.md "Signed checkpoints"); the key is read when first needed."""
    from runjournal.cli.keys_cmds import sealer

    store.use_sealer(sealer())
    return store


# --- the run's collaborators ------------------------------------------------------------


@dataclass
class Collaborators:
    """What one `run` invocation was wired with (tests assert on this directly)."""

    plan_store: ChunkPlanFileStore | None
    loader: CheckpointLoader | _EmptyLoader | None
    recorder: CheckpointRecorder | None
    cache_root: FsRoot | None
    workspace: Workspace | None = None
    roots: Roots | None = None  # closed with the collaborators when they own them
    lock: CacheLock | None = None  # the run's share of the cache root's lock
    # the cache root's packed store (or its bucket's, for s3://), which both use
    packed: PackedStore | S3PackedStore | None = None
    # reads back the run's own extract checkpoints for a streaming merge (docs/modules.md
    # "Streaming merge"): a loader of its own, whatever the run's lookups found
    parts: CheckpointLoader | None = None

    def close(self) -> None:
        if self.plan_store is not None:
            self.plan_store.close()  # its chunkplans/ directory handle
        if self.workspace is not None:
            self.workspace.close()
        if self.packed is not None:
            self.packed.close()
        if self.lock is not None:
            self.lock.close()
        if self.roots is not None:
            self.roots.close()


def workspace_dir(config: EffectiveConfig, pipeline: str) -> str:
    if config.cache_remote:
        return f"{config.cache_remote}/workspaces/{pipeline}"
    return os.path.join(config.cache_root, "workspaces", pipeline)


def build_collaborators(
    config: EffectiveConfig,
    *,
    pipeline: str,
    resume: bool,
    recompute: bool,
    roots: Roots | None = None,
) -> Collaborators:
    """The cache collaborators of one run, under the invocation's one cache-root handle.

    Without `roots` the collaborators own a `Roots` of their own (closed with them).
    """
    owned = roots is None
    roots = roots or Roots(config)
    mode = config.cache_mode
    wants_loader = resume or recompute
    needs_cache = mode is not CacheMode.BYPASS or config.checkpoints or wants_loader
    cache_root: FsRoot | None = None
    creates = False
    if needs_cache:
        # Only a writer creates the cache root; readers work on what exists.
        creates = config.checkpoints or mode in (CacheMode.USE, CacheMode.REFRESH)
        cache_root = roots.cache(create=True) if creates else roots.existing_cache()
    lock = _cache_lock(cache_root) if cache_root is not None else None
    if cache_root is not None and lock is not None and creates:
        _register(cache_root, lock, config.journal, pipeline)
    plan_store = None
    packed = open_store(cache_root) if cache_root is not None else None
    if mode is not CacheMode.BYPASS and cache_root is not None:
        plan_store = ChunkPlanFileStore.open_for_mode(cache_root, mode, packed=packed)
    elif mode is CacheMode.READ_ONLY:
        # Nothing to read yet: every lookup is "compute it", and nothing is ever written.
        plan_store = ChunkPlanFileStore(None, mode=mode)
    workspace = None
    if cache_root is not None:
        workspace = Workspace.in_cache(
            cache_root, pipeline, packed=packed, **_open_dirs(roots.made)
        )
    loader = CheckpointLoader(workspace) if wants_loader and workspace is not None else None
    recorder = CheckpointRecorder(workspace) if config.checkpoints and workspace else None
    if wants_loader and loader is None:
        loader = _EmptyLoader()
    return Collaborators(
        plan_store=plan_store,
        loader=loader,
        recorder=recorder,
        cache_root=cache_root,
        workspace=workspace,
        roots=roots if owned else None,
        lock=lock,
        packed=packed,
        # not for an s3:// cache: a part read back would be a request to the bucket
        parts=CheckpointLoader(workspace)
        if recorder is not None and workspace and not config.cache_remote
        else None,
    )


# How long a run waits for a `gc` that holds the cache root's lock (docs/operations.md
# "Retention and cleanup").
CACHE_LOCK_WAIT = 120.0


def _cache_lock(cache_root: FsRoot) -> CacheLock:
    """The run's shared lock on the cache root, so `gc` never collects under it.

    Raises CacheLockBusy after CACHE_LOCK_WAIT (a `gc` holding it that long).
    """
    return CacheLock.shared(cache_root, wait=CACHE_LOCK_WAIT)


def _register(cache_root: FsRoot, lock: CacheLock, journal: str, pipeline: str) -> None:
    """Record the run's journal in the cache root's registry, so a `gc --cache` of another
    project keeps what this one uses (docs/operations.md "Cache retention")."""
    from runjournal.adapters.cache_registry import register

    try:
        register(cache_root, journal, pipeline)
    except BaseException:
        lock.close()
        raise


def _open_dirs(made: Factories) -> dict[str, int]:
    """`open_dirs=` for an adapter's directory-handle cache when a test sets its size."""
    size = made.dir_handles()
    return {} if size is None else {"open_dirs": size}


def stage_leases(
    collab: Collaborators, run_id: str, wait: bool
) -> FileStageLeases | BucketStageLeases | None:
    """The run's stage leases (docs/operations.md "Concurrent runs"): a run that writes
    checkpoints leases the stages it executes (and waits for one only when it resumes);
    on an `s3://` cache root across machines too, through lease objects in the bucket."""
    workspace = collab.workspace
    if collab.cache_root is None or workspace is None or collab.recorder is None:
        return None
    local = FileStageLeases(collab.cache_root, workspace.pipeline, run_id, wait=wait)
    if isinstance(collab.packed, S3PackedStore):
        return BucketStageLeases(local, collab.packed, workspace.pipeline, run_id, wait=wait)
    return local


def output_objects(output_root: FsRoot) -> OutputObjects:
    """The output root's object store: outputs enter run directories as links to it
    (docs/internals.md "Run outputs as links")."""
    return OutputObjects(output_root, **_open_dirs(factories()))


def run_spool(output_root: FsRoot) -> FileSpool:
    """Where a run sets aside its artifacts and output files until P5 (adapters/spool.py)."""
    from runjournal.adapters.spool import FileSpool

    return FileSpool.open(output_root)


def cache_view(config: EffectiveConfig, pipeline: str) -> CacheView:
    """`plan`'s read-only view of the cache: nothing is created (no cache root, no
    workspace, no plan store directory); raises FsError for a root that cannot be opened."""
    from runjournal.adapters.cache_view import CacheView

    made = factories()
    if config.cache_remote:
        prepare_remote_cache(config, made.open_root)
    elif not os.path.isdir(config.cache_root):
        return CacheView()
    root = made.open_root(config.cache_root, create=False)
    packed = open_store(root)
    workspace = Workspace.in_cache(root, pipeline, packed=packed, **_open_dirs(made))
    plans = None
    # refresh recomputes every plan and bypass has no store: neither reads one.
    if config.cache_mode in (CacheMode.USE, CacheMode.READ_ONLY):
        plans = ChunkPlanFileStore.open_for_mode(root, CacheMode.READ_ONLY, packed=packed)
    return CacheView(root, workspace, CheckpointLoader(workspace), plans, packed)


@contextmanager
def checkpoint_reader(cache_root: FsRoot, pipeline: str) -> Iterator[CheckpointLoader]:
    """A read-only loader of `pipeline`'s workspace (the plain-run hint's look)."""
    packed = open_store(cache_root)
    workspace = Workspace.in_cache(cache_root, pipeline, packed=packed, **_open_dirs(factories()))
    try:
        yield CheckpointLoader(workspace)
    finally:
        workspace.close()
        packed.close()


def allocate_debug_bundle(
    open_debug_root: Callable[[], FsRoot], debug_root: str, run_id: str, *, trace: bool
) -> DebugBundle:
    """`<debug root>/<run id>/` under the invocation's one debug-root handle
    (`Roots.debug` in `run`); a root that cannot be opened is a `BundleAllocationError`."""
    from runjournal.adapters.debug_bundle.bundle import DebugBundle
    from runjournal.adapters.debug_bundle.bundle_failures import BundleAllocationError

    planned = os.path.join(os.path.abspath(debug_root), run_id)
    try:
        parent = open_debug_root()
    except (OSError, ValueError) as exc:
        raise BundleAllocationError(planned, str(exc), cleaned=True) from None
    return DebugBundle.allocate(parent, run_id, trace=trace)


@dataclass
class LiveViews:
    """The projections a run's journal session feeds as it records (docs/internals.md
    "Projections"): the manifest, the report (`report.json` and the counts of `--json`),
    the debug summary with `--debug`, and the trace spans."""

    manifest: ManifestProjection
    report: ReportProjection
    summary: DebugSummaryProjection | None
    spans: JournalSpans  # trace spans from the journal's events, once a trace exists


def live_views(config: EffectiveConfig) -> LiveViews:
    """The bundle's run/warnings/failure documents come from the debug-summary fold."""
    summary = DebugSummaryProjection() if config.debug_summary else None
    return LiveViews(
        manifest=ManifestProjection(),
        report=ReportProjection(),
        summary=summary,
        spans=JournalSpans(),
    )


def projection_store(
    store: JournalStore, config: EffectiveConfig, render: Any, render_streamed: Any = None
) -> ProjectionStore:
    """The materialised views of the journal, opened through the factories: beside a
    SQLite journal's file, in a PostgreSQL journal's own database (docs/internals.md
    "Where views live"); never in the current directory."""
    from runjournal.adapters.projection_store import STATE_DIR, ProjectionStore, state_dir_for

    location = parse_journal_url(config.journal, connect_timeout=DEFAULT_CONNECT_TIMEOUT)
    if isinstance(location, SqliteLocation):
        return ProjectionStore(
            store,
            os.path.dirname(location.path),
            render,
            open_root=factories().open_root,
            state_dir=state_dir_for(location.path),
            render_streamed=render_streamed,
        )
    table = store.views_table()
    if table is None:  # not a database with a schema: cannot happen for PostgreSQL
        raise RuntimeError(f"journal {store.url}: no database to keep its views in")
    return ProjectionStore(
        store,
        config.output_root,
        render,
        open_root=factories().open_root,
        state_dir=STATE_DIR,
        views_table=table,
        render_streamed=render_streamed,
    )


class _EmptyLoader:
    """A resume with no cache root yet: every scope is simply missing."""

    def load(self, key: CheckpointKey, codec_id: str) -> LoadedCheckpoint:
        return LoadedCheckpoint(state=CheckpointState.MISSING)

    def load_accepted_artifact(
        self, step: str, lane: str, lane_identity: str, codec_id: str
    ) -> RestoredArtifact:
        return RestoredArtifact(state=PredecessorState.MISSING)


# --- the run use-case's wiring ------------------------------------------------------------


def _checkpoint_writes(made: Factories) -> Callable[[Any, int], Any]:
    """A write pool for checkpoints with `--jobs` > 1 (cli/parallel.py); None otherwise."""
    from runjournal.cli.parallel import LOCAL_WRITE_THREADS, LOCAL_WRITE_WINDOW, MAX_WRITE_THREADS

    def writes(recorder: Any, jobs: int) -> Any:
        if recorder is None or jobs <= 1:
            return None
        if getattr(recorder, "writes_wait_on_network", True):
            return made.checkpoint_writes(recorder, min(jobs, MAX_WRITE_THREADS))
        # a local write is microseconds of disk: written in groups, by whoever waits for
        # them first (docs/internals.md "The scheduler (`scheduler.py`)")
        return made.checkpoint_writes(
            recorder, min(jobs, LOCAL_WRITE_THREADS), window=LOCAL_WRITE_WINDOW
        )

    return writes


def run_ports(made: Factories | None = None) -> Any:
    """What the run use-case (app/run_pipeline.py) is wired with: the one place its collaborators
    are chosen (docs/internals.md "The application layer (`app/`)")."""
    from runjournal.app.run_pipeline import RunPorts

    made = made or factories()
    return RunPorts(
        made=made,
        roots=lambda config: Roots(config, made),
        journal_for=journal_for,
        build_collaborators=build_collaborators,
        live_views=live_views,
        output_objects=output_objects,
        stage_leases=stage_leases,
        workspace_dir=workspace_dir,
        allocate_debug_bundle=allocate_debug_bundle,
        checkpoint_writes=_checkpoint_writes(made),
        checkpoint_reader=checkpoint_reader,
        write_run_report=_write_run_report,
        spool=run_spool,
    )


def _write_run_report(*args: Any) -> Any:
    """`--report`'s page, imported only when asked for (docs/performance.md "Start-up")."""
    from runjournal.cli.report_cmds import write_run_report

    return write_run_report(*args)


def plan_ports() -> Any:
    """What the plan use-case (app/plan.py) is wired with."""
    from runjournal.app.plan import PlanPorts

    return PlanPorts(load_profiles=factories().load_profiles, cache_view=cache_view)


def maintenance_ports() -> Any:
    """What the maintenance use-cases (app/rebuild_projections.py, app/collect_garbage.py,
    app/recover_runs.py, app/export_import.py) are wired with."""
    from runjournal.app.journals import MaintenancePorts
    from runjournal.cli.keys_cmds import export_signer
    from runjournal.cli.output import json_bytes, json_bytes_streamed

    made = factories()
    return MaintenancePorts(
        journal_for=journal_for,
        open_root=made.open_root,
        output_objects=output_objects,
        projection_store=lambda store, config: projection_store(
            store, config, json_bytes, json_bytes_streamed
        ),
        export_signer=export_signer,
    )
