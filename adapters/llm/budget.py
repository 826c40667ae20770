"""`--max-cost` and `--max-tokens`: one budget for every LLM call of a run invocation.

Each request (retries included) first reserves its estimate (prompt tokens plus its
`max_tokens`, priced): it starts only if what was spent, what the requests in flight
reserved and its own estimate fit under the limit, so concurrent calls never overshoot
together. The attempt's real usage is charged when it ends and its reservation
released, under one lock. A call that does not fit fails with `budget_exhausted`; what
finished is kept (docs/operations.md "Budgets").
"""

from __future__ import annotations

import threading

from runjournal.domain.llm import FailureCause, LLMCallFailed


class Reservation:
    __slots__ = ("cost", "tokens")

    def __init__(self, tokens: int, cost: float) -> None:
        self.tokens = tokens
        self.cost = cost


class Budget:
    def __init__(self, *, max_cost: float | None = None, max_tokens: int | None = None) -> None:
        self.max_cost = max_cost
        self.max_tokens = max_tokens
        self._lock = threading.Lock()
        self._tokens = 0
        self._cost = 0.0
        self._held_tokens = 0  # reserved by requests in flight
        self._held_cost = 0.0

    @property
    def limited(self) -> bool:
        return self.max_cost is not None or self.max_tokens is not None

    def check(self) -> None:
        """Raise `LLMCallFailed(budget_exhausted)` when a limit has been reached."""
        with self._lock:
            reason = self._reached()
        if reason is not None:
            raise LLMCallFailed(FailureCause.BUDGET_EXHAUSTED, reason)

    def _reached(self) -> str | None:
        if self.max_tokens is not None and self._tokens >= self.max_tokens:
            return (
                f"LLM budget exhausted: {self._tokens} tokens spent, "
                f"--max-tokens {self.max_tokens}; no new call is made"
            )
        if self.max_cost is not None and self._cost >= self.max_cost:
            return (
                f"LLM budget exhausted: cost {self._cost:.6g} spent, "
                f"--max-cost {self.max_cost:g}; no new call is made"
            )
        return None

    def reserve(self, tokens: int, cost: float) -> Reservation:
        """Hold a request's estimate, or raise `budget_exhausted` if it cannot be paid."""
        tokens, cost = max(0, tokens), max(0.0, cost)
        with self._lock:
            reason = self._reached() or self._short(tokens, cost)
            if reason is None:
                self._held_tokens += tokens
                self._held_cost += cost
        if reason is not None:
            raise LLMCallFailed(FailureCause.BUDGET_EXHAUSTED, reason)
        return Reservation(tokens, cost)

    def release(self, reservation: Reservation) -> None:
        """The request ended (its real usage is charged separately)."""
        with self._lock:
            self._held_tokens -= reservation.tokens
            self._held_cost -= reservation.cost

    def _short(self, tokens: int, cost: float) -> str | None:
        held = self._held_tokens, self._held_cost
        if self.max_tokens is not None and self._tokens + held[0] + tokens > self.max_tokens:
            return (
                f"LLM budget exhausted: {self._tokens} tokens spent, {held[0]} reserved by "
                f"requests in flight, the next request may take {tokens}; --max-tokens "
                f"{self.max_tokens}; no new call is made"
            )
        if self.max_cost is not None and self._cost + held[1] + cost > self.max_cost:
            return (
                f"LLM budget exhausted: cost {self._cost:.6g} spent, {held[1]:.6g} reserved "
                f"by requests in flight, the next request may cost {cost:.6g}; --max-cost "
                f"{self.max_cost:g}; no new call is made"
            )
        return None

    def charge(self, tokens: int, cost: float) -> None:
        with self._lock:
            self._tokens += tokens
            self._cost += cost

    def spent(self) -> tuple[int, float]:
        with self._lock:
            return self._tokens, round(self._cost, 9)
