"""The `Run` aggregate holds the journal's invariants: commands validate, replay collects.

The same rules serve the live run (`trigger` and the command methods raise, whatever the
run was made with) and the audit (`Run.replay` collects each break as a `Violation`), so
there is one copy of them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from runjournal.domain.decisions import Stage, StageDigests, StageFacts
from runjournal.domain.events import (
    ArtifactGenerated,
    CheckpointWritten,
    LaneResolved,
    RunError,
    RunPhase,
    RunStatus,
    RunTerminated,
    StageDecided,
    StageExecuted,
    TerminalPersistenceFailed,
)
from runjournal.domain.identity import LaneComponents
from runjournal.domain.reasons import ReasonCode
from runjournal.domain.run import JournalInvariantError, Run

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def clock() -> Any:
    t = [T0]

    def tick() -> datetime:
        t[0] += timedelta(seconds=1)
        return t[0]

    return tick


def allocated(run_id: str = "r1", **kw: Any) -> Run:
    run = Run.allocate(
        clock(),
        run_id=run_id,
        pipeline="p",
        pipeline_file="/p.toml",
        argv=[],
        tool_version="0",
        run_dir=f"/out/{run_id}",
        output_root="/out",
        cache_root="/c",
        workspace=None,
        debug_bundle=None,
        host="h",
        pid=1,
        process_start=0.0,
    )
    return run


LANE = {
    "step": "s",
    "lane": "l",
    "components": LaneComponents("c", "m", "", "", "", "", ""),
    "lane_identity": "id",
    "dependencies": [],
    "chunks": 1,
    "forced": False,
}
SCOPE = {"step": "s", "lane": "l", "stage": Stage.MERGE, "chunk": ""}


def decision(code: ReasonCode = ReasonCode.NOT_RESUMED) -> dict[str, Any]:
    """`Run.decide`'s arguments for the merge stage of SCOPE."""
    facts = StageFacts(stage=Stage.MERGE, current=StageDigests(LANE["components"], "i", ""))
    return {"step": "s", "lane": "l", "chunk": "", "facts": facts, "code": code}


def decided_fields(code: ReasonCode = ReasonCode.NOT_RESUMED) -> dict[str, Any]:
    """The same decision as a `StageDecided`'s fields (for the generic `trigger`)."""
    d = decision(code)
    return StageDecided.fields(d["step"], d["lane"], d["chunk"], d["facts"], code)


def test_decide_needs_the_lane_and_execution_its_decision() -> None:
    run = allocated()
    with pytest.raises(JournalInvariantError, match="has no LaneResolved before it"):
        run.decide(**decision())
    with pytest.raises(JournalInvariantError, match="execution of step 's' lane 'l' merge"):
        run.record_execution(**SCOPE, sha256="e" * 64, size=1)
    with pytest.raises(JournalInvariantError, match=r"checkpoint write of .* no decision"):
        run.record_checkpoint(**SCOPE, sha256="e" * 64, size=1)
    assert run.version == 1  # nothing refused was recorded
    run.resolve_lane(**LANE)
    run.decide(**decision(ReasonCode.REUSED))
    with pytest.raises(JournalInvariantError, match="follows a reused decision"):
        run.record_execution(**SCOPE, sha256="e" * 64, size=1)
    run.record_checkpoint(**SCOPE, sha256="e" * 64, size=1)  # a refreshed envelope is fine
    assert run.decision_of("s", "l", "merge") is ReasonCode.REUSED


@pytest.mark.parametrize("strict_order", [None, False, True])
def test_trigger_applies_the_ordering_rules_whatever_the_run_was_made_with(
    strict_order: bool | None,
) -> None:
    # Before, a run made without strict_order=True took a decision with no lane resolved.
    plain = allocated("r2")
    flags = {} if strict_order is None else {"strict_order": strict_order}
    run = Run(plain.id, clock(), **flags)
    run.apply(plain.collect_events()[0])  # its RunAllocated
    with pytest.raises(JournalInvariantError, match="has no LaneResolved before it"):
        run.trigger(StageDecided, **decided_fields())
    with pytest.raises(JournalInvariantError, match=r"checkpoint write of .* no decision"):
        run.trigger(CheckpointWritten, **SCOPE, sha256="e" * 64, size=1)
    run.trigger(LaneResolved, **LANE)
    run.trigger(StageDecided, **decided_fields(ReasonCode.REUSED))
    with pytest.raises(JournalInvariantError, match="follows a reused decision"):
        run.trigger(StageExecuted, **SCOPE, sha256="e" * 64, size=1)
    assert run.version == 3 and run.pending_count == 2  # nothing refused was recorded


def test_terminate_once_with_an_error_exactly_when_it_fails() -> None:
    run = allocated()
    with pytest.raises(JournalInvariantError, match="cannot terminate as running"):
        run.terminate(RunStatus.RUNNING, RunPhase.EXECUTION)
    with pytest.raises(JournalInvariantError, match="an error exactly when it fails"):
        run.terminate(RunStatus.FAILED, RunPhase.EXECUTION)
    with pytest.raises(JournalInvariantError, match="an error exactly when it fails"):
        run.terminate(RunStatus.SUCCEEDED, RunPhase.EXECUTION, RunError("x"))
    event = run.abandon("gone")
    assert (event.status, event.phase, event.error) == (
        RunStatus.ABANDONED,
        RunPhase.RECOVERY,
        RunError("gone"),
    )
    assert run.terminated and run.terminated_at == 2
    with pytest.raises(JournalInvariantError, match="already terminated at 2"):
        run.terminate(RunStatus.SUCCEEDED, RunPhase.EXECUTION)
    with pytest.raises(JournalInvariantError, match="recorded after the run terminated at 2"):
        run.trigger(LaneResolved, **LANE)
    failure = run.record_persistence_failure("report", "disk full")
    assert isinstance(failure, TerminalPersistenceFailed) and failure.originator_version == 3


def test_replay_collects_what_live_refuses() -> None:
    run = allocated()
    run.trigger(LaneResolved, **LANE)
    run.decide(**decision())
    run.terminate(RunStatus.SUCCEEDED, RunPhase.EXECUTION)
    events = run.collect_events()
    again = RunTerminated(
        originator_id=run.id,
        originator_version=5,
        timestamp=T0,
        status=RunStatus.FAILED,
        phase=RunPhase.EXECUTION,
        error=RunError("late"),
    )
    replayed = Run.replay([*events, again])
    assert [(v.version, v.event, v.message) for v in replayed.violations] == [
        (5, "RunTerminated", "the run already terminated at 4")
    ]
    assert replayed.status is RunStatus.SUCCEEDED  # the first termination stands
    assert Run.replay(events).violations == []
    with pytest.raises(JournalInvariantError, match="already terminated"):
        fresh = Run(run.id)
        for event in [*events, again]:
            fresh.apply(event)


def test_a_finished_lane_is_let_go_live_and_by_a_replay() -> None:
    """A lane's place among the resolved lanes and its decisions go with its
    `ArtifactGenerated` (its last event): a run held one entry per lane to its end, and a
    replay (`journal audit`) every decision of the run (issue 29: peak RSS). What the live
    run refuses after it, the replay reports; a lane resolved again is open again."""
    run = allocated()
    run.resolve_lane(**LANE)
    run.resolve_lane(**{**LANE, "lane": "m"})
    run.decide(**decision())
    artifact = {"kind": "k", "schema": "s", "media_type": "m", "sha256": "a" * 64, "size": 1}
    run.trigger(ArtifactGenerated, step="s", lane="l", warnings=[], **artifact)
    assert ("s", "l") not in run._lanes and ("s", "m") in run._lanes
    assert run.decision_of("s", "l", "merge") is None
    with pytest.raises(JournalInvariantError, match="has no LaneResolved before it"):
        run.decide(**decision())  # nothing of a finished lane is recorded after it
    events = run.collect_events()
    replayed = Run.replay(events)
    assert replayed.violations == []
    assert ("s", "l") not in replayed._lanes and ("s", "m") in replayed._lanes
    assert replayed._last_decision == {}
    after = events[-1].originator_version

    def at(version: int, cls: type, **fields: Any) -> Any:
        return cls(originator_id=run.id, originator_version=version, timestamp=T0, **fields)

    late_decision = at(after + 1, StageDecided, **decided_fields())
    assert [v.message for v in Run.replay([*events, late_decision]).violations] == [
        "decision for step 's' lane 'l' has no LaneResolved before it"
    ]
    late_write = at(after + 1, CheckpointWritten, **SCOPE, sha256="e" * 64, size=1)
    assert [v.message for v in Run.replay([*events, late_write]).violations] == [
        "checkpoint write of step 's' lane 'l' merge has no decision before it"
    ]
    again = [
        at(after + 1, LaneResolved, **LANE),
        at(after + 2, StageDecided, **decided_fields()),
        at(after + 3, CheckpointWritten, **SCOPE, sha256="e" * 64, size=1),
    ]
    assert Run.replay([*events, *again]).violations == []
