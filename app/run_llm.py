"""The run's LLM runtime, built on first use, and its usage report.

The LLM runtime (`adapters/llm/runtime.py`, its HTTP client) is imported and built only
when a step needs it (`RunLLM`): a pipeline without an LLM step never loads it
(docs/performance.md "Start-up"). The checked options (`LLMPlan`) come from P1
(cli/llm_wiring.py `plan_llm`).
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runjournal.adapters.llm.budget import Budget
    from runjournal.adapters.llm.cassette import Cassette
    from runjournal.adapters.profiles import Profile
    from runjournal.domain.ports import TraceRecorder


@dataclass
class LLMPlan:
    """The checked options: the budget and the cassettes, loaded."""

    budget: Budget
    record: Cassette | None
    replay: Cassette | None
    no_wait: bool = False  # batch mode: submit, then stop (docs/operations.md "Batch runs")

    def view(self) -> dict[str, Any]:
        return {
            "max_cost": self.budget.max_cost,
            "max_tokens": self.budget.max_tokens,
            "record": self.record.path if self.record is not None else None,
            "replay": self.replay.path if self.replay is not None else None,
        }


class RunLLM:
    """The run's `LLMServices`, built on first use: when a step with a profile asks for
    its runtime, or at once when an LLM option was given (`--llm-record` saves its
    cassette at the end even if no call was made). A run that never builds them has
    nothing to stop and nothing to save."""

    def __init__(
        self,
        make: Callable[[], Any],
        *,
        eager: bool,
        journaled: Callable[[], Container[tuple[str, str, str, str, int, int]]] | None = None,
    ) -> None:
        self._make = make
        # what the journal holds of the run's attempts: the call log lets go of their
        # lines as it goes (adapters/llm/calllog.py `WriteAhead.journaled`)
        self._journaled = journaled
        self._services: Any = self._build() if eager else None

    def _build(self) -> Any:
        services = self._make()
        wal = getattr(services, "wal", None)
        if wal is not None and self._journaled is not None:
            wal.journaled = self._journaled
        return services

    def runtime_for(self, profile: Profile) -> Any:
        if self._services is None:
            self._services = self._build()
        return self._services.runtime_for(profile)

    def client_needed(self) -> None:
        """A stage executes: the client's import may start (`LLMServices.client_needed`)."""
        if self._services is not None:
            self._services.client_needed()

    def stop(self) -> None:
        if self._services is not None:
            self._services.stop()

    def refuse_new(self) -> None:
        """The first SIGINT: no request starts from now on; those in flight go on."""
        if self._services is not None:
            self._services.wal.refuse_new()

    def settle(
        self,
        journaled: set[tuple[str, str, str, str, int, int]],
        *,
        drain: float = 0.0,
        expired: Callable[[], bool] | None = None,
    ) -> list[Any]:
        """The attempts made that the journal lacks (`PendingAttempt`s), after waiting up
        to `drain` s for the requests in flight (docs/operations.md "LLM call log")."""
        if self._services is None:
            return []
        wal = self._services.wal
        if drain > 0:
            wal.drain(drain, expired)
        return wal.pending(journaled)

    def finish(self, *, settled: bool) -> None:
        """Close the intent log; removed when every attempt it holds is journaled."""
        if self._services is not None:
            self._services.wal.close(settled=settled)

    def close(self) -> list[str]:
        return self._services.close() if self._services is not None else []


def build_services(
    plan: LLMPlan,
    text_trace: TraceRecorder | None,
    cache_dir: str | None = None,
    run_id: str | None = None,
    *,
    made: Any,
    packed: Any = None,
    mode: str | None = None,
    parking: Callable[[int], None] | None = None,
    journal: Any = None,
    prefetch_client: bool = True,
    journaled: Callable[[], Container[tuple[str, str, str, str, int, int]]] | None = None,
) -> RunLLM:
    """The run's LLM services (one per invocation; closed after the stages ran), made by
    the composition root's factory (`made.llm_services`, cli/compose.py) when first
    needed."""
    eager = plan.record is not None or plan.replay is not None or plan.budget.limited
    batch = {"mode": mode, "no_wait": plan.no_wait, "parking": parking, "journal": journal}
    batch["packed"] = packed
    batch["prefetch_client"] = prefetch_client
    return RunLLM(
        lambda: made.llm_services(
            plan.budget, plan.record, plan.replay, text_trace, cache_dir, run_id, **batch
        ),
        eager=eager,
        journaled=journaled,
    )


def llm_report(usage_view: dict[str, Any], plan: LLMPlan) -> dict[str, Any]:
    """`run --json`'s `llm`: spent and saved, per step, and the limits of this invocation."""
    return {**usage_view, "limits": plan.view()}
