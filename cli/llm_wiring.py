"""`run`'s LLM options: parse them (P1), build the run's `LLMServices`, report usage.

`--llm-record FILE`, `--llm-replay FILE`, `--max-cost AMOUNT` and `--max-tokens N` are
what one invocation does, not settings (docs/configuration.md "Options of `run`").
A bad value is a usage error (exit 2) before anything is allocated.

The LLM runtime (`adapters/llm/runtime.py`, its HTTP client) is imported and built only
when a step needs it (`RunLLM`): a pipeline without an LLM step never loads it
(docs/performance.md "Start-up").
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runjournal.cli.compose import factories
from runjournal.cli.exit_codes import CliError
from runjournal.projections.llm_usage import usage_line

if TYPE_CHECKING:
    from runjournal.adapters.llm.budget import Budget
    from runjournal.adapters.llm.cassette import Cassette
    from runjournal.adapters.profiles import Profile
    from runjournal.domain.ports import TraceRecorder


@dataclass(frozen=True)
class LLMRequest:
    """The LLM options as given on the command line (strings, unchecked)."""

    record: str | None = None
    replay: str | None = None
    max_cost: str | None = None
    max_tokens: str | None = None


@dataclass
class LLMPlan:
    """The checked options: the budget and the cassettes, loaded."""

    budget: Budget
    record: Cassette | None
    replay: Cassette | None

    def view(self) -> dict[str, Any]:
        return {
            "max_cost": self.budget.max_cost,
            "max_tokens": self.budget.max_tokens,
            "record": self.record.path if self.record is not None else None,
            "replay": self.replay.path if self.replay is not None else None,
        }


def _number(flag: str, raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise CliError(f"invalid {flag} '{raw}': expected a number ≥ 0") from None
    if not math.isfinite(value) or value < 0:
        raise CliError(f"invalid {flag} '{raw}': expected a number ≥ 0")
    return value


def _count(flag: str, raw: str) -> int:
    text = raw.strip()
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise CliError(f"invalid {flag} '{raw}': expected an integer ≥ 1")
    return int(text)


def plan_llm(req: LLMRequest | None) -> LLMPlan:
    """P1: check the values and read the cassettes; nothing is written."""
    from runjournal.adapters.llm.budget import Budget

    req = req or LLMRequest()
    if req.record is not None and req.replay is not None:
        raise CliError("--llm-record and --llm-replay cannot be used together")
    budget = Budget(
        max_cost=_number("--max-cost", req.max_cost) if req.max_cost is not None else None,
        max_tokens=_count("--max-tokens", req.max_tokens) if req.max_tokens is not None else None,
    )
    if req.record is None and req.replay is None:
        return LLMPlan(budget=budget, record=None, replay=None)
    from runjournal.adapters.llm.cassette import Cassette, CassetteError

    try:
        record = (
            Cassette.load(os.path.abspath(req.record), missing_ok=True)
            if req.record is not None
            else None
        )
        replay = (
            Cassette.load(os.path.abspath(req.replay), missing_ok=False)
            if req.replay is not None
            else None
        )
    except CassetteError as exc:
        raise CliError(str(exc)) from None
    if record is not None and os.path.isdir(record.path):
        raise CliError(f"--llm-record {req.record}: is a directory")
    if record is not None and not os.path.isdir(os.path.dirname(record.path)):
        raise CliError(f"--llm-record {req.record}: no such directory")
    return LLMPlan(budget=budget, record=record, replay=replay)


class RunLLM:
    """The run's `LLMServices`, built on first use: when a step with a profile asks for
    its runtime, or at once when an LLM option was given (`--llm-record` saves its
    cassette at the end even if no call was made). A run that never builds them has
    nothing to stop and nothing to save."""

    def __init__(self, make: Callable[[], Any], *, eager: bool) -> None:
        self._make = make
        self._services: Any = make() if eager else None

    def runtime_for(self, profile: Profile) -> Any:
        if self._services is None:
            self._services = self._make()
        return self._services.runtime_for(profile)

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
    made: Any = None,
) -> RunLLM:
    """The run's LLM services (one per invocation; closed after the stages ran), made by
    the composition root's factory (cli/compose.py) when first needed."""
    made = made or factories()
    eager = plan.record is not None or plan.replay is not None or plan.budget.limited
    return RunLLM(
        lambda: made.llm_services(
            plan.budget, plan.record, plan.replay, text_trace, cache_dir, run_id
        ),
        eager=eager,
    )


def llm_report(usage_view: dict[str, Any], plan: LLMPlan) -> dict[str, Any]:
    """`run --json`'s `llm`: spent and saved, per step, and the limits of this invocation."""
    return {**usage_view, "limits": plan.view()}


def llm_summary_line(usage_view: dict[str, Any]) -> str | None:
    """The `llm:` line of `run`'s text output; None for a run without LLM calls."""
    spent, saved = usage_view["spent"], usage_view["saved"]
    if not (spent["attempts"] or saved["attempts"] or saved["calls"]):
        return None
    return usage_line(usage_view)
