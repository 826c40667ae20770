"""Per-endpoint limits shared by every concurrent call of one run invocation.

Requests per minute and tokens per minute are rolling windows and hard caps (a
request's tokens count as its estimate, prompt size plus `max_tokens`, before it is
sent); the requests in flight are bounded by an adaptive window (domain/aimd.py) under
`max_concurrency`: a 429 shrinks it, replies grow it back. A 429's `Retry-After` is
waited by the request that got it only; the other calls go on inside the smaller window
(docs/operations.md "Rate limits and adaptive concurrency"). Thread-safe (one condition
variable); `stop()` wakes every waiter when the run is ending.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from runjournal.domain import aimd


class LimiterStopped(RuntimeError):
    """The run is stopping: no new request is started."""


class Ticket:
    __slots__ = ("entry", "epoch")

    def __init__(self, entry: list[float], epoch: int = 0) -> None:
        self.entry = entry  # [time, tokens] in the token window, corrected on release
        self.epoch = epoch  # the concurrency window's decrease epoch when it started


class EndpointLimiter:
    def __init__(
        self,
        *,
        requests_per_minute: int = 0,
        tokens_per_minute: int = 0,
        max_concurrency: int = 0,
        window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rpm = requests_per_minute
        self.tpm = tokens_per_minute
        self.max_concurrency = max_concurrency
        self._window = window
        self._clock = clock
        self._cond = threading.Condition()
        self._requests: collections.deque[float] = collections.deque()
        self._tokens: collections.deque[list[float]] = collections.deque()
        self._in_flight = 0
        self._paused_until = 0.0
        self._aimd = aimd.opened(max_concurrency or aimd.DEFAULT_CEILING)
        self.rate_limited = 0  # 429s seen (for reports and tests)
        self._stopped = False
        self.waited = 0.0  # total seconds callers spent waiting here (for reports and tests)

    def tighten(self, *, rpm: int, tpm: int, max_concurrency: int) -> None:
        """Another profile on the same endpoint: the stricter of each nonzero limit holds."""

        def stricter(a: int, b: int) -> int:
            return min(x for x in (a, b) if x) if (a or b) else 0

        with self._cond:
            self.rpm = stricter(self.rpm, rpm)
            self.tpm = stricter(self.tpm, tpm)
            self.max_concurrency = stricter(self.max_concurrency, max_concurrency)
            if self.max_concurrency:
                self._aimd = aimd.with_ceiling(self._aimd, self.max_concurrency)
            self._cond.notify_all()

    @property
    def concurrency_window(self) -> int:
        """Requests that may be in flight now (the adaptive window's limit)."""
        with self._cond:
            return self._aimd.limit

    def _prune(self, now: float) -> None:
        horizon = now - self._window
        while self._requests and self._requests[0] <= horizon:
            self._requests.popleft()
        while self._tokens and self._tokens[0][0] <= horizon:
            self._tokens.popleft()

    def _wait_needed(self, now: float, estimate: int) -> float | None:
        """Seconds until a request could start (0: now; None: when one in flight ends)."""
        if self._paused_until > now:
            return self._paused_until - now
        if self._in_flight >= self._aimd.limit:  # never above max_concurrency (its ceiling)
            return None
        if self.rpm and len(self._requests) >= self.rpm:
            return self._requests[0] + self._window - now
        if self.tpm and self._tokens:
            used = sum(int(t[1]) for t in self._tokens)
            if used + estimate > self.tpm:
                return self._tokens[0][0] + self._window - now
        return 0.0

    def acquire(self, estimate: int) -> Ticket:
        """Block until a request of about `estimate` tokens may start; count it."""
        started = self._clock()
        with self._cond:
            while True:
                if self._stopped:
                    raise LimiterStopped("the run is stopping")
                now = self._clock()
                self._prune(now)
                wait = self._wait_needed(now, max(0, estimate))
                if wait is not None and wait <= 0:
                    break
                try:
                    self._cond.wait(timeout=None if wait is None else min(wait, 1.0))
                except BaseException:  # a wake-up meant for this caller goes to another
                    self._cond.notify()
                    raise
            now = self._clock()
            self._requests.append(now)
            entry = [now, float(max(0, estimate))]
            self._tokens.append(entry)
            self._in_flight += 1
            self.waited += now - started
            return Ticket(entry, self._aimd.epoch)

    def _one_at_a_time(self, now: float) -> bool:
        """Only the concurrency window holds callers back: a freed slot wakes one of them,
        not every one (each would take the lock and wait again: with 56 callers waiting
        for 8 slots, ten wake-ups a request; docs/performance.md "Wake-ups per call").
        With a rate, a token budget or a pause every waiter is woken, as each waits
        for its own reason."""
        return not (self.rpm or self.tpm or self._paused_until > now)

    def release(
        self, ticket: Ticket, tokens: int | None, *, answered: bool = False, limited: bool = False
    ) -> None:
        """The request ended; `tokens` (when known) replaces the estimate in the window.

        `answered` (a reply) grows the concurrency window, `limited` (a 429) shrinks it.
        """
        with self._cond:
            before = self._aimd.limit
            if tokens is not None:
                ticket.entry[1] = float(max(0, tokens))
            if limited:
                self.rate_limited += 1
                self._aimd = aimd.on_rate_limited(
                    self._aimd, started_epoch=ticket.epoch, in_flight=self._in_flight
                )
            elif answered:
                self._aimd = aimd.on_reply(self._aimd)
            self._in_flight -= 1
            if self._one_at_a_time(self._clock()):
                # the slot this request held, and one more when the window grew
                self._cond.notify(1 + max(0, self._aimd.limit - before))
            else:
                self._cond.notify_all()

    def pause(self, seconds: float) -> None:
        """No request to this endpoint before `seconds` from now (the runtime waits a
        `Retry-After` in the request that got it instead: docs/operations.md)."""
        with self._cond:
            self._paused_until = max(self._paused_until, self._clock() + max(0.0, seconds))
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
