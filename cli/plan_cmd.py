"""`runjournal plan PIPELINE`: the decisions a run would take, predicted; nothing is run.

Phase P1 and P3 of `run` (docs/internals.md "One run, phase by phase") without P2: no
journal is opened, no run id allocated, no module stage called, no LLM called, and the
cache root is read through a read-only view. A configuration error is one line, exit 2,
as for `run`; every prediction, a stop at a required predecessor included, is exit 0
(docs/operations.md "`plan`").
"""

from __future__ import annotations

import os
from typing import Any

import click
from runjournal.adapters.fsroot import FsError
from runjournal.adapters.module_stdout import module_stdout_to_stderr
from runjournal.adapters.pipeline_resolver import ResolutionError, resolve_pipeline
from runjournal.adapters.profiles import ProfileError
from runjournal.cli.compose import cache_view, factories
from runjournal.cli.errors import CliError, ExitCode
from runjournal.cli.output import emit_json
from runjournal.cli.overrides import check_overrides
from runjournal.cli.pipeline_input import load_pipeline_spec, resolve_config_and_profiles
from runjournal.cli.run_cmd import parse_overrides
from runjournal.cli.settings.options import settings_flags
from runjournal.domain.planner import Outcome, Plan, Planner, Prediction, Prices
from runjournal.domain.recompute import UnknownStepError, plan_recompute
from runjournal.domain.redaction import safe_error_text


def _predict(
    pipeline: str, inputs: tuple[str, ...], opts: dict[str, Any]
) -> tuple[Plan, dict[str, Any]]:
    """The plan and its `--json` document (docs/operations.md "JSON documents")."""
    spec, path = load_pipeline_spec(pipeline)
    config, user_profiles = resolve_config_and_profiles(spec, path, settings_flags(opts))
    overrides = parse_overrides(opts["overrides"])
    try:
        policy = plan_recompute(
            spec.step_ids, {s.id: s.consumes for s in spec.steps}, opts["recompute"]
        )
    except UnknownStepError as exc:
        raise CliError(str(exc)) from None
    pipeline_dir = os.path.dirname(path)
    modules = check_overrides(spec, pipeline_dir, overrides)
    try:
        profiles = factories().load_profiles(config.profiles_file, user_profiles=user_profiles)
        resolved, resolution = resolve_pipeline(
            spec,
            pipeline_dir=pipeline_dir,
            inputs_override=inputs or None,
            cwd=os.getcwd(),
            overrides=overrides,
            default_profile=config.profile,
            profiles=profiles,
            modules=modules,
        )
    except (ResolutionError, ProfileError) as exc:
        raise CliError(safe_error_text(f"{path}: {exc}")) from None
    prices = {
        step: Prices(
            input_per_million=p.client.prices.input_per_million,
            output_per_million=p.client.prices.output_per_million,
        )
        for step, p in resolution.profiles.items()
    }
    try:
        view = cache_view(config, spec.name)
    except FsError as exc:
        raise CliError(f"cache root {config.cache_root}: {exc}") from None
    try:
        resumed = config.resume or policy.active
        with module_stdout_to_stderr():  # a module's `reads` may print: never on stdout
            plan = Planner(
                loader=view if resumed else None,
                cache=view,
                plan_store=view.plans,
                policy=policy,
                prices=prices,
                scopes=view,
            ).plan(resolved)
    finally:
        view.close()
    return plan, {
        "pipeline": spec.name,
        "resume": config.resume,
        "recompute": {"selected": list(policy.selected), "forced": list(policy.forced)},
        "roots": {
            "output": config.output_root,
            "cache": config.cache_root,
            "debug": config.debug_root,
        },
        "decisions": plan.decisions(),
        "stages": [p.view() for p in plan.predictions],
        "stopped": plan.stopped.view() if plan.stopped else None,
        "estimate": plan.estimate(),
    }


# --- text --------------------------------------------------------------------------


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
