"""`explain RUN`: a summary by step and reason first, then the decisions asked for.

Works on the reasons view (`projections/reasons_report.py`): the header says how the run
ended and what became of its stages; the summary has one line per step and reason code
with its count (and the components that differed), counting only decisions that took
effect, then the decisions whose stage never started, and each reason's description once
at the end. A run of at most `LIST_UP_TO` decisions lists them all; a larger one only
with `--lane`, `--code`, `--executed`, `--changed` or `--step`, at most `--limit`
(docs/operations.md "`explain`").
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from runjournal.cli.exit_codes import CliError
from runjournal.cli.style import Styler
from runjournal.domain.events import LeaseWaitOutcome
from runjournal.domain.reasons import CATEGORY_OF, DESCRIPTIONS, Category, ReasonCode
from runjournal.projections.llm_batches import batch_lines
from runjournal.projections.llm_usage import usage_line
from runjournal.projections.stage_outcomes import Outcome

DEFAULT_LIMIT = 50
LIST_UP_TO = 20  # a run with this many decisions or fewer lists them without a selection
# Categories whose decisions did not run the stage: reused, or refused before running.
_NOT_EXECUTED = frozenset({Category.REUSE, Category.PREDECESSOR_FAILURE})


@dataclass(frozen=True)
class Selection:
    """What the user asked to see; `any` when some decision filter is given."""

    step: str | None = None
    lane: str | None = None
    code: str | None = None
    executed: bool = False
    changed: bool = False
    limit: int | None = None

    @property
    def any(self) -> bool:
        return bool(
            self.step or self.lane or self.code or self.executed or self.changed or self.limit
        )

    def matches(self, decision: dict[str, Any]) -> bool:
        category = CATEGORY_OF[ReasonCode(decision["code"])]
        if self.code is not None and decision["code"] != self.code:
            return False
        if self.executed and (
            category in _NOT_EXECUTED
            or decision["outcome"] in (Outcome.NOT_STARTED, Outcome.DEDUPLICATED)
        ):
            return False
        return not (self.changed and category is not Category.INVALID)


def check_selection(selection: Selection, view: dict[str, Any], run_id: str) -> None:
    """An unknown --code or --lane is a usage error naming the closest one."""
    if selection.code is not None and selection.code not in {c.value for c in ReasonCode}:
        close = difflib.get_close_matches(selection.code, [c.value for c in ReasonCode], n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise CliError(f"--code {selection.code!r} is not a reason code{hint} (see `reasons`)")
    if selection.lane is not None:
        lanes = sorted({lane["lane"] for s in view["steps"] for lane in s["lanes"]})
        if selection.lane not in lanes:
            close = difflib.get_close_matches(selection.lane, lanes, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise CliError(f"run {run_id} has no lane {selection.lane!r}{hint}")
    if selection.limit is not None and selection.limit < 1:
        raise CliError("--limit must be at least 1")


def select(view: dict[str, Any], selection: Selection) -> dict[str, Any]:
    """The view with only the selected decisions (same shape; counts recomputed)."""
    steps = []
    totals: dict[str, int] = {}
    not_started: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    for s in view["steps"]:
        lanes = []
        for lane in s["lanes"]:
            if selection.lane is not None and lane["lane"] != selection.lane:
                continue
            decisions = [d for d in lane["decisions"] if selection.matches(d)]
            if not decisions:
                continue
            stages: dict[str, dict[str, int]] = {}
            for d in decisions:
                if d["category"] != Category.FAILURE:  # a failed stage counts once
                    outcomes[d["outcome"]] = outcomes.get(d["outcome"], 0) + 1
                if d["outcome"] in (Outcome.NOT_STARTED, Outcome.DEDUPLICATED):
                    not_started[d["code"]] = not_started.get(d["code"], 0) + 1
                    continue
                codes = stages.setdefault(d["stage"], {})
                codes[d["code"]] = codes.get(d["code"], 0) + 1
                totals[d["code"]] = totals.get(d["code"], 0) + 1
            lanes.append({"lane": lane["lane"], "stages": stages, "decisions": decisions})
        if lanes:
            steps.append({"step": s["step"], "lanes": lanes})
    failures = [
        f
        for f in view["failures"]
        if (selection.lane is None or f["lane"] == selection.lane)
        and (selection.code is None or f["reason_code"] == selection.code)
    ]
    return {
        **view,
        "totals": dict(sorted(totals.items())),
        "not_started": dict(sorted(not_started.items())),
        "outcomes": dict(sorted(outcomes.items())),
        "steps": steps,
        "failures": failures,
    }


def summary(view: dict[str, Any], *, started: bool = True) -> list[dict[str, Any]]:
    """One row per step and reason code: count, lanes, stages and what differed; of the
    decisions that took effect (`started=False`: of those whose stage never started)."""
    rows: list[dict[str, Any]] = []
    for s in view["steps"]:
        by_code: dict[str, dict[str, Any]] = {}
        for lane in s["lanes"]:
            for d in lane["decisions"]:
                if (d["outcome"] != Outcome.NOT_STARTED) is not started:
                    continue
                row = by_code.setdefault(
                    d["code"],
                    {
                        "step": s["step"],
                        "code": d["code"],
                        "category": d["category"],
                        "count": 0,
                        "lanes": set(),
                        "stages": {},
                        "differs": set(),
                    },
                )
                row["count"] += 1
                row["lanes"].add(lane["lane"])
                row["stages"][d["stage"]] = row["stages"].get(d["stage"], 0) + 1
                row["differs"].update(d["differs"])
        for row in by_code.values():
            rows.append({**row, "lanes": len(row["lanes"]), "differs": sorted(row["differs"])})
    return rows


def decisions(view: dict[str, Any]) -> list[dict[str, Any]]:
    """Every decision of the view, flat, in journal order within each step and lane."""
    return [
        {"step": s["step"], "lane": lane["lane"], **d}
        for s in view["steps"]
        for lane in s["lanes"]
        for d in lane["decisions"]
    ]


def json_document(view: dict[str, Any], selection: Selection) -> dict[str, Any]:
    """`explain --json`: the reasons view as is; with a selection, the selected part of
    it plus `summary`, `matched` and `limit` (and at most `limit` decisions listed)."""
    if not selection.any:
        return view
    chosen = select(view, selection)
    limit = selection.limit or DEFAULT_LIMIT
    matched = sum(chosen["totals"].values()) + sum(chosen["not_started"].values())
    left = limit
    for s in chosen["steps"]:
        for lane in s["lanes"]:
            lane["decisions"] = lane["decisions"][: max(left, 0)]
            left -= len(lane["decisions"])
    return {**chosen, "summary": summary(chosen), "matched": matched, "limit": limit}


def _stages(stages: dict[str, int]) -> str:
    return ", ".join(f"{stage} {n}" for stage, n in stages.items())


# What the header adds for a run that did not finish (docs/operations.md "`explain`").
_ENDED = {
    "interrupted": "stopped by a signal",
    "abandoned": "its process died; `recover` recorded it abandoned",
    "running": "no terminal event: still running, or killed (`recover` marks it abandoned)",
    "failed": "a stage failed",
}
_OUTCOME_ORDER = (
    Outcome.EXECUTED,
    Outcome.REUSED,
    Outcome.DEDUPLICATED,
    Outcome.REFUSED,
    Outcome.FAILED,
    Outcome.NOT_STARTED,
)


def outcome_line(outcomes: dict[str, int]) -> str:
    """`7 executed, 5 not started`: the stages by what became of them, in a fixed order."""
    parts = [
        f"{outcomes[o]} {o.value.replace('_', ' ')}" for o in _OUTCOME_ORDER if outcomes.get(o)
    ]
    return ", ".join(parts) or "none"


def _summary_lines(rows: list[dict[str, Any]], paint: Styler) -> list[str]:
    width = max((len(r["step"]) for r in rows), default=4)
    lines = []
    for row in rows:
        lanes = f"{row['lanes']} lane{'s' if row['lanes'] != 1 else ''}"
        note = f"  (differs: {', '.join(row['differs'])})" if row["differs"] else ""
        code = paint.code(f"{row['code']:<24}", row["code"])
        lines.append(
            f"  {row['step']:<{width}}  {code} "
            f"x{row['count']:<5} {lanes}; {_stages(row['stages'])}{note}"
        )
    return lines


def _header(
    run_id: str, view: dict[str, Any], chosen: dict[str, Any], selection: Selection, paint: Styler
) -> list[str]:
    status = str(view["status"])
    shown = paint.status(status, status)
    totals = ", ".join(f"{paint.code(k, k)} {v}" for k, v in chosen["totals"].items()) or "none"
    head = f"run {run_id} ({shown}): {totals}"
    if selection.any:
        count = sum(chosen["totals"].values()) + sum(chosen["not_started"].values())
        every = sum(view["totals"].values()) + sum(view["not_started"].values())
        head = f"run {run_id} ({shown}): {count} of {every} decisions match: {totals}"
    lines = [head]
    ended = _ENDED.get(status)
    stages = f"stages: {outcome_line(chosen['outcomes'])}"
    lines.append(f"{stages} ({status}: {ended})" if ended else stages)
    return lines


def lease_lines(waits: list[dict[str, Any]]) -> list[str]:
    """What the run waited for: one line per run whose stage leases it waited for
    (docs/operations.md "Concurrent runs")."""
    by_holder: dict[str, list[dict[str, Any]]] = {}
    for wait in waits:
        by_holder.setdefault(str(wait["holder"]), []).append(wait)
    lines = []
    for holder, found in by_holder.items():
        steps = ", ".join(dict.fromkeys(str(w["step"]) for w in found))
        line = f"waited: for run {holder}, which was executing {len(found)} stage(s) ({steps})"
        stuck = sum(1 for w in found if w["outcome"] == LeaseWaitOutcome.DEADLOCK)
        if stuck:
            line += f"; {stuck} went on without its lease (the runs waited on each other)"
        lines.append(line)
    return lines


def text_lines(run_id: str, view: dict[str, Any], selection: Selection, paint: Styler) -> list[str]:
    chosen = select(view, selection) if selection.any else view
    lines = _header(run_id, view, chosen, selection, paint)
    llm = view["llm"]
    if llm["spent"]["attempts"] or llm["saved"]["calls"]:
        lines.append(f"llm: {usage_line(llm)}")
    lines += lease_lines(view.get("lease_waits", []))
    lines += batch_lines(view.get("llm_batches", []))
    rows = summary(chosen)
    lines += _summary_lines(rows, paint)
    never = summary(chosen, started=False)
    if never:
        lines.append("not started (decided, never executed: the run stopped before them):")
        lines += _summary_lines(never, paint)
    flat = decisions(chosen)
    listing = selection.any or len(flat) <= LIST_UP_TO
    if listing:
        limit = selection.limit or DEFAULT_LIMIT
        if flat:
            lines.append("decisions:")
        for d in flat[:limit]:
            chunk = f" {d['chunk'][:12]}" if d["chunk"] else ""
            note = f"  (differs: {', '.join(d['differs'])})" if d["differs"] else ""
            if d.get("batches"):
                note += f"  (batch {', '.join(d['batches'])})"
            if d["outcome"] == Outcome.NOT_STARTED:
                note += "  (not started)"
            elif d["outcome"] == Outcome.DEDUPLICATED:
                note += "  (deduplicated: an identical chunk of this run ran)"
            lines.append(
                f"  {d['step']} · {d['lane']} · {d['stage']}{chunk}  "
                f"{paint.code(d['code'], d['code'])}{note}"
            )
        if len(flat) > limit:
            lines.append(f"  … and {len(flat) - limit} more (--limit N shows more)")
    codes = [r["code"] for r in rows + never]
    if codes:
        lines.append("reasons:")
        for code in dict.fromkeys(codes):
            lines.append(f"  {paint.code(f'{code:<24}', code)} {DESCRIPTIONS[ReasonCode(code)]}")
    for f in chosen["failures"]:
        cause = f" ({f['cause']})" if f.get("cause") else ""
        lines.append(
            f"failed: step '{f['step']}' lane '{f['lane']}' {f['reason_code']}{cause}: "
            f"{f['message']}"
        )
    for p in chosen.get("partial", []):  # a `partial = true` step's lane (--keep-going)
        lines.append(f"partial: step '{p['step']}' lane '{p['lane']}': {p['message']}")
    if not listing:
        lines.append(
            "drill down: --step STEP, --lane LANE, --code CODE, --executed, --changed, "
            f"--limit N ({len(flat)} decisions: more than {LIST_UP_TO} are summarised)"
        )
    return lines
