"""Batch mode: a step's requests collected into provider batches (OpenAI Files + Batches).

A call of a profile in batch mode does not send its request: it adds it to its
endpoint's `BatchCollector` and parks (adapters/parking.py), giving its job slot back so
the scheduler starts the step's other calls. When every call in flight is parked the
executor calls `flush` on the scheduler's thread, which:

1. follows the batches that already hold some of the requests (a record under
   `llm/batches/` from a run that was killed or stopped with `--no-wait`): polls and
   collects them, never submits those requests again;
2. writes the other requests as batch JSONL lines (`custom_id` = the request's reply
   key), within the provider's limits (requests and bytes per batch), records the set,
   uploads it (`files.create`, purpose `batch`) and creates the batch
   (`batches.create`, its metadata naming the set), each remote step recorded before and
   after in the set's `BatchRecord` (adapters/llm/batch_records.py) and the batch
   journaled (`LLMBatchSubmitted`);
3. polls each batch (`batches.retrieve`) every `batch_poll_interval` seconds, journaling
   each new state (`LLMBatchPolled`), until it ends; reads its output file (each line's
   `response.body` read as an online reply is) and error file, stores every reply in the
   write-ahead reply store as it is read, and journals the outcome (`LLMBatchCompleted`);
4. resubmits the requests that errored (5xx, 429) or expired, alone, in one follow-up
   batch per round, up to `batch_resubmits` rounds.

Then the parked calls wake up with their replies and go on exactly as online calls do
(validation, re-asks online, checkpoints). docs/operations.md "Batch runs".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from runjournal.adapters import parking
from runjournal.adapters.llm.batch_apis import BatchState, Result, api_for
from runjournal.adapters.llm.batch_records import BatchRecord, BatchRecords
from runjournal.adapters.llm.calllog import CallsStopped
from runjournal.adapters.llm.cassette import Reply
from runjournal.adapters.llm.transport import TransportError
from runjournal.domain.identity import sha256_hex
from runjournal.domain.llm import AttemptStatus, CallScope

__all__ = ["BatchCollector", "BatchPending", "Ticket"]


class BatchPending(CallsStopped):
    """`--no-wait`: the batches are submitted; a later `--resume` collects them (the run
    ends here, interrupted, its stages not done)."""

    batch_pending = True  # what the run use-case tells its user (app/run_pipeline.py)


class Ticket:
    """One parked request: its reply, or why it has none."""

    __slots__ = (
        "digest",
        "done",
        "error",
        "key",
        "reply",
        "request",
        "retryable",
        "scope",
        "status",
        "stopped",
    )

    def __init__(self, scope: CallScope, key: str, digest: str, request: dict[str, Any]) -> None:
        self.scope = scope
        self.key = key
        self.digest = digest
        self.request = request
        self.done = threading.Event()
        self.reply: Reply | None = None
        self.error: str | None = None
        self.status = AttemptStatus.SERVER_ERROR
        self.retryable = False
        self.stopped = False

    def fail(self, status: AttemptStatus, message: str, *, retryable: bool) -> None:
        self.reply, self.status, self.error, self.retryable = None, status, message, retryable


class BatchCollector:
    """The requests of one endpoint and model waiting for a batch (thread-safe)."""

    def __init__(
        self,
        *,
        profile: Any,
        endpoint: Any,
        services: Any,
        records: BatchRecords,
        journal: Any = None,
        no_wait: bool = False,
    ) -> None:
        self.profile = profile
        self.endpoint = endpoint
        self.services = services
        self.records = records
        self.journal = journal
        self.no_wait = no_wait
        self.api = api_for(profile.provider)  # OpenAI Files + Batches, or message batches
        self._lock = threading.Lock()
        self._pending: list[Ticket] = []
        self._flush_lock = threading.Lock()
        self._stopped = False

    # --- what a call does --------------------------------------------------------------

    def ask(self, scope: CallScope, key: str, digest: str, request: dict[str, Any]) -> Ticket:
        """Add the request and wait (parked) until its batch is collected."""
        ticket = Ticket(scope, key, digest, request)
        with self._lock:
            if self._stopped:
                raise CallsStopped()
            self._pending.append(ticket)
        slots = parking.current()
        if slots is None:  # a thread that cannot park: a batch of what is there now
            self.flush(journaled=False)
        else:
            with slots.parked(self.flush):
                ticket.done.wait()
        ticket.done.wait()
        if ticket.stopped:
            raise CallsStopped()
        return ticket

    def stop(self) -> None:
        """The run ends: every parked call wakes up, refused (those of a flush under way
        when it returns to the queue)."""
        with self._lock:
            self._stopped = True
            pending, self._pending = self._pending, []
        for ticket in pending:
            ticket.stopped = True
            ticket.done.set()

    # --- the flush (the scheduler's thread) --------------------------------------------

    def flush(self, *, journaled: bool = True) -> None:
        with self._flush_lock:
            with self._lock:
                tickets, self._pending = self._pending, []
            if not tickets:
                return
            journal = self.journal if journaled else None
            try:
                self._settle(tickets, journal)
            except TransportError as exc:
                for ticket in tickets:
                    if not ticket.done.is_set() and ticket.reply is None:
                        ticket.fail(exc.status, exc.message, retryable=False)
            except BaseException:
                # `--no-wait`, an interrupt, a bug: the calls stay parked until the run
                # ends, when `stop` wakes them (at once if it already did)
                with self._lock:
                    self._pending = [t for t in tickets if not t.done.is_set()] + self._pending
                    stopped = self._stopped
                if stopped:
                    self.stop()
                raise
            for ticket in tickets:
                ticket.done.set()

    def _settle(self, tickets: list[Ticket], journal: Any) -> None:
        by_key = {t.key: t for t in tickets}
        known: dict[str, BatchRecord] = {}
        for record in self.records.load_all():
            if record.model != self.profile.model or record.endpoint != self.endpoint.shown:
                continue  # another endpoint's batch: its ids mean nothing here
            for key in record.keys:
                # the latest round that holds the request answers it
                if key in by_key and (key not in known or known[key].round < record.round):
                    known[key] = record
        followed: dict[str, BatchRecord] = {r.local: r for r in known.values()}
        waiting: list[tuple[BatchRecord, list[Ticket]]] = []
        for record in followed.values():
            mine = [by_key[k] for k in record.keys if known.get(k) is record and k in by_key]
            waiting.append((record, mine))
        fresh = [t for t in tickets if t.key not in known]
        for group in self._split(fresh):
            record = self._record(group, round_no=1)
            waiting.append((record, group))
        for record, group in waiting:
            self._submit(record, group, journal)
        if self.no_wait and waiting:
            raise BatchPending()
        for record, group in waiting:
            try:
                self._follow(record, group, journal)
            except TransportError as exc:
                if exc.http_status != 404 or not record.batch_id:
                    raise
                # the provider does not know the batch a record names (another key or
                # organisation, or deleted): its requests are submitted anew, once
                record.batch_id = record.file_id = record.status = None
                record.state = "prepared"
                self._submit(record, group, journal)
                self._follow(record, group, journal)
        options = self.profile.client
        round_no = max((r.round for r, _ in waiting), default=1)
        for _ in range(options.batch_resubmits):
            again = [t for t in tickets if t.reply is None and t.retryable]
            if not again:
                break
            round_no += 1
            for group in self._split(again):
                record = self._record(group, round_no=round_no)
                self._submit(record, group, journal)
                self._follow(record, group, journal)

    # --- one batch -----------------------------------------------------------------------

    def _split(self, tickets: list[Ticket]) -> list[list[Ticket]]:
        """Groups within the profile's requests and bytes per batch."""
        options = self.profile.client
        groups: list[list[Ticket]] = []
        size = 0
        for ticket in tickets:
            line = len(self._line(ticket)) + self.api.mark_bytes
            if (
                not groups
                or len(groups[-1]) >= options.batch_max_requests
                or (size + line > options.batch_max_bytes)
            ):
                groups.append([])
                size = 0
            groups[-1].append(ticket)
            size += line
        return groups

    def _line(self, ticket: Ticket) -> bytes:
        return self.api.line(ticket, self.endpoint.transport())

    def _record(self, tickets: list[Ticket], *, round_no: int) -> BatchRecord:
        keys = [t.key for t in tickets]
        local = sha256_hex("\n".join([self.profile.model, str(round_no), *sorted(keys)]).encode())[
            :32
        ]
        return BatchRecord(
            local=local,
            profile_id=self.profile.id,
            model=self.profile.model,
            endpoint=self.endpoint.shown,
            keys=keys,
            round=round_no,
        )

    def _client(self) -> Any:
        return self.endpoint.transport().client()

    def _submit(self, record: BatchRecord, tickets: list[Ticket], journal: Any) -> None:
        """Upload and create the batch unless it exists: each step recorded before and
        after it (a record found `submitting` is looked up at the provider first)."""
        if record.batch_id is not None:
            if journal is not None:
                self._journal_submitted(journal, record, tickets, resumed=True)
            return
        client = self._client()
        api = self.api
        if record.state == "submitting":
            claimed = {r.batch_id for r in self.records.load_all() if r.batch_id}
            found = self._remote(lambda: api.find(client, record, claimed))
            if found is not None:
                record.batch_id, record.state, record.status = found[0], "submitted", found[1]
                self.records.save(record)
                if journal is not None:
                    self._journal_submitted(journal, record, tickets, resumed=True)
                return
        data = b"".join(self.api.lines(tickets, self.endpoint.transport()))
        if api.uploads and record.file_id is None:
            self.records.save(record)  # the request set, before anything leaves
            name = f"runjournal-{record.local}.jsonl"
            record.file_id = self._remote(lambda: api.upload(client, name, data))
            record.state = "uploaded"
            self.records.save(record)
        record.state = "submitting"
        record.submitting_at = time.time()
        self.records.save(record)
        batch_id, status = self._remote(lambda: api.create(client, record, data))
        record.batch_id, record.state, record.status = batch_id, "submitted", status
        self.records.save(record)
        if journal is not None:
            self._journal_submitted(journal, record, tickets, resumed=False)

    def _follow(self, record: BatchRecord, tickets: list[Ticket], journal: Any) -> None:
        """Poll until the batch ends, then collect its results."""
        client = self._client()
        api = self.api
        batch_id = record.batch_id
        assert batch_id is not None
        interval = self.profile.client.batch_poll_interval
        last: BatchState | None = None
        while True:
            self._check_stop()
            state = self._remote(lambda: api.retrieve(client, batch_id))
            changed = state.seen() != (last.seen() if last else None)
            if changed and journal is not None:
                journal.llm_batch_polled(
                    batch_id=batch_id,
                    status=state.status,
                    total=state.total,
                    completed=state.completed,
                    failed=state.failed,
                )
            last = state
            if state.ended:
                break
            self._sleep(interval)
        record.status = state.status
        self.records.save(record)
        results = api.results(client, state)  # read as it comes: stored as it is read
        completed, errored, expired = self._collect(state, results, tickets)
        record.state = "collected"
        self.records.save(record)
        if journal is not None:
            journal.llm_batch_completed(
                batch_id=batch_id,
                status=state.status,
                completed=completed,
                errored=errored,
                expired=expired,
            )

    def _collect(
        self, state: BatchState, results: Iterator[Result], tickets: list[Ticket]
    ) -> tuple[int, int, int]:
        by_key = {t.key: t for t in tickets}
        transport = self.endpoint.transport()
        store = self.services.wal.replies
        completed = errored = expired = 0
        while True:
            self._check_stop()
            result = transport.remote(lambda: next(results, None))
            if result is None:
                break
            ticket = by_key.get(result.custom_id)
            if ticket is None or ticket.reply is not None:
                continue
            if result.outcome == "ok":
                try:
                    reply = transport.parse(result.body, ticket.request)
                except TransportError as exc:
                    ticket.fail(exc.status, exc.message, retryable=False)
                    continue
                if store is not None:
                    # stored as it is read (its only copy: no outcome line yet), so a kill
                    # loses nothing
                    store.put(ticket.key, reply, at_once=True)
                ticket.reply = reply
                completed += 1
            elif result.outcome == "expired":
                expired += 1
                ticket.fail(
                    AttemptStatus.TIMEOUT,
                    f"{self.profile.id}: batch {state.batch_id}: {result.detail}",
                    retryable=True,
                )
            else:
                errored += 1
                ticket.fail(
                    result.status,
                    f"{self.profile.id}: batch {state.batch_id}: {result.detail}",
                    retryable=result.status
                    in (AttemptStatus.SERVER_ERROR, AttemptStatus.RATE_LIMITED),
                )
        why = f" ({self.endpoint.scrub(state.why)[:200]})" if state.why else ""
        for ticket in tickets:  # no result: the batch failed, or was cancelled
            if ticket.reply is None and ticket.error is None:
                ticket.fail(
                    AttemptStatus.SERVER_ERROR,
                    f"{self.profile.id}: batch {state.batch_id} ended {state.status} without "
                    f"this request's result{why}",
                    retryable=state.status != "failed",
                )
        return completed, errored, expired

    # --- plumbing --------------------------------------------------------------------------

    def _journal_submitted(
        self, journal: Any, record: BatchRecord, tickets: list[Ticket], *, resumed: bool
    ) -> None:
        journal.llm_batch_submitted(
            batch_id=record.batch_id or "",
            request_set=record.local,
            profile_id=self.profile.id,
            model=self.profile.model,
            round=record.round,
            requests=len(record.keys),
            resumed=resumed,
            stages=[(t.scope.step, t.scope.lane, t.scope.stage, t.scope.chunk) for t in tickets],
        )

    def _check_stop(self) -> None:
        if self.services.stopping or self.services.wal.refusing:
            raise CallsStopped()

    def _sleep(self, seconds: float) -> None:
        """Wait between polls; a first SIGINT (no new request) ends the wait at once:
        the batch stays recorded, and `--resume` follows it."""
        clock = self.services.clock
        until = clock() + seconds
        while True:
            self._check_stop()
            left = until - clock()
            if left <= 0:
                return
            try:
                self.services.sleep(min(left, 0.2))
            except RuntimeError:
                raise CallsStopped() from None

    def _remote(self, call: Callable[[], Any]) -> Any:
        """One remote step, retried on transient failures as an online request is."""
        options = self.profile.client
        tries = 0
        while True:
            self._check_stop()
            tries += 1
            try:
                return self.endpoint.transport().remote(call)
            except TransportError as exc:
                if exc.status not in _TRANSIENT or tries > options.max_retries:
                    raise
                self._sleep(min(options.backoff_max, options.backoff_initial * 2 ** (tries - 1)))


_TRANSIENT = (
    AttemptStatus.SERVER_ERROR,
    AttemptStatus.RATE_LIMITED,
    AttemptStatus.TIMEOUT,
    AttemptStatus.CONNECTION_ERROR,
)
