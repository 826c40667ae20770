"""`--max-cost` and `--max-tokens`: one budget for every LLM call of a run invocation.

Checked before each request (retries included) and charged after each attempt, under
one lock, so concurrent calls share it. Once spent reaches a limit no new request is
made: the call fails with `budget_exhausted`; what finished is kept (docs/operations.md
"Budgets").
"""

from __future__ import annotations

import threading

from runjournal.domain.llm import FailureCause, LLMCallFailed


class Budget:
    def __init__(self, *, max_cost: float | None = None, max_tokens: int | None = None) -> None:
        self.max_cost = max_cost
        self.max_tokens = max_tokens
        self._lock = threading.Lock()
        self._tokens = 0
        self._cost = 0.0

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

    def charge(self, tokens: int, cost: float) -> None:
        with self._lock:
            self._tokens += tokens
            self._cost += cost

    def spent(self) -> tuple[int, float]:
        with self._lock:
            return self._tokens, round(self._cost, 9)
