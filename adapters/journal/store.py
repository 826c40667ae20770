"""`JournalStore`: the journal as the CLI sees it, sessions for new events and queries.

See docs/internals.md "Queries" for what each query reads.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Final, TypeVar
from uuid import UUID

import msgspec
from eventsourcing.application import Application
from eventsourcing.persistence import IntegrityError, PersistenceError, StoredEvent
from runjournal.adapters.journal.bounded import TimedOut, call_bounded
from runjournal.adapters.journal.chain import ChainReport, genesis, verify_chain
from runjournal.adapters.journal.codec import EventMapper, event_type_for_topic
from runjournal.adapters.journal.delta import DELTA_TOPIC, PACKABLE
from runjournal.adapters.journal.journal_errors import (
    AmbiguousRun,
    JournalCorrupt,
    JournalError,
    JournalUnavailable,
    RunAlreadyExists,
    RunNotFound,
    describe,
    one_line,
)
from runjournal.adapters.journal.reuse import (
    BlockIndex,
    SourceIndex,
    expand_blocks,
    expand_summaries,
)
from runjournal.adapters.journal.runs_table import RunsTable, save_if_current
from runjournal.adapters.journal.sealer import Sealer, frontier_of, note_for
from runjournal.adapters.journal.session import Committed, RunSession
from runjournal.adapters.journal.views_table import ViewsTable
from runjournal.domain.events import (
    RunAllocated,
    RunEvent,
    RunSealed,
    RunStatus,
    RunTerminated,
    SealReason,
)
from runjournal.domain.merkle import Frontier
from runjournal.domain.run import JournalInvariantError, Run, run_aggregate_id
from runjournal.domain.seal import seal_aggregate_id

__all__ = ["JournalStore", "RunSummary"]

_STORAGE_ERRORS: Final = (PersistenceError, sqlite3.Error, OSError)
_T = TypeVar("_T")


class RunSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One run as `runs list` shows it (from its RunAllocated and RunTerminated only)."""

    run_id: str
    pipeline: str
    status: RunStatus
    started: datetime
    ended: datetime | None = None
    run_dir: str
    pid: int
    host: str
    process_start: float


# The named run references every command accepts where it takes RUN, and what each
# means (docs/operations.md "Run references"); the output root's `latest-ok` link
# follows the same run as the `latest-ok` reference.
RUN_REFS: Final = {
    "latest": "the most recently started run, whatever its status",
    "latest-ok": "the most recently started run that succeeded",
    "latest-failed": "the most recently started run that failed or was interrupted",
    "previous": "the run started just before `latest`",
}


def _named_run(runs: Sequence[RunSummary], ref: str) -> str:
    """The run a RUN_REFS name stands for, or RunNotFound saying why there is none."""
    newest_first = [
        r for _, r in sorted(enumerate(runs), key=lambda ir: (ir[1].started, ir[0]), reverse=True)
    ]
    if ref == "latest-ok":
        newest_first = [r for r in newest_first if r.status is RunStatus.SUCCEEDED]
    elif ref == "latest-failed":
        failed = (RunStatus.FAILED, RunStatus.INTERRUPTED, RunStatus.ABANDONED)
        newest_first = [r for r in newest_first if r.status in failed]
    elif ref == "previous":
        newest_first = newest_first[1:]
    if not newest_first:
        if not runs:
            raise RunNotFound("no runs in the journal")
        raise RunNotFound(f"no run is {ref!r} ({RUN_REFS[ref]})")
    return newest_first[0].run_id


_PAGE: Final = 500
EVENT_PAGE: Final = 1000  # versions (events) per read of one run's rows (`events`)


class JournalStore:
    """The journal as the CLI sees it: sessions for new events, queries over runs."""

    def __init__(
        self,
        app: Application[UUID],
        url: str,
        *,
        secrets: Sequence[str] = (),
        timeout: float | None = None,
        read_only: bool = False,
    ) -> None:
        self._app = app
        self._read_only = read_only  # a SQLite journal opened mode=ro: the index is not saved
        self._timeout = timeout  # PostgreSQL: journal_timeout; None runs calls inline
        self._dead: str | None = None  # set once a call timed out: later calls fail at once
        self._url = url
        self._secrets = tuple(s for s in secrets if s)
        self._on_close: list[Callable[[], None]] = []
        self._mapper: EventMapper = app.mapper  # type: ignore[assignment]
        self._summary_topics = [
            self._mapper.codec_for(RunAllocated).topic,
            self._mapper.codec_for(RunTerminated).topic,
        ]
        self._runs: dict[UUID, RunSummary] = {}
        # The runs index table (docs/internals.md "The runs index table"): loaded once,
        # `_index_base` is the position it was at, `_dirty` the runs changed since.
        datastore = getattr(app.recorder, "datastore", None)
        self._table: RunsTable | None = (
            RunsTable(datastore, schema=getattr(datastore, "schema", None))
            if datastore is not None
            else None
        )
        self._index_loaded = False
        self._index_base = 0
        self._allocated: dict[UUID, int] = {}
        self._dirty: set[UUID] = set()
        self.runs_index_reads = 0  # events `list_runs` read from the log (tests count them)
        self._heads: dict[UUID, tuple[int, bytes | None]] = {}  # last link written per run
        # Each run's Merkle tree as written by this store (last version, frontier), so a
        # seal needs no read back; and the runs whose terminal event is in (docs/
        # operations.md "Signed checkpoints"): every later write of theirs seals again.
        self._frontiers: dict[UUID, tuple[int, Frontier]] = {}
        self._ended: dict[UUID, str] = {}
        self._run_ids: dict[UUID, str] = {}
        self._sealer = Sealer()
        self.seal_errors: list[str] = []  # seals that could not be made (the CLI says so)
        self._position = 0
        self._closed = False

    def views_table(self) -> ViewsTable | None:
        """A PostgreSQL journal's views table, in its schema (docs/internals.md "Where
        views live"); None for SQLite, whose views live beside its file."""
        datastore = getattr(self._app.recorder, "datastore", None)
        schema = getattr(datastore, "schema", None)
        return ViewsTable(datastore, schema=schema) if schema else None

    @property
    def url(self) -> str:
        """The journal URL with any password redacted."""
        return self._url

    def _storage(self, doing: str, call: Callable[[], _T]) -> _T:
        """One call into the library's recorder: errors as `JournalError`, time bounded."""
        if self._dead is not None:
            raise JournalUnavailable(self._dead)
        try:
            return call_bounded(call, self._timeout)
        except TimedOut as exc:
            self._dead = one_line(
                f"journal {self._url}: {doing}: PostgreSQL did not answer within "
                f"{exc.seconds:g} s (journal_timeout); the journal is not used again"
            )
            raise JournalUnavailable(self._dead) from None
        except _STORAGE_ERRORS as exc:
            raise self._error(doing, exc) from exc

    def _error(self, doing: str, exc: BaseException) -> JournalError:
        text = one_line(f"journal {self._url}: {doing}: {describe(exc, self._secrets)}")
        if isinstance(exc, IntegrityError):
            return RunAlreadyExists(text)
        return JournalUnavailable(text)

    # -- writing --------------------------------------------------------------------

    def session(
        self,
        run: Run,
        *,
        batch_size: int = 256,
        listeners: Sequence[Callable[[RunEvent], None]] = (),
        before_commit: Callable[[], None] | None = None,
        behind: bool = False,
        reuse_sources: SourceIndex | None = None,
        committed: Committed | None = None,
        block_sources: BlockIndex | None = None,
    ) -> RunSession:
        """The `RunRecorder` of `run`; commits what the run already has pending at once."""
        return RunSession(
            self._put,
            run,
            batch_size=batch_size,
            listeners=listeners,
            before_commit=before_commit,
            behind=behind,
            reuse_sources=reuse_sources,
            committed=committed,
            block_sources=block_sources,
        )

    def _put(self, events: Sequence[RunEvent], *, seal: bool = True) -> None:
        """Store events of one run in one transaction, each linked to its predecessor.

        A run recorded before the chain existed stays unchained (docs/internals.md "The
        journal's hash chain").
        """
        if not events:
            return
        first = events[0]
        previous = self._link_before(first.originator_id, first.originator_version)
        try:
            rows, previous = self._mapper.to_stored_rows(events, previous)
        except (msgspec.EncodeError, TypeError, ValueError) as exc:
            raise JournalError(
                one_line(f"an event does not encode: {describe(exc, self._secrets)}")
            ) from exc
        insert = self._app.recorder.insert_events
        self._storage(f"cannot record {len(events)} event(s)", lambda: insert(rows))
        aggregate, last = first.originator_id, events[-1].originator_version
        self._heads[aggregate] = (last, previous)
        self._grow_tree(aggregate, events)
        ended = False
        for event in events:
            if isinstance(event, RunAllocated):
                self._run_ids[aggregate] = event.run_id
            ended = ended or isinstance(event, RunTerminated)
        if ended or any(isinstance(e, RunAllocated) for e in events):
            self._index_new_events()
        if seal and (ended or aggregate in self._ended):
            self._seal_ended(aggregate)

    def _grow_tree(self, aggregate: UUID, events: Sequence[RunEvent]) -> None:
        """Append the events just written to the run's tree, when it is known from event 1."""
        first = events[0].originator_version
        cached = self._frontiers.pop(aggregate, None)
        if first <= 1:
            frontier = Frontier()
        elif cached is not None and cached[0] == first - 1:
            frontier = cached[1]
        else:
            return  # events before these were written elsewhere: read back when sealing
        leaf = self._mapper.leaf
        for event in events:
            frontier.append(leaf(event))
        self._frontiers[aggregate] = (events[-1].originator_version, frontier)

    def use_sealer(self, sealer: Sealer) -> None:
        """Seal runs with `sealer`'s key (cli/compose.py wires the user's)."""
        self._sealer = sealer

    def _seal_ended(self, aggregate: UUID) -> None:
        """After a run's terminal event (or a write after it) committed: seal it.

        Never fails the write that triggered it: a seal that cannot be made is noted in
        `seal_errors`, and `journal audit` reports the run as unsealed or tampered.
        """
        run_id = self._ended.get(aggregate) or self._run_ids.get(aggregate)
        if run_id is None:
            summary = self._runs.get(aggregate)
            run_id = summary.run_id if summary is not None else None
        if run_id is None:
            self.seal_errors.append(f"cannot seal run {aggregate}: its allocation is unknown")
            return
        self._ended[aggregate] = run_id
        try:
            self.seal(run_id, SealReason.TERMINATED)
        except Exception as exc:  # a seal is evidence, never a reason to lose the run
            self.seal_errors.append(
                one_line(f"cannot seal run {run_id}: {describe(exc, self._secrets)}")
            )

    def seal(self, run_id: str, reason: SealReason) -> RunSealed | None:
        """Record a checkpoint of the run's tree as it is now (None for a run with no events)."""
        aggregate = run_aggregate_id(run_id)
        last = self.last_version(run_id)
        cached = self._frontiers.get(aggregate)
        if cached is not None and cached[0] == last:
            frontier = cached[1]
        else:
            leaves = self.tree_leaves(run_id)
            if not leaves:
                return None
            frontier = frontier_of(leaves)
            self._frontiers[aggregate] = (last, frontier)
        root, signer = frontier.root(), self._sealer.signer
        return self.add_seal(
            run_id,
            size=frontier.size,
            root=root.hex(),
            note=note_for(run_id, frontier.size, root, signer),
            key=signer.verifier.text() if signer is not None else None,
            reason=reason,
        )

    def add_seal(
        self, run_id: str, *, size: int, root: str, note: str, key: str | None, reason: SealReason
    ) -> RunSealed:
        """Append a seal to the run's seal aggregate (a new one, or one an export carried)."""
        seal_id = seal_aggregate_id(run_id)
        select = self._app.recorder.select_events
        newest = self._storage(
            f"cannot read the seals of run {run_id!r}",
            lambda: select(seal_id, desc=True, limit=1),
        )
        event = RunSealed(
            originator_id=seal_id,
            originator_version=newest[0].originator_version + 1 if newest else 1,
            timestamp=_utc_now(),
            run_id=run_id,
            size=size,
            root=root,
            note=note,
            key=key,
            reason=reason,
        )
        self._put([event], seal=False)
        return event

    def seals(self, run_id: str) -> list[RunSealed]:
        """The run's seals, oldest first."""
        select, seal_id = self._app.recorder.select_events, seal_aggregate_id(run_id)
        rows = self._storage(f"cannot read the seals of run {run_id!r}", lambda: select(seal_id))
        found: list[RunSealed] = []
        for row in rows:
            found.extend(e for e in self._mapper.to_domain_events(row) if isinstance(e, RunSealed))
        return found

    def tree_leaves(self, run_id: str) -> list[bytes]:
        """The leaves of the run's Merkle tree, one per event, in order."""
        leaf = self._mapper.leaf
        return [leaf(event) for event in self.events(run_id)]

    def _index_new_events(self) -> None:
        """After a run's allocation or termination is committed, bring the runs index up
        to date, so readers find nothing new to read; never fails the write."""
        with contextlib.suppress(JournalError):
            self.list_runs()

    def _link_before(self, aggregate_id: UUID, version: int) -> bytes | None:
        """The link the event at `version` chains to; None for a run recorded unchained."""
        if version <= 1:
            return genesis(aggregate_id)
        cached = self._heads.get(aggregate_id)
        if cached is not None and cached[0] == version - 1:
            return cached[1]
        select = self._app.recorder.select_events
        rows = self._storage(
            f"cannot read event {version - 1} of {aggregate_id}",
            lambda: select(aggregate_id, gt=version - 2, lte=version - 1),
        )
        if not rows:
            return None
        try:
            return self._mapper.split_state(bytes(rows[0].state))[2]
        except (JournalCorrupt, ValueError, TypeError, IndexError) as exc:
            raise JournalCorrupt(
                one_line(f"event {version - 1} of {aggregate_id} does not decode: {exc}")
            ) from exc

    def record_maintenance(self, event: RunEvent) -> None:
        """Store the one event of a maintenance aggregate (a `gc`'s `CacheCollected`):
        version 1, chained from its genesis, outside every run."""
        if event.originator_version != 1:
            raise JournalError("a maintenance event is the first and only one of its aggregate")
        self._put([event])

    def verify_chain(self, run_id: str) -> ChainReport:
        """Recompute the hash chain of the run's stored rows (docs/internals.md)."""
        aggregate_id = run_aggregate_id(run_id)
        return verify_chain(self._rows(run_id), aggregate_id, self._mapper)

    def _rows(self, run_id: str) -> Iterator[StoredEvent]:
        """The run's stored rows in version order, about `EVENT_PAGE` events at a time.

        Paged by versions, not rows: a delta row holds up to 4,096 events
        (docs/internals.md "Delta rows"), so a page of rows would not be bounded.
        """
        select, aggregate_id = self._app.recorder.select_events, run_aggregate_id(run_id)
        after = 0
        while True:
            page = self._storage(
                f"cannot read run {run_id!r}",
                functools.partial(select, aggregate_id, gt=after, lte=after + EVENT_PAGE),
            )
            if not page:  # the end, or one row of more than a page of events
                page = self._storage(
                    f"cannot read run {run_id!r}",
                    functools.partial(select, aggregate_id, gt=after, limit=1),
                )
                if not page:
                    return
            yield from page
            after = page[-1].originator_version

    def append_events(
        self, run_id: str, events: Sequence[RunEvent], *, batch: int | None = None
    ) -> None:
        """Append already-built events of one run (journal import), checked by replay.

        The run's stored events and the new ones are replayed once, then appended in
        transactions of `batch` events (all at once without it): an import appending in
        batches replays the run once, not once per batch (docs/performance.md "Reading
        commands on a large run").
        """
        if not events:
            return
        aggregate_id = run_aggregate_id(run_id)
        run = Run(aggregate_id)
        try:
            for event in self.events(run_id):
                run.apply(event)
            if run.version and events[0].originator_version <= run.version:
                raise RunAlreadyExists(
                    one_line(f"run {run_id!r} already has events up to {run.version}")
                )
            for event in events:
                if event.originator_id != aggregate_id:
                    raise JournalError(
                        one_line(f"event {event.originator_version} is not of run {run_id!r}")
                    )
                if isinstance(event, RunAllocated) and event.run_id != run_id:
                    raise JournalError(one_line(f"RunAllocated names run {event.run_id!r}"))
                run.apply(event)
        except JournalInvariantError as exc:
            raise JournalError(
                one_line(f"events of run {run_id!r} are not a valid sequence: {exc}")
            ) from exc
        size = batch or len(events)
        for start in range(0, len(events), size):
            self._put(events[start : start + size], seal=False)  # its seals come with it

    def append_stream(self, run_id: str, events: Iterable[RunEvent], *, batch: int) -> None:
        """`append_events` for events read one by one (a streamed import).

        The stored run is replayed once; each batch is checked by the same replay and
        committed before the next is read, so memory holds one batch. A stream that
        fails part way leaves whole batches committed, which importing the same file
        again completes.
        """
        aggregate_id = run_aggregate_id(run_id)
        run = Run(aggregate_id)
        pending: list[RunEvent] = []
        try:
            for event in self.events(run_id):
                run.apply(event)
            stored = run.version
            for event in events:
                if not pending and event.originator_version <= stored:
                    raise RunAlreadyExists(
                        one_line(f"run {run_id!r} already has events up to {stored}")
                    )
                if event.originator_id != aggregate_id:
                    raise JournalError(
                        one_line(f"event {event.originator_version} is not of run {run_id!r}")
                    )
                if isinstance(event, RunAllocated) and event.run_id != run_id:
                    raise JournalError(one_line(f"RunAllocated names run {event.run_id!r}"))
                run.apply(event)
                pending.append(event)
                if len(pending) >= batch:
                    self._put(pending, seal=False)
                    stored, pending = pending[-1].originator_version, []
        except JournalInvariantError as exc:
            raise JournalError(
                one_line(f"events of run {run_id!r} are not a valid sequence: {exc}")
            ) from exc
        self._put(pending, seal=False)

    # -- reading --------------------------------------------------------------------

    def events(self, run_id: str) -> Iterator[RunEvent]:
        """The run's events in order, decoded and upcast (nothing for an unknown run).

        Read in pages of about `EVENT_PAGE` events, so a reader that streams (`journal show
        --jsonl`) holds one page at a time however long the run is.
        """
        to_events = self._mapper.to_domain_events
        for row in self._rows(run_id):
            yield from to_events(row)

    def projected_events(self, run_id: str) -> Iterator[RunEvent]:
        """The run's events as every projection and the audit read them: each
        `LaneReused` followed by the `StageDecided` it stands for, read from the run it
        names and checked against its digest (docs/internals.md "Reuse summaries")."""
        return expand_blocks(
            expand_summaries(self.events(run_id), self.events), self._lanes_expanded
        )

    def _lanes_expanded(self, run_id: str) -> Iterator[RunEvent]:
        """A block summary's source: its events with each `LaneReused` expanded."""
        return expand_summaries(self.events(run_id), self.events)

    def block_sources(self, run_id: str, pipeline: str) -> BlockIndex:
        """Where the units of run `run_id` were journaled before: the newest other run of
        the same pipeline (docs/internals.md "Block summaries")."""
        for r in reversed(self.list_runs()):
            if r.pipeline == pipeline and r.run_id != run_id:
                return BlockIndex(self.events, r.run_id)
        return BlockIndex(self.events, None)

    def reuse_sources(self, run_id: str, pipeline: str, *, runs: int = 3) -> SourceIndex:
        """Where the lanes of run `run_id` were journaled explicitly before: the newest
        `runs` other runs of the same pipeline, each read when first needed."""
        earlier = [
            r.run_id
            for r in reversed(self.list_runs())
            if r.pipeline == pipeline and r.run_id != run_id
        ]
        return SourceIndex(self.events, earlier[:runs])

    def load_run(self, run_id: str, clock: Callable[[], datetime] | None = None) -> Run:
        """Replay a run into a `Run` that can record more events (e.g. `recover`)."""
        run = Run(run_aggregate_id(run_id), clock or _utc_now)
        try:
            for event in self.events(run_id):
                run.apply(event)
        except JournalInvariantError as exc:
            raise JournalCorrupt(one_line(f"run {run_id!r} does not replay: {exc}")) from exc
        if run.version == 0:
            raise RunNotFound(one_line(f"no run {run_id!r} in the journal"))
        return run

    def notifications(
        self, after: int = 0, topics: Sequence[str] = ()
    ) -> Iterator[tuple[int, RunEvent]]:
        """(position, event) after `after`, in commit order: a synchronous catch-up.

        Asked for per-lane event types, it also reads the delta rows that hold them
        (docs/internals.md "Delta rows") and yields only the events of those types.
        """
        position = after
        wanted = {event_type_for_topic(t) for t in topics} & PACKABLE
        query = [*topics, DELTA_TOPIC] if wanted else list(topics)
        while True:
            page = self._storage(
                "cannot read the event log",
                functools.partial(
                    self._app.recorder.select_notifications,
                    position,
                    _PAGE,
                    topics=query,
                    inclusive_of_start=False,
                ),
            )
            for row in page:
                position = row.id
                delta = wanted and row.topic == DELTA_TOPIC
                for event in self._mapper.to_domain_events(row):
                    if not delta or type(event) in wanted:
                        yield row.id, event
            if len(page) < _PAGE:
                return

    def list_runs(self) -> list[RunSummary]:
        """Every run in allocation-commit order, from the runs index table and the events
        after its position (only two event types are read and decoded)."""
        if not self._index_loaded:
            self._index_loaded = True
            self._load_index()
        for position, event in self.notifications(self._position, self._summary_topics):
            self.runs_index_reads += 1
            if isinstance(event, RunAllocated):
                self._allocated[event.originator_id] = position
                self._dirty.add(event.originator_id)
                self._runs[event.originator_id] = RunSummary(
                    run_id=event.run_id,
                    pipeline=event.pipeline,
                    status=RunStatus.RUNNING,
                    started=event.timestamp,
                    run_dir=event.run_dir,
                    pid=event.pid,
                    host=event.host,
                    process_start=event.process_start,
                )
            elif isinstance(event, RunTerminated):
                summary = self._runs.get(event.originator_id)
                if summary is not None and summary.ended is None:
                    self._dirty.add(event.originator_id)
                    self._runs[event.originator_id] = msgspec.structs.replace(
                        summary, status=event.status, ended=event.timestamp
                    )
            self._position = position
        if not self._read_only and self._position != self._index_base:
            self._save_index()
        return list(self._runs.values())

    def _index_call(self, doing: str, call: Callable[[], _T]) -> _T | None:
        """A call on the runs index table; None when it fails (the table is a cache)."""
        if self._table is None:
            return None
        try:
            return self._storage(doing, call)
        except Exception:  # any driver's error: the journal is folded as before
            self._table = None  # not tried again by this store
            return None

    def _load_index(self) -> None:
        table = self._table
        loaded = self._index_call("cannot read the runs index", lambda: table.load())  # type: ignore[union-attr]
        if loaded is None:
            return
        position, rows = loaded
        try:
            runs = {UUID(a): msgspec.json.decode(s, type=RunSummary) for a, s in rows}
        except (ValueError, msgspec.DecodeError):
            self._table = None  # a damaged row: this store folds the journal from the start
            return
        self._runs, self._dirty, self._allocated = runs, set(), {}
        self._position = self._index_base = position

    def _save_index(self) -> None:
        table, base, position = self._table, self._index_base, self._position
        rows = [
            (str(a), self._allocated.get(a, 0), msgspec.json.encode(self._runs[a]))
            for a in self._dirty
        ]
        saved = self._index_call(
            "cannot write the runs index",
            lambda: save_if_current(table, base, position, rows),  # type: ignore[arg-type]
        )
        if saved:
            self._index_base, self._dirty = position, set()
        elif saved is False:  # another process moved it: reload its rows next time
            self._index_loaded = False

    def resolve_run(self, ref: str) -> str:
        """A full run id, a unique prefix of one, or a named reference (RUN_REFS: `latest`
        is the most recently started run whatever its status, docs/operations.md "Run
        references")."""
        runs = self.list_runs()
        shown = one_line(repr(ref[:80]))
        if ref in RUN_REFS:
            return _named_run(runs, ref)
        if not ref:
            raise RunNotFound("empty run reference")
        ids = [r.run_id for r in runs]
        if ref in ids:
            return ref
        matches = [i for i in ids if i.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise RunNotFound(f"no run matches {shown}")
        listed = ", ".join(matches[:5]) + (", …" if len(matches) > 5 else "")
        raise AmbiguousRun(one_line(f"run reference {shown} matches {len(matches)} runs: {listed}"))

    def last_version(self, run_id: str) -> int:
        """The version of the run's last stored event (0 for an unknown run): one query."""
        select, aggregate_id = self._app.recorder.select_events, run_aggregate_id(run_id)
        rows = self._storage(
            f"cannot read run {run_id!r}", lambda: select(aggregate_id, desc=True, limit=1)
        )
        return rows[0].originator_version if rows else 0

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            # A pool whose server went silent can wait a long time to close: bounded too,
            # and after a timed-out call only briefly (nothing is left to save).
            bound = min(1.0, self._timeout) if self._dead and self._timeout else self._timeout
            try:
                with contextlib.suppress(TimedOut):
                    call_bounded(self._app.close, bound)
            finally:
                for callback in self._on_close:
                    callback()

    def on_close(self, callback: Callable[[], None]) -> None:
        """Run `callback` after the store closes (the composition root closes the journal's
        directory handle there)."""
        self._on_close.append(callback)

    def __enter__(self) -> JournalStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _utc_now() -> datetime:
    return datetime.now(UTC)
