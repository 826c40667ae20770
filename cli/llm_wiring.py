"""`run`'s LLM options: parse them (P1); the `llm:` line of the run summary.

`--llm-record FILE`, `--llm-replay FILE`, `--max-cost AMOUNT` and `--max-tokens N` are
what one invocation does, not settings (docs/configuration.md "Options of `run`").
A bad value is a usage error (exit 2) before anything is allocated.

The run's `LLMServices` are built on first use by app/run_llm.py (`RunLLM`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from runjournal.app.run_llm import LLMPlan
from runjournal.cli.exit_codes import CliError
from runjournal.projections.llm_usage import usage_line


@dataclass(frozen=True)
class LLMRequest:
    """The LLM options as given on the command line (strings, unchecked)."""

    record: str | None = None
    replay: str | None = None
    max_cost: str | None = None
    max_tokens: str | None = None
    no_wait: bool = False


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
        return LLMPlan(budget=budget, record=None, replay=None, no_wait=req.no_wait)
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
    return LLMPlan(budget=budget, record=record, replay=replay, no_wait=req.no_wait)


def llm_summary_line(usage_view: dict[str, Any]) -> str | None:
    """The `llm:` line of `run`'s text output; None for a run without LLM calls."""
    spent, saved = usage_view["spent"], usage_view["saved"]
    if not (spent["attempts"] or saved["attempts"] or saved["calls"]):
        return None
    return usage_line(usage_view)


def cassette_content(path: str, what: str) -> Any:
    """The prompts and replies of a recorded cassette named on the command line, as a
    trace's content attributes (`journal otel --content`, `run --otel-content`)."""
    from runjournal.adapters.llm.cassette import Cassette, CassetteError
    from runjournal.adapters.otel_export import cassette_content as content_of

    try:
        cassette = Cassette.load(os.path.abspath(path), missing_ok=False)
    except CassetteError as exc:
        raise CliError(f"{what}: {exc}") from None
    return content_of(cassette)
