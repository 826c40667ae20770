"""Write-ahead replies and exact spend: what a request cost is on disk before it is sent.

Two stores under the cache root's `llm/` (docs/operations.md "LLM call log"):

- `llm/runs/<run id>.log`, one per run: an *intent* line before each request is sent
  (its digest, endpoint, estimated prompt tokens, `max_tokens`, upper-bound cost, where
  it was asked), then an *outcome* line when it ends (the reply's usage and text, or
  the failure's status). Intents are group-committed: calls in flight share one
  `fsync`, and the request leaves only once its intent is durable. A run that ends
  journals every attempt its log holds that its journal lacks (`pending_attempts`), and
  `recover` does the same for a run that was killed: an intent without an outcome
  becomes an `in_doubt` attempt counted at its upper bound.
- `llm/replies/<k[:2]>/<k>.json`: every successful reply, keyed by the request's digest
  within the stage's identity scope and its occurrence in the stage execution
  (`reply_key`); a resumed run reuses it instead of asking again.

A line is written with one `write` (whole or not at all when the process dies); a
torn or unreadable line is skipped when the log is read.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from collections.abc import Callable, Container, Iterable, Iterator
from typing import Any

import msgspec
from runjournal.adapters.llm.cassette import Reply
from runjournal.adapters.packed_store import PackedStore
from runjournal.domain.decisions import Stage
from runjournal.domain.identity import sha256_hex
from runjournal.domain.llm import AttemptStatus, CallScope, LLMAttempt
from runjournal.domain.runner.boundary import Interrupt

__all__ = [
    "CallLog",
    "CallsStopped",
    "Intent",
    "Outcome",
    "PendingAttempt",
    "ReplyStore",
    "WriteAhead",
    "pending_attempts",
    "read_log",
    "remove_log",
    "reply_key",
]


class CallsStopped(Interrupt):
    """A request asked for after the run began to stop: it is never sent (an interrupt,
    so the stage that asked is not failed: the run ends interrupted)."""


_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
# The packed store name of the replies (their directory under the cache root).
REPLIES = "llm/replies"


def reply_key(identity: str, digest: str, occurrence: int) -> str:
    """The reply store's key: the request within its stage's identity scope, and which
    time this stage execution asks it (a stage may ask the same thing twice)."""
    return sha256_hex(f"{identity}\n{digest}\n{occurrence}".encode())


class Intent(msgspec.Struct, frozen=True, kw_only=True, tag="i"):
    """A request about to be sent: enough to journal it if nothing else is ever heard."""

    seq: int
    step: str
    lane: str
    stage: Stage
    chunk: str
    call: int
    attempt: int
    profile_id: str
    provider: str
    model: str
    endpoint: str
    request_sha256: str
    key: str
    prompt_tokens: int  # estimated before sending
    max_tokens: int  # the reply's limit (or the runtime's estimate when none is set)
    bound_cost: float  # prompt_tokens + max_tokens at the profile's prices
    time: float


class Outcome(msgspec.Struct, frozen=True, kw_only=True, tag="o"):
    """How a sent request ended (a reply or a failure status)."""

    seq: int
    status: AttemptStatus
    http_status: int | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    cost: float = 0.0
    reply_sha256: str | None = None
    content: str | None = None  # the reply, so the reply store can be rebuilt from here
    finish_reason: str | None = None


_Line = Intent | Outcome
_encoder = msgspec.json.Encoder()
_line_decoder = msgspec.json.Decoder(_Line)
_reply_decoder = msgspec.json.Decoder(Reply)


class PendingAttempt(msgspec.Struct, frozen=True, kw_only=True):
    """An attempt the log holds and the run's journal does not: where, and what."""

    step: str
    lane: str
    stage: Stage
    chunk: str
    attempt: LLMAttempt

    def key(self) -> tuple[str, str, str, str, int, int]:
        return attempt_key(self.step, self.lane, self.stage, self.chunk, self.attempt)


def attempt_key(
    step: str, lane: str, stage: Stage, chunk: str, attempt: LLMAttempt
) -> tuple[str, str, str, str, int, int]:
    return (step, lane, stage.value, chunk, attempt.call, attempt.attempt)


def read_log(path: str) -> Iterator[_Line]:
    """The log's lines in order; a torn or foreign line is skipped."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return
    for raw in data.split(b"\n"):
        if raw:
            with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                yield _line_decoder.decode(raw)


def pending_attempts(
    lines: Iterable[_Line], journaled: Container[tuple[str, str, str, str, int, int]]
) -> list[PendingAttempt]:
    """The attempts of `lines` not in `journaled`, in the order they were sent.

    A reply that arrived is an attempt with its real usage; an intent whose outcome
    never came (the process died, or gave up waiting) is `in_doubt`: the server may
    have answered and billed it, so it counts at its upper bound.
    """
    intents: dict[int, Intent] = {}
    outcomes: dict[int, Outcome] = {}
    for line in lines:
        if isinstance(line, Intent):
            intents[line.seq] = line
        else:
            outcomes[line.seq] = line
    out: list[PendingAttempt] = []
    for seq in sorted(intents):
        intent = intents[seq]
        where = (intent.step, intent.lane, intent.stage.value, intent.chunk)
        if (*where, intent.call, intent.attempt) in journaled:
            continue  # the usual case at a run's end: nothing to build
        done = outcomes.get(seq)
        if done is None:
            attempt = LLMAttempt(
                call=intent.call,
                attempt=intent.attempt,
                profile_id=intent.profile_id,
                provider=intent.provider,
                model=intent.model,
                status=AttemptStatus.IN_DOUBT,
                prompt_tokens=intent.prompt_tokens,
                completion_tokens=intent.max_tokens,
                cost=intent.bound_cost,
                request_sha256=intent.request_sha256,
            )
        else:
            attempt = LLMAttempt(
                call=intent.call,
                attempt=intent.attempt,
                profile_id=intent.profile_id,
                provider=intent.provider,
                model=intent.model,
                status=done.status,
                http_status=done.http_status,
                prompt_tokens=done.prompt_tokens,
                completion_tokens=done.completion_tokens,
                latency_ms=done.latency_ms,
                cost=done.cost,
                request_sha256=intent.request_sha256,
                reply_sha256=done.reply_sha256,
            )
        pending = PendingAttempt(
            step=intent.step,
            lane=intent.lane,
            stage=intent.stage,
            chunk=intent.chunk,
            attempt=attempt,
        )
        out.append(pending)
    return out


def restore_replies(lines: Iterable[_Line], store: ReplyStore) -> int:
    """Put back into `store` the replies a log holds that the store lacks (a reply
    whose file was lost with the page cache); returns how many were restored."""
    lines = list(lines)
    keys = {line.seq: line.key for line in lines if isinstance(line, Intent)}
    restored = 0
    for line in lines:
        if (
            isinstance(line, Outcome)
            and line.status is AttemptStatus.OK
            and line.content is not None
            and line.seq in keys
            and store.get(keys[line.seq]) is None
        ):
            store.put(
                keys[line.seq],
                Reply(
                    content=line.content,
                    prompt_tokens=line.prompt_tokens,
                    completion_tokens=line.completion_tokens,
                    finish_reason=line.finish_reason,
                ),
            )
            restored += 1
    store.flush()
    return restored


# Replies a packed store takes together: one index transaction per this many (a reply's
# own transaction was a share of every call's cpu:
# docs/performance.md "Fewer index transactions per call").
REPLY_BATCH = 32


class ReplyStore:
    """Successful replies by `reply_key`: entries of the cache root's packed store when
    it has one (`llm/replies/<key[:2]>/<key>.json`, docs/internals.md "Packed store"),
    else one small file each (atomic rename); files of either kind are read.

    A packed store that takes entries together (`put_many`) gets the replies in batches
    of `REPLY_BATCH`, the rest at `flush` (the run's end, before its last group sync); a
    reply not yet flushed is read from here. Its outcome line in the call log holds the
    same reply first: one lost with the process is put back by `recover`
    (`restore_replies`)."""

    def __init__(self, directory: str, packed: PackedStore | None = None) -> None:
        self.directory = directory
        self._packed = packed
        self._made: set[str] = set()  # fan-out directories known to exist
        self._batched = getattr(packed, "put_many", None) is not None
        self._pending: dict[str, bytes] = {}  # key -> encoded reply, not yet put
        self._lock = threading.Lock()
        self._flushing = threading.Lock()  # batches put in the order they were taken
        self._putting: dict[str, bytes] = {}  # the batch being put (still read from here)

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], f"{key}.json")

    @staticmethod
    def _name(key: str) -> str:
        return f"{REPLIES}/{key[:2]}/{key}.json"

    def get(self, key: str) -> Reply | None:
        try:
            data = None
            if self._batched:
                data = self._pending.get(key) or self._putting.get(key)
            if data is None and self._packed is not None:
                data = self._packed.get(self._name(key))
            if data is None:
                with open(self._path(key), "rb") as fh:
                    data = fh.read()
            return _reply_decoder.decode(data)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return None

    def put(self, key: str, reply: Reply, *, at_once: bool = False) -> None:
        """Store `reply` (held for the next batch; `at_once`: put now, for a reply whose
        only copy this is, such as a provider batch's result)."""
        if self._batched and not at_once:
            with self._lock:
                self._pending[key] = _encoder.encode(reply)
                full = len(self._pending) >= REPLY_BATCH
            if full:
                self.flush()
            return
        if self._packed is not None:
            with self._flushing:  # after a batch that may hold an older reply of the key
                with self._lock:
                    self._pending.pop(key, None)
                self._packed.put(self._name(key), _encoder.encode(reply))
            return
        path = self._path(key)
        parent = os.path.dirname(path)
        if parent not in self._made:
            os.makedirs(parent, exist_ok=True)
            self._made.add(parent)
        # a killed writer's temp file is swept by `recover` (the `.rj-tmp-` prefix)
        tmp = os.path.join(parent, f".rj-tmp-{key}.{os.getpid()}.{threading.get_ident()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, _encoder.encode(reply))
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def flush(self) -> None:
        """Put the replies held (one index transaction). Raises as the store's `put`;
        the replies are then held again, for the next flush."""
        if not self._batched:
            return
        with self._flushing:
            with self._lock:
                batch, self._pending = self._pending, {}
                self._putting = batch
            if not batch:
                return
            try:
                assert self._packed is not None
                self._packed.put_many([(self._name(k), data) for k, data in batch.items()])
            except BaseException:
                with self._lock:  # newer replies of the same keys win
                    self._pending = {**batch, **self._pending}
                raise
            finally:
                self._putting = {}

    def forget(self, key: str) -> None:
        with self._flushing:  # after a batch that may hold it
            with self._lock:
                self._pending.pop(key, None)
            if self._packed is not None:
                self._packed.remove([self._name(key)])
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(key))


class CallLog:
    """One run's append-only intent log, with group commit: the intents of the calls in
    flight are written with one `write` and made durable with one `fsync` per batch."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = -1  # opened by the first line: a run that sends nothing leaves no log
        self._lock = threading.Lock()
        # the callers of the intents queued for the next batch wait on its own condition
        # (the batch's, once a caller takes it to sync), so a sync wakes the callers it
        # made durable and one caller of the next batch, not every caller waiting
        # (docs/performance.md "Wake-ups per call")
        self._next = threading.Condition(self._lock)
        self._queue: list[bytes] = []  # intents waiting for the next batch
        self._queued = 0  # intents queued so far (each one's number: its ticket)
        self._durable = 0  # intents known durable (every ticket up to it)
        self._failed: list[tuple[int, int, OSError]] = []  # batches whose write failed
        self._syncing = False
        self._taken = 0  # intents taken by a sync so far (every ticket up to it)
        self._batch = self._next  # the condition of the batch being synced
        self.syncs = 0
        self.wakeups = 0  # waits of callers for a sync (for tests: one a caller at most)

    def _open(self) -> int:
        if self._fd < 0:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self._fd = os.open(self.path, _FLAGS, 0o600)
        return self._fd

    def append(self, line: _Line) -> None:
        """Write one line at once (surviving the process), without waiting for a sync."""
        data = _encoder.encode(line) + b"\n"
        with self._lock:
            os.write(self._open(), data)

    def append_durable(self, line: _Line) -> None:
        """Return once the line is durable. One caller writes every line queued meanwhile
        (one `write`, whole lines) and syncs for everyone waiting; the others wait, each
        woken once: when its batch is durable (or failed), or to lead the next batch."""
        data = _encoder.encode(line) + b"\n"
        with self._lock:
            self._queue.append(data)
            self._queued += 1
            mine = self._queued
            while self._durable < mine:
                for first, last, exc in self._failed:
                    if first <= mine <= last:
                        raise OSError(exc.errno, exc.strerror)
                if self._syncing:
                    # the line is queued (a batch being synced holds only earlier ones)
                    # or in the batch being synced, whose condition this one still is
                    self.wakeups += 1
                    (self._next if self._taken < mine else self._batch).wait()
                    continue
                self._syncing = True
                batch, self._queue = self._queue, []
                first, target = self._queued - len(batch) + 1, self._queued
                self._taken = target
                # the queued callers' condition becomes the batch's: they wait there
                done, self._next = self._next, threading.Condition(self._lock)
                self._batch = done
                failure: OSError | None = OSError(errno.EIO, "the intent log's write stopped")
                self._lock.release()
                try:
                    with self._lock:
                        fd = self._open()
                    left = memoryview(b"".join(batch))
                    while left:  # one write, unless the file system takes less
                        left = left[os.write(fd, left) :]
                    os.fsync(fd)
                    failure = None
                except OSError as exc:
                    failure = exc
                    raise
                finally:
                    self._lock.acquire()
                    self._syncing = False
                    if failure is None:
                        self._durable = max(self._durable, target)
                        self.syncs += 1
                    else:  # every intent of the batch fails as the leader's did
                        self._failed.append((first, target, failure))
                    done.notify_all()  # the batch's callers
                    self._next.notify()  # one queued caller syncs the next batch

    def close(self, *, remove: bool) -> None:
        with self._lock:
            fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                if not remove:
                    os.fsync(fd)
            os.close(fd)
        if remove and fd >= 0:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


def remove_log(path: str) -> None:
    """Remove a run's intent log once its attempts are journaled (`recover`)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


PRUNE_LINES = 4_096
"""The intent and outcome lines a run holds before it lets go of those of attempts the
journal holds (`WriteAhead.journaled`)."""


class WriteAhead:
    """The run's write-ahead replies and intents (one per run invocation, thread-safe).

    `refuse_new` (the first SIGINT) makes every later `begin` refuse; `drain` waits for
    the requests in flight; `pending` is what the run's journal still lacks.
    """

    def __init__(
        self, cache_dir: str | None, run_id: str | None, packed: PackedStore | None = None
    ) -> None:
        self.replies = (
            ReplyStore(os.path.join(cache_dir, "llm", "replies"), packed) if cache_dir else None
        )
        self.log = (
            CallLog(os.path.join(cache_dir, "llm", "runs", f"{run_id}.log"))
            if cache_dir and run_id
            else None
        )
        self._lines: list[_Line] = []
        # what the journal holds of the run's attempts (`pending`'s `journaled`), when the
        # run can tell: the lines of attempts it holds are let go as lines accumulate, so
        # the run does not hold every intent and reply to its end (issue 29: peak RSS)
        self.journaled: Callable[[], Container[tuple[str, str, str, str, int, int]]] | None = None
        self._prune_at = PRUNE_LINES
        self._lock = threading.Condition()
        self._seq = 0
        self._in_flight = 0
        self.refusing = False
        self.reused = 0

    # --- before and after one request ------------------------------------------------

    def lookup(self, scope: CallScope, key: str) -> Reply | None:
        """A stored reply for this request, when the stage may reuse one."""
        if not scope.reuse or self.replies is None:
            return None
        reply = self.replies.get(key)
        if reply is not None:
            with self._lock:
                self.reused += 1
        return reply

    def begin(self, scope: CallScope | None, **fields: Any) -> int:
        """Record the intent durably (group commit) and count the request in flight;
        returns its sequence number (0: not logged, a call outside any stage). Raises
        `CallsStopped` once the run stops: no request starts after the first SIGINT."""
        with self._lock:
            if self.refusing:
                raise CallsStopped()
            self._in_flight += 1
            if scope is None:
                return 0
            self._seq += 1
            seq = self._seq
            intent = Intent(
                seq=seq,
                step=scope.step,
                lane=scope.lane,
                stage=scope.stage,
                chunk=scope.chunk,
                time=time.time(),
                **fields,
            )
            self._lines.append(intent)
            if self.journaled is not None and len(self._lines) >= self._prune_at:
                self._prune(self.journaled())
        if self.log is not None:
            try:
                self.log.append_durable(intent)
            except BaseException:
                self.end(seq, None, None)
                raise
        return seq

    def end(self, seq: int, attempt: LLMAttempt | None, reply: Reply | None, key: str = "") -> None:
        """The request ended: its reply is stored, its outcome logged (no wait for sync)."""
        try:
            if attempt is not None and seq:
                outcome = Outcome(
                    seq=seq,
                    status=attempt.status,
                    http_status=attempt.http_status,
                    prompt_tokens=attempt.prompt_tokens,
                    completion_tokens=attempt.completion_tokens,
                    latency_ms=attempt.latency_ms,
                    cost=attempt.cost,
                    reply_sha256=attempt.reply_sha256,
                    content=reply.content if reply is not None else None,
                    finish_reason=reply.finish_reason if reply is not None else None,
                )
                with self._lock:
                    self._lines.append(outcome)
                if self.log is not None:
                    self.log.append(outcome)
                # after the outcome: a reply file without it would be reused while its
                # attempt is journaled in doubt; the log rebuilds a lost file instead
                if reply is not None and self.replies is not None and key:
                    self.replies.put(key, reply)
        finally:
            with self._lock:
                self._in_flight -= 1
                self._lock.notify_all()

    def invalid(self, key: str) -> None:
        """A stored reply that did not validate is never reused: the re-ask is sent."""
        if self.replies is not None:
            self.replies.forget(key)

    # --- the end of the run ----------------------------------------------------------

    def refuse_new(self) -> None:
        self.refusing = True

    def drain(self, timeout: float, expired: Any = None) -> bool:
        """Wait up to `timeout` s for the requests in flight; True when none is left."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._lock:
            while self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0 or (expired is not None and expired()):
                    return False
                self._lock.wait(min(left, 0.05))
            return True

    def _prune(self, journaled: Container[tuple[str, str, str, str, int, int]]) -> None:
        """Let go of the lines of attempts the journal holds (under the lock): `pending`
        would skip them. An attempt is journaled after its outcome line, which goes
        with its intent."""
        kept: list[_Line] = []
        intents: set[int] = set()
        for line in self._lines:
            if isinstance(line, Intent):
                where = (line.step, line.lane, line.stage.value, line.chunk)
                if (*where, line.call, line.attempt) in journaled:
                    continue
                intents.add(line.seq)
            elif line.seq not in intents:
                continue
            kept.append(line)
        self._lines = kept
        self._prune_at = max(PRUNE_LINES, 2 * len(kept))

    def pending(
        self, journaled: Container[tuple[str, str, str, str, int, int]]
    ) -> list[PendingAttempt]:
        """What the journal lacks; the replies held are put first (before the run's last
        group sync: durable with its terminal event)."""
        self._flush_replies()
        with self._lock:
            lines = list(self._lines)
        return pending_attempts(lines, journaled)

    def _flush_replies(self) -> bool:
        """Put the replies the store holds; False when it could not (they stay held)."""
        if self.replies is None:
            return True
        try:
            self.replies.flush()
        except OSError:
            return False
        return True

    def close(self, *, settled: bool) -> None:
        """Close the log; removed once every attempt it holds is journaled and every
        reply stored (a log kept holds the replies `recover` can put back)."""
        flushed = self._flush_replies()
        if self.log is not None:
            self.log.close(remove=settled and flushed)


def log_path(cache_dir: str, run_id: str) -> str:
    return os.path.join(cache_dir, "llm", "runs", f"{run_id}.log")
