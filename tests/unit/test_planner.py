"""The planner through the runner's ports, against the runner itself (in-memory fakes)."""

from __future__ import annotations

import pytest
from runjournal.domain.decisions import Stage
from runjournal.domain.events import StageDecided
from runjournal.domain.planner import Outcome, Planner, PredictionCode, Prices, StageRef
from runjournal.domain.reasons import ReasonCode
from runjournal.domain.recompute import plan_recompute
from unit.test_runner import CALLS, DOCS, FakeStore, pipeline, run


def predict(pipe, store, *, resume=True, recompute=(), prices=None):
    policy = plan_recompute(
        [s.id for s in pipe.steps], {s.id: s.consumes for s in pipe.steps}, recompute
    )
    before = dict(store.files)
    CALLS.clear()
    plan = Planner(
        loader=store if (resume or recompute) else None,
        cache=store,
        plan_store=None,
        policy=policy,
        prices=prices or {},
    ).plan(pipe)
    assert not CALLS, "the planner called a module"
    assert store.files == before, "the planner wrote a checkpoint"
    return plan


def assert_matches(plan, sink):
    decided = [(f.step, f.lane, f.stage, f.chunk, f.code) for f in sink.of(StageDecided)]
    assert len(plan.predictions) == len(decided)
    for p, (step, lane, stage, chunk, code) in zip(plan.predictions, decided, strict=True):
        assert p.where == StageRef(step, lane, stage, chunk)
        assert code in p.possible
        if p.code is not PredictionCode.UPSTREAM_PENDING:
            assert p.code is code and p.possible == (code,)


def test_a_changed_producer_makes_its_consumer_pending_on_its_normalize():
    store = FakeStore()
    run(pipeline(DOCS), store)
    changed = pipeline(DOCS, words_tag="b")
    plan = predict(changed, store)
    words = [p for p in plan.predictions if p.where.step == "words"]
    assert {p.code for p in words} == {ReasonCode.CONFIG_CHANGED}
    count = [p for p in plan.predictions if p.where.step == "count"]
    assert {p.code for p in count} == {PredictionCode.UPSTREAM_PENDING}
    first = count[0]
    assert first.waits_on == StageRef("words", "a.md", Stage.NORMALIZE)
    assert first.possible == (ReasonCode.REUSED, ReasonCode.DEPENDENCY_INVALIDATED)
    merge = next(p for p in count if p.where.stage is Stage.MERGE)
    assert merge.waits_on is not None and merge.waits_on.stage is Stage.EXTRACT
    _outcome, sink = run(changed, store, resume=True)
    assert_matches(plan, sink)
    estimate = plan.estimate()
    assert estimate["module_calls"] == {
        "certain": len(words),
        "pending": len(count),
    }


def test_early_cutoff_is_pending_and_resolves_to_reused():
    store = FakeStore()
    run(pipeline(DOCS), store)
    edited = dict(DOCS, **{"b.md": "Omega, sigma.\n\nRho upsilon phi chi.\n"})
    plan = predict(pipeline(edited), store)
    assert plan.decisions()["input_changed"] == 2  # words and count see the new chunk
    _outcome, sink = run(pipeline(edited), store, resume=True)
    assert_matches(plan, sink)
    merge = [f for f in sink.of(StageDecided) if f.step == "words" and f.lane == "b.md"]
    assert merge[-2].code is ReasonCode.REUSED  # same words: the merge was a hit


def test_recompute_restores_first_and_a_missing_predecessor_stops_the_plan():
    store = FakeStore()
    run(pipeline(DOCS), store)
    plan = predict(pipeline(DOCS), store, recompute=("count",))
    assert plan.stopped is None
    assert [p.code for p in plan.predictions[:2]] == [ReasonCode.PREDECESSOR_REUSED] * 2
    assert {p.code for p in plan.predictions[2:]} == {ReasonCode.FORCED_RECOMPUTE}
    plan = predict(pipeline(DOCS), FakeStore(), recompute=("count",))
    assert plan.stopped is plan.predictions[-1] and len(plan.predictions) == 1
    assert plan.stopped.code is ReasonCode.PREDECESSOR_MISSING
    assert plan.stopped.outcome is Outcome.FAILED


def test_llm_estimate_from_chunk_sizes_without_a_checkpoint():
    plan = predict(
        pipeline(DOCS), FakeStore(), resume=False, prices={"words": Prices(input_per_million=2.0)}
    )
    executed = plan.estimate()["llm"]["executed"]
    extracts = [
        p for p in plan.predictions if p.where.step == "words" and p.where.stage is Stage.EXTRACT
    ]
    assert executed["basis"] == {
        "checkpoint": 0,
        "chunk_size": len(extracts),
        "prompt": 0,
        "unknown": 4,
    }
    assert executed["calls"] == len(extracts)
    assert executed["cost"] == pytest.approx(executed["prompt_tokens"] * 2.0 / 1e6)
