"""Materialised projection views: where they live, whether they are stale, rebuilding them.

Views (all written atomically through `FsRoot`; see docs/internals.md "Projections"):

- `manifest`: `<run dir>/manifest.json` of every terminated run whose run directory
  exists where the journal recorded it (`RunDirs`); the file carries `projection: {name,
  version}` itself.
- `report`: `<run dir>/report.json` the same way, for succeeded runs only (a failed run
  has none, docs/operations.md "Layout").
- `html_report`: `<run dir>/report.html`, rewritten only where a run directory already
  has one (`run --report`, `report RUN`); the page names its projection version, run
  status and event count in `<meta>` tags (docs/operations.md "The HTML run report").
- per-run views (`reasons`, and `debug_summary` when that projection exists):
  `<views dir>/<state dir>/views/<name>.v<N>/<run id>.json`.
- journal-wide views (`runs_index`): `<views dir>/<state dir>/views/<name>.v<N>.json`.

The views dir is where the views live with their journal: a SQLite journal's own
directory, the state dir `.runjournal` (`.runjournal.<file name>` for a journal not named
`journal.sqlite3`), so views never land in the current directory (docs/internals.md
"Where views live"); a PostgreSQL journal's views are rows of its own database with the
same names (`adapters/journal/views_table.py`). `<state dir>/projections.json` records
which version of each non-manifest projection is materialised (the pointer). The
version is part of every storage name, so a full rebuild after a version bump writes v2
beside v1, switches the pointer, then removes v1.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
from eventsourcing.utils import get_topic
from runjournal.adapters.fsroot import FsError, FsNotFound, FsRoot
from runjournal.adapters.journal import JournalStore, RunSummary
from runjournal.adapters.journal.views_table import ViewsTable
from runjournal.adapters.run_dirs import RunDirs
from runjournal.domain.events import RunAllocated, RunEvent, RunStatus, RunTerminated
from runjournal.domain.names import is_valid_run_id
from runjournal.projections.base import Projection, fold, storage_name
from runjournal.projections.html_report import REPORT_HTML, HtmlReportProjection
from runjournal.projections.manifest import ManifestProjection
from runjournal.projections.reasons_report import ReasonReportProjection
from runjournal.projections.report import ReportProjection
from runjournal.projections.runs_index import RunsIndexProjection
from runjournal.projections.streamed import Streamed

__all__ = [
    "STATE_DIR",
    "STATE_FILE",
    "ProjectionSpec",
    "ProjectionStatus",
    "ProjectionStore",
    "RebuildResult",
    "UnknownProjection",
    "available_projections",
    "state_dir_for",
]

STATE_DIR: Final = ".runjournal"
STATE_FILE: Final = f"{STATE_DIR}/projections.json"
DEFAULT_JOURNAL_FILE: Final = "journal.sqlite3"


def state_dir_for(journal_file: str) -> str:
    """The state dir of the views of a SQLite journal file, beside it: `.runjournal` for
    the default name, `.runjournal.<name>` otherwise (two journals in one directory)."""
    name = os.path.basename(journal_file)
    return STATE_DIR if name == DEFAULT_JOURNAL_FILE else f"{STATE_DIR}.{name}"


MANIFEST_FILE: Final = "manifest.json"
REPORT_FILE: Final = "report.json"
STATE_FORMAT: Final = 1

Render = Callable[[Any], bytes]


class UnknownProjection(ValueError):
    """A projection name that is not one of `available_projections()`."""


class RunFileHead(msgspec.Struct, frozen=True, kw_only=True):
    """What a view file in a run directory says it was built from."""

    version: int
    status: str
    events: int | None = None


def _manifest_head(data: bytes) -> RunFileHead:
    doc = json.loads(data)
    return RunFileHead(version=int(doc["projection"]["version"]), status=str(doc["status"]))


def _report_head(data: bytes) -> RunFileHead:
    from runjournal.projections.html_render import read_report_head  # only when asked

    head = read_report_head(data)
    if head is None:
        raise ValueError("no projection head")
    version, status, events = head
    return RunFileHead(version=version, status=status, events=events)


def _report_bytes(view: Any) -> bytes:
    from runjournal.projections.html_render import render_report_html  # only when asked

    return render_report_html(view).encode("utf-8")


@dataclass(frozen=True)
class ProjectionSpec:
    """A projection class and where its views go (`per_run` or one journal-wide view).

    A `run_file` view is a file in each run directory (`manifest.json`, `report.html`),
    rendered by `render` (None: the store's JSON) and read back by `head`; with
    `existing_only` a rebuild rewrites the file where it exists and never adds one;
    `statuses` limits the view to runs that ended so (None: every terminated run).
    """

    cls: type[Any]
    per_run: bool
    run_file: str | None = None
    existing_only: bool = False
    render: Callable[[Any], bytes] | None = None
    head: Callable[[bytes], RunFileHead] | None = None
    statuses: frozenset[RunStatus] | None = None

    @property
    def name(self) -> str:
        return str(self.cls.NAME)

    @property
    def version(self) -> int:
        # Read at call time: a version bump (or a test's monkeypatch) shows at once.
        return int(self.cls.VERSION)

    def new(self) -> Projection:
        return self.cls()  # type: ignore[no-any-return]

    def storage(self, state_dir: str = STATE_DIR) -> str:
        """Storage of the current code version, relative to the views dir."""
        if self.run_file is not None:
            return f"<run dir>/{self.run_file}"
        suffix = "" if self.per_run else ".json"
        return f"{state_dir}/views/{storage_name(self.cls)}{suffix}"


def _debug_summary_spec() -> list[ProjectionSpec]:
    """The debug-summary projection, when `projections/debug_summary.py` provides one."""
    try:
        module = importlib.import_module("runjournal.projections.debug_summary")
    except ModuleNotFoundError:
        return []
    for value in vars(module).values():
        if (
            isinstance(value, type)
            and value.__module__ == module.__name__
            and isinstance(getattr(value, "NAME", None), str)
            and isinstance(getattr(value, "VERSION", None), int)
            and callable(getattr(value, "apply", None))
            and callable(getattr(value, "view", None))
        ):
            try:
                value()
            except TypeError:  # needs arguments: not a fold we can run on its own
                continue
            return [ProjectionSpec(value, per_run=True)]
    return []


def available_projections() -> list[ProjectionSpec]:
    return [
        ProjectionSpec(
            ManifestProjection, per_run=True, run_file=MANIFEST_FILE, head=_manifest_head
        ),
        ProjectionSpec(
            ReportProjection,
            per_run=True,
            run_file=REPORT_FILE,
            head=_manifest_head,  # the same head: `projection` and `status`
            statuses=frozenset({RunStatus.SUCCEEDED}),
        ),
        ProjectionSpec(ReasonReportProjection, per_run=True),
        *_debug_summary_spec(),
        ProjectionSpec(
            HtmlReportProjection,
            per_run=True,
            run_file=REPORT_HTML,
            existing_only=True,
            render=_report_bytes,
            head=_report_head,
        ),
        ProjectionSpec(RunsIndexProjection, per_run=False),
    ]


class ProjectionStatus(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    version: int
    scope: str
    storage: str
    materialised: list[int]
    views: int
    stale_views: int
    stale: bool
    reasons: list[str]


class RebuildResult(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    version: int
    storage: str
    written: int
    skipped: int
    replaced: int | None = None
    failures: list[str] = []


class _Pointer(msgspec.Struct, frozen=True, kw_only=True):
    version: int
    storage: str


class _State(msgspec.Struct, kw_only=True):
    format: int = STATE_FORMAT
    projections: dict[str, _Pointer] = {}


class _RunView(msgspec.Struct, frozen=True, kw_only=True):
    projection: dict[str, Any]
    run_id: str
    last_version: int
    view: dict[str, Any]


_state_decoder = msgspec.json.Decoder(_State)


class _RunViewHead(msgspec.Struct):
    """What `status` reads of a per-run view: the other fields (the view itself, which
    grows with the run) are skipped by the decoder, never built (docs/performance.md
    "Reading commands on a large run")."""

    last_version: int


_run_view_head = msgspec.json.Decoder(_RunViewHead)


class ProjectionStore:
    """Status and rebuild of the views of one journal: files in the run directories it
    recorded, and the state dir in `views_dir`."""

    def __init__(
        self,
        store: JournalStore,
        views_dir: str,
        render: Render,
        *,
        open_root: Callable[..., FsRoot],
        state_dir: str = STATE_DIR,
        views_table: ViewsTable | None = None,
        render_streamed: Callable[[Streamed], bytes] | None = None,
    ) -> None:
        """`open_root(path, *, create)` opens `views_dir` and the directories holding run
        directories (the composition root's factory, cli/compose.py), each once per
        status or rebuild. With `views_table` (a PostgreSQL journal) the state dir is
        rows of the journal's database instead, and `views_dir` is not used."""
        self._table = views_table
        self._store = store
        self._open = open_root
        self._views_dir = os.path.abspath(views_dir)
        self._state_dir = state_dir
        self._render = render
        # Renders a view a projection describes lazily (`streamed_view`), as `render`
        # would render it whole, without building it whole.
        self._render_streamed = render_streamed

    def _storage(self, spec: ProjectionSpec) -> str:
        return spec.storage(self._state_dir)

    # --- selection -------------------------------------------------------------------

    @staticmethod
    def select(name: str | None) -> list[ProjectionSpec]:
        specs = available_projections()
        if name is None:
            return specs
        chosen = [s for s in specs if s.name == name]
        if not chosen:
            known = ", ".join(s.name for s in specs)
            raise UnknownProjection(f"no projection named {name!r} (known: {known})")
        return chosen

    # --- status ----------------------------------------------------------------------

    def status(self, name: str | None = None) -> list[ProjectionStatus]:
        specs = self.select(name)
        runs = self._store.list_runs()
        root = self._open_root(create=False)
        try:
            with RunDirs(self._open) as dirs:
                state = self._load_state(root)
                out = []
                for spec in specs:
                    if spec.run_file is not None:
                        out.append(self._run_file_status(spec, runs, dirs))
                    elif spec.per_run:
                        out.append(self._per_run_status(spec, runs, root, state))
                    else:
                        out.append(self._journal_status(spec, root, state))
                return out
        finally:
            if root is not None:
                root.close()

    def _run_file_status(
        self, spec: ProjectionSpec, runs: Sequence[RunSummary], dirs: RunDirs
    ) -> ProjectionStatus:
        """Each run directory's file, against this code's version and the journal."""
        assert spec.run_file is not None and spec.head is not None
        noun = "manifest" if spec.cls is ManifestProjection else spec.run_file
        versions: set[int] = set()
        views = old = missing = behind = 0
        for run in runs:
            root = self._run_file_target(dirs, run, spec)
            if root is None:
                continue
            views += 1
            try:
                head = spec.head(root.read_bytes(f"{run.run_id}/{spec.run_file}"))
            except (FsError, ValueError, KeyError, TypeError):
                missing += 1
                continue
            versions.add(head.version)
            if head.version != spec.version:
                old += 1
            elif head.status != run.status.value or (
                head.events is not None and head.events < self._last_version(run.run_id)
            ):
                behind += 1
        reasons = []
        if old:
            reasons.append(f"{old} {noun}(s) built with another version than v{spec.version}")
        if missing:
            reasons.append(f"{missing} terminated run(s) have no readable {spec.run_file}")
        if behind:
            why = "miss newer events of their run" if spec.existing_only else "show another status"
            reasons.append(
                f"{behind} {noun}(s) {why}" + ("" if spec.existing_only else " than the journal")
            )
        stale_views = old + missing + behind
        return ProjectionStatus(
            name=spec.name,
            version=spec.version,
            scope="run",
            storage=self._storage(spec),
            materialised=sorted(versions),
            views=views,
            stale_views=stale_views,
            stale=stale_views > 0,
            reasons=reasons,
        )

    def _per_run_status(
        self,
        spec: ProjectionSpec,
        runs: Sequence[RunSummary],
        root: FsRoot | None,
        state: _State,
    ) -> ProjectionStatus:
        pointer = state.projections.get(spec.name)
        ids = [r.run_id for r in runs if is_valid_run_id(r.run_id)]
        if pointer is None or root is None:
            return self._not_materialised(spec, "run", len(ids))
        reasons = []
        if pointer.version != spec.version:
            reasons.append(f"materialised v{pointer.version}, the code is v{spec.version}")
        try:
            present = set(root.listdir(pointer.storage))
        except FsError:
            present = set()
        missing = behind = 0
        for run_id in ids:
            if f"{run_id}.json" not in present:
                missing += 1
                continue
            try:
                head = _run_view_head.decode(root.read_bytes(f"{pointer.storage}/{run_id}.json"))
                built_from = head.last_version
            except (FsError, msgspec.DecodeError):  # a ValidationError is a DecodeError
                missing += 1
                continue
            if built_from < self._last_version(run_id):
                behind += 1
        if missing:
            reasons.append(f"{missing} run(s) have no view")
        if behind:
            reasons.append(f"{behind} view(s) miss newer events of their run")
        stale_views = len(ids) if pointer.version != spec.version else missing + behind
        return ProjectionStatus(
            name=spec.name,
            version=spec.version,
            scope="run",
            storage=pointer.storage,
            materialised=[pointer.version],
            views=len(ids) - missing,
            stale_views=stale_views,
            stale=bool(reasons),
            reasons=reasons,
        )

    def _journal_status(
        self, spec: ProjectionSpec, root: FsRoot | None, state: _State
    ) -> ProjectionStatus:
        pointer = state.projections.get(spec.name)
        if pointer is None or root is None:
            return self._not_materialised(spec, "journal", 1)
        reasons = []
        if pointer.version != spec.version:
            reasons.append(f"materialised v{pointer.version}, the code is v{spec.version}")
        try:
            stored = json.loads(root.read_bytes(pointer.storage))["view"]
        except (FsError, ValueError, KeyError, TypeError):
            reasons.append("the view file is missing or unreadable")
        else:
            if pointer.version == spec.version and stored != self._journal_view(spec):
                reasons.append("the journal has runs or terminations the view does not show")
        return ProjectionStatus(
            name=spec.name,
            version=spec.version,
            scope="journal",
            storage=pointer.storage,
            materialised=[pointer.version],
            views=1,
            stale_views=1 if reasons else 0,
            stale=bool(reasons),
            reasons=reasons,
        )

    def _not_materialised(self, spec: ProjectionSpec, scope: str, views: int) -> ProjectionStatus:
        return ProjectionStatus(
            name=spec.name,
            version=spec.version,
            scope=scope,
            storage=self._storage(spec),
            materialised=[],
            views=0,
            stale_views=views,
            stale=views > 0,
            reasons=["not materialised"] if views else [],
        )

    # --- rebuild ---------------------------------------------------------------------

    def rebuild(self, name: str | None = None, run_id: str | None = None) -> list[RebuildResult]:
        """Rebuild views from the journal; `run_id` limits per-run projections to one run."""
        specs = self.select(name)
        if run_id is not None and name is not None and not specs[0].per_run:
            raise UnknownProjection(f"{name} is one view of every run: --run does not apply")
        runs = self._store.list_runs()
        if run_id is not None:
            runs = [r for r in runs if r.run_id == run_id]
        root = self._open_root(create=True)
        assert root is not None
        try:
            state = self._load_state(root)
            per_run = [s for s in specs if s.per_run]
            builders = {s.name: _Builder(s, self._storage(s)) for s in per_run}
            with RunDirs(self._open) as dirs:
                for run in runs:
                    self._rebuild_run(run, per_run, builders, root, dirs)
            results = []
            for spec in per_run:
                builder = builders[spec.name]
                if spec.run_file is None and not builder.failures:
                    builder.replaced = self._switch(root, state, spec, full=run_id is None)
                results.append(builder.result())
            for spec in specs:
                if not spec.per_run:
                    results.append(self._rebuild_journal_view(root, state, spec))
            self._save_state(root, state)
            return results
        finally:
            root.close()

    def _rebuild_run(
        self,
        run: RunSummary,
        specs: Sequence[ProjectionSpec],
        builders: dict[str, _Builder],
        root: FsRoot,
        dirs: RunDirs,
    ) -> None:
        """`root` holds the state dir; a run-directory file goes where the run lives."""
        targets = {
            s.name: self._run_file_target(dirs, run, s) for s in specs if s.run_file is not None
        }
        wanted = [
            s
            for s in specs
            if (
                targets[s.name] is not None
                if s.run_file is not None
                else is_valid_run_id(run.run_id)
            )
        ]
        for spec in specs:
            if spec not in wanted:
                builders[spec.name].skipped += 1
        if not wanted:
            return
        # One pass over the run's events feeding every fold: the events are never held
        # (docs/performance.md "Reading commands on a large run").
        folds = [spec.new() for spec in wanted]
        last_version = 0
        for event in self._store.projected_events(run.run_id):
            for projection in folds:
                projection.apply(event)
            last_version = event.originator_version
        for spec, projection in zip(wanted, folds, strict=True):
            builder = builders[spec.name]
            into = root
            if spec.run_file is not None:
                into = targets[spec.name] or root
                target = f"{run.run_id}/{spec.run_file}"
                data = (spec.render or self._render)(projection.view())
            else:
                target = f"{builder.storage}/{run.run_id}.json"
                head = {
                    "projection": {"name": spec.name, "version": spec.version},
                    "run_id": run.run_id,
                    "last_version": last_version,
                }
                lazy = getattr(projection, "streamed_view", None)
                if lazy is not None and self._render_streamed is not None:
                    data = self._render_streamed(Streamed({**head, "view": lazy()}))
                else:
                    data = self._render(_RunView(**head, view=projection.view()))
            try:
                into.write_bytes(target, data, overwrite=True)
            except FsError as exc:
                builder.failures.append(f"{spec.name} of run {run.run_id}: {exc}")
            else:
                builder.written += 1

    def _switch(
        self, root: FsRoot, state: _State, spec: ProjectionSpec, *, full: bool
    ) -> int | None:
        """Point the state at the new version; a full rebuild removes the old storage."""
        previous = state.projections.get(spec.name)
        if previous is not None and previous.version != spec.version and not full:
            return None  # a one-run rebuild never replaces a whole older view
        state.projections[spec.name] = _Pointer(version=spec.version, storage=self._storage(spec))
        if previous is None or previous.storage == self._storage(spec):
            return None
        self._save_state(root, state)  # the pointer moves before v1 is removed
        # An orphaned old view is harmless: nothing points at it any more.
        with contextlib.suppress(FsError):
            root.remove_tree(previous.storage, missing_ok=True)
        return previous.version

    def _rebuild_journal_view(
        self, root: FsRoot, state: _State, spec: ProjectionSpec
    ) -> RebuildResult:
        view = self._journal_view(spec)
        data = self._render(
            {"projection": {"name": spec.name, "version": spec.version}, "view": view}
        )
        failures = []
        try:
            root.write_bytes(self._storage(spec), data, overwrite=True)
        except FsError as exc:
            failures.append(f"{spec.name}: {exc}")
            return RebuildResult(
                name=spec.name,
                version=spec.version,
                storage=self._storage(spec),
                written=0,
                skipped=0,
                failures=failures,
            )
        replaced = self._switch(root, state, spec, full=True)
        return RebuildResult(
            name=spec.name,
            version=spec.version,
            storage=self._storage(spec),
            written=1,
            skipped=0,
            replaced=replaced,
        )

    # --- helpers ---------------------------------------------------------------------

    def _journal_view(self, spec: ProjectionSpec) -> dict[str, Any]:
        """Journal-wide folds read only run allocations and terminations."""
        events: Iterable[RunEvent] = (e for _, e in self._store.notifications(0, _SUMMARY_TOPICS))
        return fold(spec.new(), events).view()

    def _last_version(self, run_id: str) -> int:
        return self._store.last_version(run_id)

    def _run_file_target(
        self, dirs: RunDirs, run: RunSummary, spec: ProjectionSpec
    ) -> FsRoot | None:
        """The directory holding the run's directory, when the run gets this view there.

        A run-directory view is terminal: only terminated runs whose directory exists
        where the journal recorded it have one; an `existing_only` view only where its
        file is already there.
        """
        if run.status is RunStatus.RUNNING or (
            spec.statuses is not None and run.status not in spec.statuses
        ):
            return None
        root = dirs.holding(run.run_id, run.run_dir)
        if root is None or not spec.existing_only:
            return root
        try:
            return root if root.exists(f"{run.run_id}/{spec.run_file}") else None
        except FsError:
            return None

    def _open_root(self, *, create: bool) -> Any:
        """The views dir (an `FsRoot`), or the journal's views table; None when a read
        finds neither (a read never creates one)."""
        if self._table is not None:
            if create:
                return self._table
            try:
                return self._table if self._table.exists_table() else None
            except FsError:
                return None
        if not create and not os.path.isdir(self._views_dir):
            return None
        return self._open(self._views_dir, create=create)

    def _load_state(self, root: FsRoot | None) -> _State:
        if root is None:
            return _State()
        try:
            return _state_decoder.decode(root.read_bytes(self._state_file))
        except FsNotFound:
            return _State()
        except (FsError, msgspec.DecodeError, msgspec.ValidationError):
            return _State()  # unreadable state: everything shows as not materialised

    @property
    def _state_file(self) -> str:
        return f"{self._state_dir}/projections.json"

    def _save_state(self, root: FsRoot, state: _State) -> None:
        root.write_bytes(self._state_file, self._render(msgspec.to_builtins(state)), overwrite=True)


@dataclass
class _Builder:
    spec: ProjectionSpec
    storage: str
    written: int = 0
    skipped: int = 0
    replaced: int | None = None
    failures: list[str] = field(default_factory=list)

    def result(self) -> RebuildResult:
        return RebuildResult(
            name=self.spec.name,
            version=self.spec.version,
            storage=self.storage,
            written=self.written,
            skipped=self.skipped,
            replaced=self.replaced,
            failures=list(self.failures),
        )


_SUMMARY_TOPICS: Final = [get_topic(RunAllocated), get_topic(RunTerminated)]
