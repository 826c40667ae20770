"""`runjournal plan PIPELINE`: the decisions a run would take, predicted; nothing is run.

Phase P1 and P3 of `run` (docs/internals.md "One run, phase by phase") without P2: no
journal is opened, no run id allocated, no module stage called, no LLM called, and the
cache root is read through a read-only view. A configuration error is one line, exit 2,
as for `run`; every prediction, a stop at a required predecessor included, is exit 0
(docs/operations.md "`plan`").
"""

from __future__ import annotations

from typing import Any

import click
from runjournal.cli.compose import plan_ports
from runjournal.cli.exit_codes import ExitCode
from runjournal.cli.output import emit_json
from runjournal.cli.run_cmd import parse_run
from runjournal.cli.settings.click_options import settings_flags
from runjournal.domain.planner import Outcome, Plan, Prediction


def _predict(
    pipeline: str, inputs: tuple[str, ...], opts: dict[str, Any]
) -> tuple[Plan, dict[str, Any]]:
    """P1 (`parse_run`, as `run` parses), then the plan use-case (app/plan.py)."""
    from runjournal.app.plan import plan as plan_use_case

    settings = parse_run(
        pipeline,
        flags=settings_flags(opts),
        inputs=inputs,
        overrides=opts["overrides"],
        recompute=opts["recompute"],
        with_llm=False,
    )
    result = plan_use_case(settings, plan_ports())
    return result.plan, result.document


def _row_label(p: Prediction) -> str:
    if p.outcome is Outcome.PENDING and p.waits_on is not None:
        return f"pending: waits on {p.waits_on.step} {p.waits_on.stage.value}"
    return p.outcome.value


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _usage_text(view: dict[str, Any]) -> str:
    basis = ", ".join(f"{k} {v}" for k, v in view["basis"].items() if v)
    text = f"{view['calls']} calls, {view['tokens']} tokens, cost {view['cost']:.6f}"
    return f"{text} ({basis})" if basis else text


def _mode_text(view: dict[str, Any]) -> str:
    """The requests had they all gone one way: prompt tokens, the expected cache hits, cost."""
    done, pending = view["executed"], view["pending"]
    text = f"{done['prompt_tokens']} prompt tokens"
    if done.get("cached_tokens"):
        text += f" (of which {done['cached_tokens']} cached)"
    text += f", cost {done['cost']:.6f}"
    if pending["calls"]:
        text += f"; pending stages {pending['cost']:.6f}"
    return text


def plan_lines(plan: Plan, doc: dict[str, Any]) -> list[str]:
    """The text output: a table per step by reason, totals, the estimate."""
    lines = [f"plan of '{doc['pipeline']}': predicted, nothing executed or written"]
    by_step: dict[str, list[Prediction]] = {}
    for p in plan.predictions:
        by_step.setdefault(p.where.step, []).append(p)
    for step, preds in by_step.items():
        counts = {o: sum(1 for p in preds if p.outcome is o) for o in Outcome}
        lanes = len({p.where.lane for p in preds})
        summary = ", ".join(f"{n} {o.value}" for o, n in counts.items() if n)
        lines.append(
            f"{step}: {_plural(len(preds), 'stage')} in {_plural(lanes, 'lane')}: {summary}"
        )
        rows: dict[tuple[int, str, str], int] = {}
        order = list(Outcome)
        for p in preds:
            key = (order.index(p.outcome), p.code.value, _row_label(p))
            rows[key] = rows.get(key, 0) + 1
        width = max(len(code) for _, code, _ in rows)
        for (_, code, label), n in sorted(rows.items()):
            lines.append(f"  {code.ljust(width)}  {n:>6}  {label}")
    counts = {o: sum(1 for p in plan.predictions if p.outcome is o) for o in Outcome}
    summary = ", ".join(f"{n} {o.value}" for o, n in counts.items() if n) or "nothing"
    lines.append(f"total: {_plural(len(plan.predictions), 'stage')}: {summary}")
    if plan.stopped is not None:
        s = plan.stopped.where
        lines.append(
            f"stops: required predecessor step '{s.step}' lane '{s.lane}' "
            f"{plan.stopped.code.value}: the run would fail here (exit 1), executing nothing"
        )
    calls = doc["estimate"]["module_calls"]
    text = f"module calls: {calls['certain']}"
    if calls["pending"]:
        text += f", up to {calls['certain'] + calls['pending']} if every pending stage executes"
    lines.append(text)
    llm = doc["estimate"]["llm"]
    if (
        any(llm[k]["calls"] or llm[k]["basis"]["unknown"] for k in ("executed", "pending"))
        or (llm["saved"]["calls"])
    ):
        lines.append(f"llm: estimated {_usage_text(llm['executed'])}")
        if llm["pending"]["calls"]:
            lines.append(f"llm: pending stages, if they execute: {_usage_text(llm['pending'])}")
        if llm["executed"]["calls"] or llm["pending"]["calls"]:
            for mode in ("online", "batch"):
                lines.append(f"llm: {mode.ljust(6)} {_mode_text(llm[mode])}")
        saved = llm["saved"]
        lines.append(
            f"llm: reuse saves {saved['calls']} calls, {saved['tokens']} tokens, "
            f"cost {saved['cost']:.6f}"
        )
    return lines


# --- the command ---------------------------------------------------------------------


def plan(opts: dict[str, Any], *, pipeline: str, inputs: tuple[str, ...]) -> int:
    """`runjournal plan` (declared in cli/main.py): the table, or one JSON document."""
    result, doc = _predict(pipeline, inputs, opts)
    if opts["as_json"]:
        emit_json(doc)
    else:
        click.echo("\n".join(plan_lines(result, doc)))
    return int(ExitCode.OK)
