"""`audit_run`: every recorded decision re-decided from its facts, and the journal invariants.

Pure tests on synthetic runs built like the runner builds them and a hypothesis property
over arbitrary facts. The journal-backed tests (a tampered stored row, the committed v1
journal, both backends) are in tests/integration/test_audit_journal.py.
"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.domain.audit import Problem, Verdict, audit_run
from runjournal.domain.decisions import (
    CheckpointState,
    PredecessorState,
    Stage,
    StageDigests,
    StageFacts,
    decide_stage,
)
from runjournal.domain.events import (
    CheckpointWritten,
    LaneResolved,
    RunAllocated,
    RunEvent,
    RunTerminated,
    StageDecided,
    StageExecuted,
    TerminalPersistenceFailed,
    WarningRecorded,
)
from runjournal.domain.identity import ArtifactRef, LaneComponents, dependencies_digest
from runjournal.domain.reasons import Category, ReasonCode
from support import synthetic as syn


def renumber(events: list[RunEvent]) -> list[RunEvent]:
    return [msgspec.structs.replace(e, originator_version=i) for i, e in enumerate(events, start=1)]


def replace_decision(events: list[RunEvent], index: int, **changes: object) -> list[RunEvent]:
    """Replace fields of the index-th StageDecided (0-based)."""
    out = list(events)
    positions = [i for i, e in enumerate(out) if isinstance(e, StageDecided)]
    out[positions[index]] = msgspec.structs.replace(out[positions[index]], **changes)
    return out


@pytest.fixture(scope="module")
def cold() -> syn.SyntheticRun:
    return syn.synthetic_run(syn.run_id_for(1), lanes=2, chunks=3)


@pytest.fixture(scope="module")
def resume(cold: syn.SyntheticRun) -> syn.SyntheticRun:
    return syn.synthetic_run(syn.run_id_for(2), previous=cold, changed=frozenset({(1, 1)}))


class TestCleanRuns:
    def test_cold_resume_and_forced_runs_audit_clean(
        self, cold: syn.SyntheticRun, resume: syn.SyntheticRun
    ) -> None:
        forced = syn.synthetic_run(syn.run_id_for(3), previous=cold, forced=True)
        codes = set()
        for run in (cold, resume, forced):
            report = audit_run(run.events)
            assert report.verdict is Verdict.OK and report.ok
            assert report.differences == [] and report.violations == []
            assert report.decisions == len(run.decisions)
            assert report.events == len(run.events)
            assert report.run_id == run.run_id
            codes |= {d.code for d in run.decisions}
        assert {
            ReasonCode.NOT_RESUMED,
            ReasonCode.REUSED,
            ReasonCode.INPUT_CHANGED,
            ReasonCode.STAGE_INPUT_CHANGED,
            ReasonCode.FORCED_RECOMPUTE,
        } <= codes

    def test_component_changes_are_redecided(self, cold: syn.SyntheticRun) -> None:
        for name, code in (
            ("config", ReasonCode.CONFIG_CHANGED),
            ("validators", ReasonCode.VALIDATOR_CHANGED),
            ("profile_source", ReasonCode.PROFILE_SOURCE_CHANGED),
        ):
            components = msgspec.structs.replace(syn.COMPONENTS, **{name: syn.h(name + "2")})
            run = syn.synthetic_run(syn.run_id_for(4), previous=cold, components=components)
            assert {d.code for d in run.decisions} == {code}
            assert all(d.recorded == {name: getattr(syn.COMPONENTS, name)} for d in run.decisions)
            assert audit_run(run.events).ok

    def test_terminal_persistence_failure_may_follow_termination(
        self, cold: syn.SyntheticRun
    ) -> None:
        last = cold.events[-1]
        extra = TerminalPersistenceFailed(
            originator_id=last.originator_id,
            originator_version=last.originator_version + 1,
            timestamp=last.timestamp,
            target="report",
            message="disk full",
        )
        assert audit_run([*cold.events, extra]).ok


class TestDifferences:
    def test_a_tampered_code_is_named_with_its_scope(self, resume: syn.SyntheticRun) -> None:
        index = next(
            i for i, d in enumerate(resume.decisions) if d.code is ReasonCode.INPUT_CHANGED
        )
        original = resume.decisions[index]
        events = replace_decision(
            resume.events, index, code=ReasonCode.REUSED, category=Category.REUSE
        )
        report = audit_run(events)
        assert report.verdict is Verdict.DIFFERENT and not report.ok
        assert [d.problem for d in report.differences] == [Problem.CODE]
        diff = report.differences[0]
        assert (diff.version, diff.step, diff.lane, diff.stage, diff.chunk) == (
            original.originator_version,
            original.step,
            original.lane,
            original.stage.value,
            original.chunk,
        )
        assert diff.recorded is ReasonCode.REUSED
        assert diff.redecided is ReasonCode.INPUT_CHANGED
        # The execution that followed the (now) reuse decision is an invariant violation.
        assert [v.event for v in report.violations] == ["StageExecuted"]

    def test_tampered_facts_are_found_too(self, resume: syn.SyntheticRun) -> None:
        # A reused extract whose checkpoint was in fact missing.
        index = next(i for i, d in enumerate(resume.decisions) if d.code is ReasonCode.REUSED)
        events = replace_decision(resume.events, index, checkpoint=CheckpointState.MISSING)
        diff = audit_run(events).differences[0]
        assert diff.problem is Problem.CODE
        assert diff.redecided is ReasonCode.CHECKPOINT_MISSING

    def test_category_must_match_the_code(self, cold: syn.SyntheticRun) -> None:
        events = replace_decision(cold.events, 0, category=Category.REUSE)
        report = audit_run(events)
        assert [d.problem for d in report.differences] == [Problem.CATEGORY]

    def test_a_recorded_digest_equal_to_the_current_one_is_inconsistent(
        self, resume: syn.SyntheticRun
    ) -> None:
        index = next(i for i, d in enumerate(resume.decisions) if d.code is ReasonCode.REUSED)
        decision = resume.decisions[index]
        events = replace_decision(resume.events, index, recorded={"input": decision.input})
        problems = {d.problem for d in audit_run(events).differences}
        assert problems == {Problem.RECORDED_EQUALS_CURRENT}

    def test_unknown_and_checkpointless_recorded_digests(self, cold: syn.SyntheticRun) -> None:
        events = replace_decision(cold.events, 0, recorded={"colour": "x" * 64})
        problems = {d.problem for d in audit_run(events).differences}
        assert problems == {Problem.UNKNOWN_DIGEST, Problem.RECORDED_WITHOUT_CHECKPOINT}

    def test_dependencies_and_forced_must_be_the_lanes(self, cold: syn.SyntheticRun) -> None:
        events = replace_decision(cold.events, 1, dependencies="d" * 64)
        assert [d.problem for d in audit_run(events).differences] == [Problem.DEPENDENCIES]
        events = replace_decision(
            cold.events,
            1,
            forced=True,
            code=ReasonCode.FORCED_RECOMPUTE,
            category=Category.FORCED,
        )
        assert [d.problem for d in audit_run(events).differences] == [Problem.FORCED]


class TestInvariants:
    def messages(self, events: list[RunEvent]) -> list[str]:
        return [f"{v.version} {v.event}: {v.message}" for v in audit_run(events).violations]

    def test_allocation_must_come_first_and_once(self, cold: syn.SyntheticRun) -> None:
        first, second, *rest = cold.events
        swapped = self.messages(renumber([second, first, *rest]))
        assert any("first event is not RunAllocated" in m for m in swapped)
        assert any("RunAllocated is not the first event" in m for m in swapped)
        twice = self.messages(renumber([first, first, second, *rest]))
        assert any("allocated more than once" in m for m in twice)

    def test_versions_must_be_contiguous(self, cold: syn.SyntheticRun) -> None:
        events = [*cold.events[:5], *cold.events[6:]]
        gaps = [m for m in self.messages(events) if "versions must be contiguous" in m]
        assert gaps == [  # flagged once, where the gap is
            "7 CheckpointWritten: version 7 where 6 was expected "
            "(versions must be contiguous from 1)"
        ]

    def test_at_most_one_termination_and_nothing_after_it(self, cold: syn.SyntheticRun) -> None:
        last = cold.events[-1]
        again = msgspec.structs.replace(last, originator_version=last.originator_version + 1)
        warning = WarningRecorded(
            originator_id=last.originator_id,
            originator_version=last.originator_version + 2,
            timestamp=last.timestamp,
            step="terms",
            lane="x",
            message="late",
        )
        messages = self.messages([*cold.events, again, warning])
        assert any("already terminated" in m for m in messages)
        assert any(m.startswith(f"{warning.originator_version} WarningRecorded") for m in messages)

    def test_checkpoint_and_execution_need_their_decision(self, cold: syn.SyntheticRun) -> None:
        decided = [i for i, e in enumerate(cold.events) if isinstance(e, StageDecided)]
        events = renumber([e for i, e in enumerate(cold.events) if i not in decided[:3]])
        messages = self.messages(events)
        assert any("CheckpointWritten: checkpoint write of" in m for m in messages)
        assert any("StageExecuted: execution of" in m for m in messages)

    def test_decision_needs_its_lane(self, cold: syn.SyntheticRun) -> None:
        lanes = [i for i, e in enumerate(cold.events) if isinstance(e, LaneResolved)]
        events = renumber([e for i, e in enumerate(cold.events) if i != lanes[0]])
        messages = self.messages(events)
        assert any("has no LaneResolved before it" in m for m in messages)

    def test_an_event_of_another_run_is_refused(
        self, cold: syn.SyntheticRun, resume: syn.SyntheticRun
    ) -> None:
        foreign = msgspec.structs.replace(resume.events[3], originator_version=4)
        events = [*cold.events[:3], foreign, *cold.events[4:]]
        assert any("another aggregate" in m for m in self.messages(events))

    def test_no_events(self) -> None:
        report = audit_run([])
        assert not report.ok and report.violations[0].message == "the run has no events"


# --- property: the audit agrees with the runner for any facts -----------------------

DIGEST = st.sampled_from(["", "a" * 64, "b" * 64])
COMPONENTS = st.builds(LaneComponents, *[DIGEST] * 7)
DIGESTS = st.builds(StageDigests, COMPONENTS, DIGEST, DIGEST)


@st.composite
def facts(draw: st.DrawFn) -> StageFacts:
    current = draw(DIGESTS)
    checkpoint = draw(st.sampled_from(list(CheckpointState)))
    with_record = checkpoint in (CheckpointState.PRESENT, CheckpointState.LANE_ONLY)
    return StageFacts(
        stage=draw(st.sampled_from(list(Stage))),
        forced=draw(st.booleans()),
        resumed=draw(st.booleans()),
        failed=draw(st.booleans()),
        predecessor=draw(st.none() | st.sampled_from(list(PredecessorState))),
        checkpoint=checkpoint,
        current=current,
        recorded=draw(DIGESTS) if with_record else None,
    )


def one_decision_run(f: StageFacts, code: ReasonCode | None = None) -> list[RunEvent]:
    """Allocation, a lane with the facts' components, and the decision as the runner records it."""
    base = syn.synthetic_run(syn.run_id_for(9), lanes=1, chunks=1)
    lane = msgspec.structs.replace(base.events[1], components=f.current.components, forced=f.forced)
    assert isinstance(lane, LaneResolved)
    chosen = code or decide_stage(f)
    decision = StageDecided(
        originator_id=lane.originator_id,
        originator_version=3,
        timestamp=lane.timestamp,
        **StageDecided.fields(lane.step, lane.lane, "c", f, chosen),
    )
    return [base.events[0], lane, decision]


@settings(max_examples=200, deadline=None)
@given(f=facts(), other=st.sampled_from(list(ReasonCode)))
def test_audit_redecides_exactly_what_the_runner_decided(f: StageFacts, other: ReasonCode) -> None:
    if f.predecessor is None:  # the stage's D is the lane's D (empty in this lane)
        f = msgspec.structs.replace(f, current=msgspec.structs.replace(f.current, dependencies=""))
    runner_code = decide_stage(f)
    assert audit_run(one_decision_run(f)).ok
    report = audit_run(one_decision_run(f, other))
    if other is runner_code:
        assert report.ok
    else:
        assert [(d.problem, d.recorded, d.redecided) for d in report.differences] == [
            (Problem.CODE, other, runner_code)
        ]


def test_a_run_without_termination_audits_clean() -> None:
    """A run without termination (still running, or killed) is not an audit difference."""
    run = syn.synthetic_run(syn.run_id_for(5), lanes=1, chunks=2)
    running = [e for e in run.events if not isinstance(e, RunTerminated)]
    assert audit_run(running).ok
    assert isinstance(running[0], RunAllocated)
    assert any(isinstance(e, CheckpointWritten) for e in running)
    assert any(isinstance(e, StageExecuted) for e in running)


def with_reads(run: syn.SyntheticRun, reads_of: dict[Stage, list[ArtifactRef]] | None = None):
    """The cold run with its first lane consuming one artifact whose part the extract reads
    (docs/modules.md "Declaring what a stage reads"), every D as the runner records it."""
    whole = ArtifactRef("producer", "docs/p.md", "k", "s/v1", "application/json", "a" * 64, 90)
    part = msgspec.structs.replace(whole, sha256="b" * 64, size=12)
    reads = {Stage.EXTRACT: [part], Stage.MERGE: []} if reads_of is None else reads_of
    out: list[RunEvent] = []
    first = None
    for event in run.events:
        if isinstance(event, LaneResolved) and first is None:
            first = event.lane
            event = msgspec.structs.replace(event, dependencies=[whole], reads=reads)
        elif isinstance(event, StageDecided) and event.lane == first:
            deps = reads.get(event.stage, [whole])
            event = msgspec.structs.replace(event, dependencies=dependencies_digest(deps))
        out.append(event)
    return out, whole, part


def test_each_stage_d_is_re_derived_from_the_parts_its_lane_records(cold) -> None:
    events, whole, _ = with_reads(cold)
    assert audit_run(events).ok
    # an extract decided against the whole artifact, not the part it declared
    index = next(
        i
        for i, e in enumerate(e for e in events if isinstance(e, StageDecided))
        if e.stage is Stage.EXTRACT
    )
    wrong = replace_decision(events, index, dependencies=dependencies_digest([whole]))
    assert [d.problem for d in audit_run(wrong).differences] == [Problem.DEPENDENCIES]
    # the lane says the merge reads nothing: a merge D over the whole artifact is wrong
    index = next(
        i
        for i, e in enumerate(e for e in events if isinstance(e, StageDecided))
        if e.stage is Stage.MERGE
    )
    wrong = replace_decision(events, index, dependencies=dependencies_digest([whole]))
    assert [d.problem for d in audit_run(wrong).differences] == [Problem.DEPENDENCIES]


def test_a_part_of_an_artifact_the_lane_does_not_consume_is_a_difference(cold) -> None:
    stray = ArtifactRef("elsewhere", "docs/x.md", "k", "s/v1", "application/json", "c" * 64, 3)
    events, _, _ = with_reads(cold, {Stage.EXTRACT: [stray]})
    report = audit_run(events)
    assert {d.problem for d in report.differences} == {Problem.DEPENDENCIES}
    assert all("elsewhere/docs/x.md" in d.detail for d in report.differences)
    assert {d.stage for d in report.differences} == {"extract"}
