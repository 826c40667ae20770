"""Reuse summaries (docs/internals.md "Reuse summaries"): a fully reused lane recorded as
one `LaneReused`, expanded back into the decisions it stands for.

The runner of tests/unit/test_runner.py runs cold, then resumes twice from the same
checkpoints: once through a session with no earlier run to name (every decision its own
event, as before) and once through a session that can name the cold run.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.adapters.journal.journal_errors import JournalCorrupt
from runjournal.adapters.journal.reuse import SourceIndex, expand_summaries
from runjournal.domain.audit import audit_run
from runjournal.domain.decisions import CheckpointState, Stage, StageDigests, StageFacts
from runjournal.domain.events import LaneResolved, LaneReused, RunEvent, StageDecided
from runjournal.domain.lane_reuse import (
    LaneItems,
    LaneReuseMismatch,
    ReusedEvents,
    ReusedStage,
    ReusedUsage,
    expand,
    plain_reuse,
    reuse_digest,
    reused_fields,
    source_lanes,
    usage_event,
)
from runjournal.domain.llm import LLMUsage
from runjournal.domain.reasons import ReasonCode
from runjournal.domain.run import Run
from runjournal.domain.runner import PipelineRunner
from runjournal.domain.runner.ledger import BufferedRecorder
from unit.test_run_recorder import COMPONENTS, Journal
from unit.test_runner import DOCS, FakeStore, pipeline

COLD = "20261201T000000Z-c01dc01d"


class Resumed:
    """A cold run, and a resume of it through a session that may name the cold run."""

    def __init__(self, *, sources: bool, docs: dict[str, str] | None = None) -> None:
        self.store = FakeStore()
        self.cold = Journal()
        PipelineRunner(journal=self.cold.session, recorder=self.store).run(pipeline(DOCS))
        self.cold.session.flush()
        self.journal = Journal()
        if sources:
            self.journal.session._reuse_sources = SourceIndex(self.read, [COLD])
        runner = PipelineRunner(
            journal=self.journal.session, loader=self.store, recorder=self.store
        )
        runner.run(pipeline(docs or DOCS))
        self.journal.session.flush()

    def read(self, run_id: str) -> list[RunEvent]:
        return self.cold.stored if run_id == COLD else []

    def expanded(self) -> list[RunEvent]:
        return list(expand_summaries(self.journal.stored, self.read))


def content(events: list[RunEvent]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for event in events:
        if type(event) is LaneReused:
            continue
        fields = msgspec.to_builtins(event)
        for name in ("originator_id", "originator_version", "timestamp"):
            fields.pop(name)
        out.append((type(event).__name__, fields))
    return out


def test_a_fully_reused_lane_is_one_event_and_expands_to_the_old_decisions() -> None:
    old, new = Resumed(sources=False), Resumed(sources=True)
    summaries = [e for e in new.journal.stored if type(e) is LaneReused]
    assert summaries and not [e for e in new.journal.stored if type(e) is StageDecided]
    assert {s.source_run for s in summaries} == {COLD}
    decided = [e for e in old.journal.stored if type(e) is StageDecided]
    assert sum(s.count for s in summaries) == len(decided)
    assert content(new.expanded()) == content(old.journal.stored)
    # the listeners (live views) saw what a reader of the journal sees
    assert content(new.journal.seen) == content(new.expanded())
    assert new.journal.seen == new.expanded()


def test_the_audit_re_decides_every_stage_a_summary_stands_for() -> None:
    old, new = Resumed(sources=False), Resumed(sources=True)
    report = audit_run(new.expanded())
    assert report.ok, (report.differences, report.violations)
    assert report.decisions == audit_run(old.journal.stored).decisions > 0
    # raw (no expansion: recover, import) the run replays without a violation as well
    assert Run.replay(new.journal.stored).violations == []
    assert Run.replay(new.expanded()).violations == []


def test_a_lane_with_a_changed_chunk_keeps_its_decisions_and_the_others_are_summarized() -> None:
    docs = {**DOCS, "b.md": DOCS["b.md"] + "\nOne more paragraph here.\n"}
    new = Resumed(sources=True, docs=docs)
    summarized = {(e.step, e.lane) for e in new.journal.stored if type(e) is LaneReused}
    explicit = {(e.step, e.lane) for e in new.journal.stored if type(e) is StageDecided}
    assert ("words", "a.md") in summarized
    assert ("words", "b.md") in explicit and not summarized & explicit
    assert audit_run(new.expanded()).ok


def test_with_nothing_to_name_each_decision_is_its_own_event() -> None:
    new = Resumed(sources=True)
    # a source whose decisions differ (here: none at all) is not named
    again = Journal()
    again.session._reuse_sources = SourceIndex(lambda run_id: [], ["nothing"])
    PipelineRunner(journal=again.session, loader=new.store, recorder=new.store).run(pipeline(DOCS))
    again.session.flush()
    assert not [e for e in again.stored if type(e) is LaneReused]
    assert content(again.stored) == content(new.expanded())


def test_a_summary_that_does_not_match_its_source_is_refused() -> None:
    new = Resumed(sources=True)
    summary = next(e for e in new.journal.stored if type(e) is LaneReused)
    stages = [
        ReusedStage.of_event(e)
        for e in new.cold.stored
        if type(e) is StageDecided and (e.step, e.lane) == (summary.step, summary.lane)
    ]
    assert len(expand(summary, stages)) == summary.count
    with pytest.raises(LaneReuseMismatch, match="does not match"):
        expand(summary, stages[:-1])
    changed = [msgspec.structs.replace(stages[0], input="0" * 64), *stages[1:]]
    with pytest.raises(LaneReuseMismatch):
        expand(summary, changed)
    with pytest.raises(JournalCorrupt, match="is not in this journal"):
        list(expand_summaries(new.journal.stored, lambda run_id: []))


def test_an_expanded_decision_of_another_lane_or_beyond_the_count_breaks_the_replay() -> None:
    new = Resumed(sources=True)
    events = new.expanded()
    at = next(i for i, e in enumerate(events) if type(e) is LaneReused)
    summary = events[at]
    extra = msgspec.structs.replace(events[at + 1], chunk="x")
    beyond = [*events[: at + 1 + summary.count], extra, *events[at + 1 + summary.count :]]
    assert Run.replay(beyond).violations
    other = msgspec.structs.replace(events[at + 1], lane="elsewhere")
    moved = [*events[: at + 1], other, *events[at + 2 :]]
    assert Run.replay(moved).violations


def _facts(**kw: Any) -> StageFacts:
    digests = StageDigests(COMPONENTS, "i", "")
    return StageFacts(
        **{
            "stage": Stage.EXTRACT,
            "resumed": True,
            "checkpoint": CheckpointState.PRESENT,
            "current": digests,
            "recorded": digests,
            **kw,
        }
    )


def test_only_plain_reuse_is_summarized() -> None:
    assert plain_reuse(_facts(), ReasonCode.REUSED)
    assert not plain_reuse(_facts(forced=True), ReasonCode.REUSED)
    assert not plain_reuse(_facts(), ReasonCode.PREDECESSOR_REUSED)
    assert not plain_reuse(_facts(resumed=False), ReasonCode.REUSED)
    held = BufferedRecorder()
    held.lane_resolved(
        step="s",
        lane="l",
        components=COMPONENTS,
        lane_identity="id",
        dependencies=[],
        chunks=2,
        forced=False,
        reads={},
    )
    held.decided(step="s", lane="l", chunk="c1", facts=_facts(), code=ReasonCode.REUSED)
    assert held.summary() is None  # one decision: a summary would save nothing
    held.decided(step="s", lane="l", chunk="c2", facts=_facts(), code=ReasonCode.REUSED)
    held.artifact(artifact=None, warnings=[])  # type: ignore[arg-type]
    assert held.summary() == ("s", "l")
    held.executed(step="s", lane="l", stage=Stage.EXTRACT, chunk="c3", sha256="e", size=1)
    assert held.summary() is None  # anything executed keeps every decision its own event


def _lane_with_usage(request_sha256: str | None) -> BufferedRecorder:
    held = BufferedRecorder()
    held.lane_resolved(
        step="s",
        lane="l",
        components=COMPONENTS,
        lane_identity="id",
        dependencies=[],
        chunks=2,
        forced=False,
        reads={},
    )
    for chunk in ("c1", "c2"):
        held.decided(step="s", lane="l", chunk=chunk, facts=_facts(), code=ReasonCode.REUSED)
        held.llm_reused(
            step="s",
            lane="l",
            stage=Stage.EXTRACT,
            chunk=chunk,
            usage=LLMUsage(calls=1, attempts=1, prompt_tokens=3),
            request_sha256=request_sha256,
        )
    held.artifact(artifact=None, warnings=[])  # type: ignore[arg-type]
    return held


def test_a_reused_checkpoints_llm_usage_is_part_of_the_summary_a_stored_reply_is_not() -> None:
    held = _lane_with_usage(None)
    assert held.summary() == ("s", "l")
    assert [type(i) for i in held.reused] == [ReusedStage, ReusedUsage] * 2
    assert _lane_with_usage("r" * 64).summary() is None  # a stored reply: it executed


def test_the_digest_is_over_the_stages_in_order() -> None:
    a = ReusedStage(Stage.EXTRACT, "c1", "c1", "")
    b = ReusedStage(Stage.MERGE, "", "m", "")
    assert reuse_digest([a, b]) != reuse_digest([b, a])
    assert reuse_digest([a, b]) == reuse_digest(iter([a, b]))


# --- properties ---------------------------------------------------------------------------

_hex = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
_usage = st.builds(
    LLMUsage,
    calls=st.integers(0, 3),
    attempts=st.integers(0, 5),
    prompt_tokens=st.integers(0, 10_000),
    completion_tokens=st.integers(0, 10_000),
    cost=st.floats(0, 1, allow_nan=False).map(lambda c: round(c, 9)),
)
_decision = st.builds(ReusedStage, st.sampled_from(list(Stage)), _hex, _hex, st.just("") | _hex)
_lane_items = st.lists(
    st.tuples(_decision, st.none() | _usage).map(
        lambda du: (
            [du[0]] if du[1] is None else [du[0], ReusedUsage(du[0].stage, du[0].chunk, du[1])]
        )
    ),
    min_size=1,
    max_size=12,
).map(lambda groups: [item for group in groups for item in group])


@settings(max_examples=60, deadline=None)
@given(items=_lane_items)
def test_a_lane_journaled_explicitly_expands_back_from_its_summary(items: list) -> None:
    """Any lane's decisions and reused usage, journaled one by one, are what a summary
    naming that run expands to; one changed item is refused."""
    source = Journal()
    source.lane()
    for item in items:
        source.session._recorded(source.session.run.record_reused(step="s", lane="l", item=item))
    source.session.flush()
    lane = source_lanes("source", source.stored)[("s", "l")]
    assert (lane.count, lane.digest) == (len(items), reuse_digest(items))
    summarized = Journal()
    summarized.lane()
    summarized.session._reuse_sources = SourceIndex(lambda run_id: source.stored, ["source"])
    summarized.session.lane_reused(step="s", lane="l", stages=items)
    summarized.session.flush()
    stored = summarized.stored
    assert [type(e) for e in stored[-1:]] == [LaneReused]
    expanded = list(expand_summaries(stored, lambda run_id: source.stored))
    explicit = [e for e in source.stored if type(e) is not LaneResolved][1:]
    assert content(expanded[len(stored) :]) == content(explicit)
    assert summarized.seen == expanded
    changed = [msgspec.structs.replace(items[0], chunk="x" * 64), *items[1:]]
    with pytest.raises(LaneReuseMismatch):
        expand(stored[-1], changed)


@settings(max_examples=60, deadline=None)
@given(
    items=_lane_items,
    lanes=st.lists(st.sampled_from(["l", "docs/a.md", "é"]), min_size=1, max_size=12),
)
def test_reused_events_are_the_events_built_from_their_fields(items: list, lanes: list) -> None:
    """`ReusedEvents` builds each event from the first of its type (issue 29: a no-op
    resume expands every decision of its summaries): equal, field by field and encoded,
    to the event built from keyword arguments, each with its own `recorded` dict."""
    origin = _origin(3)
    built = ReusedEvents(origin)
    encode = msgspec.msgpack.encode
    for i, item in enumerate(items):
        step, lane = f"s{i % 2}", lanes[i % len(lanes)]
        if type(item) is ReusedStage:
            got: RunEvent = built.decision(step, lane, item)
            want: RunEvent = StageDecided(**origin, **reused_fields(step, lane, item))
        else:
            got, want = built.usage(step, lane, item), usage_event(origin, step, lane, item)
        assert type(got) is type(want)
        assert got == want
        assert encode(got) == encode(want)
    decisions = [built.decision("s", "l", ReusedStage(Stage.MERGE, "", "i", "")) for _ in "ab"]
    assert decisions[0].recorded is not decisions[1].recorded


# --- a lane executed with LLM calls as the source of its first no-op resume -------------


def _origin(version: int) -> dict[str, Any]:
    import datetime
    import uuid

    return {
        "originator_id": uuid.UUID(int=7),
        "originator_version": version,
        "timestamp": datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC),
    }


def _decided(version: int, chunk: str, **kw: Any) -> StageDecided:
    stage = ReusedStage(Stage.EXTRACT, chunk, "in-" + chunk, "d")
    fields = {**reused_fields("s", "l", stage), **kw}
    return StageDecided(**_origin(version), **fields)


def _attempt(version: int, chunk: str, attempt: int, tokens: int, cost: float):  # type: ignore[no-untyped-def]
    from runjournal.domain.events import LLMCallAttempted
    from runjournal.domain.llm import AttemptStatus

    return LLMCallAttempted(
        **_origin(version), step="s", lane="l", stage=Stage.EXTRACT, chunk=chunk, call=1,
        attempt=attempt, profile_id="p", provider="openai", model="m",
        status=AttemptStatus.OK if attempt == 2 else AttemptStatus.RATE_LIMITED,
        prompt_tokens=tokens, completion_tokens=1, cost=cost, request_sha256="r" * 64,
    )  # fmt: skip


def test_an_executed_lane_names_its_attempts_as_the_usage_its_resume_journals() -> None:
    """The cold run decided both extracts, then executed them (two attempts each, after
    the decisions); its first no-op resume journals each decision followed by its
    checkpoint's usage (`LLMUsage.of` the attempts). The digests agree, so the resume's
    lane can be a summary naming the cold run (it could not before: the cold run's
    digest had no usage in it)."""
    cold = [
        _decided(1, "c1", code=ReasonCode.NOT_RESUMED, resumed=False),
        _decided(2, "c2", code=ReasonCode.NOT_RESUMED, resumed=False),
        _attempt(3, "c1", 1, 10, 0.1),
        _attempt(4, "c1", 2, 10, 0.2),
        _attempt(5, "c2", 1, 20, 0.3),
        _attempt(6, "c2", 2, 20, 0.4),
    ]
    spent = {"c1": LLMUsage.of(cold[2:4]), "c2": LLMUsage.of(cold[4:6])}  # type: ignore[arg-type]
    assert spent["c1"] == LLMUsage(
        calls=1, attempts=2, prompt_tokens=20, completion_tokens=2, cost=0.3
    )
    resumed: list[Any] = []
    for chunk in ("c1", "c2"):
        resumed += [ReusedStage(Stage.EXTRACT, chunk, "in-" + chunk, "d")]
        resumed += [ReusedUsage(Stage.EXTRACT, chunk, spent[chunk])]
    (lane,) = source_lanes(COLD, cold).values()
    assert (lane.count, lane.digest) == (4, reuse_digest(resumed))
    items = LaneItems()
    for event in cold:
        items.add(event)
    taken = items.take()
    assert [item for item, _event in taken] == resumed
    assert [type(event).__name__ for _item, event in taken] == [
        "StageDecided", "LLMUsageReused", "StageDecided", "LLMUsageReused"
    ]  # fmt: skip
    # attempts of a stage this lane did not decide: no summary stands for it
    items.add(cold[0])
    items.add(_attempt(7, "c9", 1, 1, 0.0))
    assert [item for item, _event in items.take()][-1] is None
