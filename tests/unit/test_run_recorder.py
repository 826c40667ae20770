"""The runner's typed recorder port (domain/ports.py `RunRecorder`) and its journal session.

Every method of `RunSession` goes through the `Run` aggregate's command for its event, so
the journal's ordering invariants hold for every run, with no flag to turn them on
(docs/internals.md "Recording a run (`RunRecorder`)"): an event that would break one is
refused before anything (a listener, the store) sees it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from runjournal.adapters.journal.session import RunSession
from runjournal.domain.decisions import Stage, StageDigests, StageFacts
from runjournal.domain.events import (
    CheckpointWritten,
    LaneResolved,
    RunAllocated,
    RunEvent,
    StageDecided,
)
from runjournal.domain.identity import ArtifactRef, LaneComponents
from runjournal.domain.llm import AttemptStatus, FailureCause, LLMAttempt
from runjournal.domain.ports import CheckpointKey, CheckpointRecord, RunRecorder
from runjournal.domain.reasons import ReasonCode
from runjournal.domain.run import JournalInvariantError, Run, run_aggregate_id
from runjournal.domain.runner import PipelineRunner
from runjournal.domain.runner.ledger import BufferedRecorder, RunLedger
from support.hand_made import emit
from support.recorder import FakeRecorder
from unit.test_runner import DOCS, FakeStore, pipeline

RUN_ID = "20261201T000000Z-0a0b0c0d"
COMPONENTS = LaneComponents("c", "m", "", "", "", "", "")
AT = {"step": "s", "lane": "l", "stage": Stage.EXTRACT, "chunk": "c1"}
# Built at run time, never a literal (push-protection scanners would flag one).
SECRET = "gh" + "p_" + "Zq9" * 12


def clock() -> Callable[[], datetime]:
    now = [datetime(2026, 12, 1, tzinfo=UTC)]

    def tick() -> datetime:
        now[0] += timedelta(milliseconds=1)
        return now[0]

    return tick


class Journal:
    """A session as `run` makes one (a `Run` with no flags), committing into a list."""

    def __init__(self) -> None:
        self.stored: list[RunEvent] = []
        self.seen: list[RunEvent] = []
        run = Run(run_aggregate_id(RUN_ID), clock())
        self.session = RunSession(self.stored.extend, run, listeners=[self.seen.append])
        emit(
            self.session,
            RunAllocated,
            run_id=RUN_ID,
            pipeline="p",
            pipeline_file="/p/pipeline.toml",
            argv=[],
            tool_version="0",
            run_dir=f"/out/{RUN_ID}",
            output_root="/out",
            cache_root="/cache",
            workspace=None,
            debug_bundle=None,
            host="h",
            pid=1,
            process_start=0.0,
        )

    def lane(self) -> None:
        self.session.lane_resolved(
            step="s",
            lane="l",
            components=COMPONENTS,
            lane_identity="id",
            dependencies=[],
            chunks=1,
            forced=False,
            reads={},
        )

    def decide(self, code: ReasonCode) -> None:
        facts = StageFacts(stage=Stage.EXTRACT, current=StageDigests(COMPONENTS, "i", ""))
        self.session.decided(step="s", lane="l", chunk="c1", facts=facts, code=code)


def test_a_checkpoint_of_a_stage_never_decided_is_refused() -> None:
    journal = Journal()
    journal.lane()
    with pytest.raises(JournalInvariantError, match=r"checkpoint write of .* no decision"):
        journal.session.checkpoint_written(**AT, sha256="e" * 64, size=1)
    with pytest.raises(JournalInvariantError, match=r"execution of .* no decision"):
        journal.session.executed(**AT, sha256="e" * 64, size=1)
    journal.session.flush()
    assert [type(e) for e in journal.stored] == [RunAllocated, LaneResolved]
    assert journal.seen == journal.stored  # nothing refused reached a listener either


def test_a_decision_before_its_lane_and_an_execution_after_a_reuse_are_refused() -> None:
    journal = Journal()
    with pytest.raises(JournalInvariantError, match="has no LaneResolved before it"):
        journal.decide(ReasonCode.NOT_RESUMED)
    journal.lane()
    journal.decide(ReasonCode.REUSED)
    with pytest.raises(JournalInvariantError, match="follows a reused decision"):
        journal.session.executed(**AT, sha256="e" * 64, size=1)
    journal.session.checkpoint_written(**AT, sha256="e" * 64, size=1)  # a refreshed envelope
    journal.decide(ReasonCode.FORCED_RECOMPUTE)  # decided again: now it may run
    journal.session.executed(**AT, sha256="e" * 64, size=1)
    journal.session.flush()
    assert Run.replay(journal.stored).violations == []


def test_the_generic_emit_is_held_to_the_same_rules() -> None:
    # Before, a session's `Run` made without strict_order=True took this event.
    journal = Journal()
    with pytest.raises(JournalInvariantError, match=r"checkpoint write of .* no decision"):
        emit(journal.session, CheckpointWritten, **AT, sha256="e" * 64, size=1)


def test_a_runner_checkpoint_for_an_undecided_stage_is_refused_through_the_ledger() -> None:
    journal = Journal()
    journal.lane()
    digests = StageDigests(COMPONENTS, "i", "")
    record = CheckpointRecord(
        codec_id="x", lane_identity="id", digests=digests, output_sha256="e" * 64, payload=b"[]"
    )
    ledger = RunLedger(journal.session, FakeStore())
    key = CheckpointKey("s", "l", Stage.EXTRACT, "c1")
    with pytest.raises(JournalInvariantError, match="no decision"):
        ledger.write_checkpoint(key, record)
    lane = ledger.child()  # a lane's records are held, and checked when replayed
    lane.write_checkpoint(key, record)
    with pytest.raises(JournalInvariantError, match="no decision"):
        ledger.absorb(lane)


def test_a_whole_run_through_the_session_replays_without_a_violation() -> None:
    journal = Journal()
    store = FakeStore()
    PipelineRunner(journal=journal.session, recorder=store).run(pipeline(DOCS))
    resumed = Journal()
    PipelineRunner(journal=resumed.session, loader=store, recorder=store).run(pipeline(DOCS))
    for j in (journal, resumed):
        j.session.flush()
        assert Run.replay(j.stored).violations == []
        assert j.seen == j.stored
    codes = {e.code for e in resumed.stored if isinstance(e, StageDecided)}
    assert codes == {ReasonCode.REUSED}


def test_free_text_recorded_through_the_port_is_redacted() -> None:
    journal = Journal()
    journal.lane()
    journal.decide(ReasonCode.NOT_RESUMED)
    session = journal.session
    session.stage_failed(
        **AT,
        code=ReasonCode.STAGE_FAILED,
        message="boom " + SECRET,
        cause=FailureCause.RATE_LIMITED,
    )
    session.checkpoint_write_failed(**AT, message="cannot write " + SECRET)
    ref = ArtifactRef("s", "l", "k", "k/v1", "application/json", "a" * 64, 1)
    session.artifact(artifact=ref, warnings=["ok", "seen " + SECRET])
    attempt = LLMAttempt(
        call=1,
        attempt=1,
        profile_id="p-" + SECRET,
        provider="prov " + SECRET,
        model="m-" + SECRET,
        status=AttemptStatus.OK,
        request_sha256="r" * 64,
    )
    session.llm_attempt(**AT, attempt=attempt)
    session.flush()
    failed, write_failed, artifact, attempted = journal.stored[-4:]
    assert failed.message == "boom [REDACTED:github_token]"
    assert failed.cause is FailureCause.RATE_LIMITED  # typed end to end
    assert write_failed.message == "cannot write [REDACTED:github_token]"
    assert artifact.warnings == ["ok", "seen [REDACTED:github_token]"]
    assert artifact.artifact == ref
    assert (attempted.profile_id, attempted.provider, attempted.model) == (
        "p-[REDACTED:github_token]",
        "prov [REDACTED:github_token]",
        "m-[REDACTED:github_token]",
    )
    assert attempted.status is AttemptStatus.OK and attempted.request_sha256 == "r" * 64


def test_an_attempt_names_a_secret_registered_after_an_earlier_attempt_redacted() -> None:
    """A profile's names are redacted once per set of known secrets (the session keeps
    them): a secret registered later is still hidden in the next attempt's names."""
    from runjournal.domain.redaction import clear_known_secrets, register_secrets

    local_key = "local-model-key-" + "q7" * 6  # no credential shape: hidden only by value
    journal = Journal()
    journal.lane()
    journal.decide(ReasonCode.NOT_RESUMED)
    attempt = LLMAttempt(
        call=1,
        attempt=1,
        profile_id="p",
        provider="openai",
        model="m-" + local_key,
        status=AttemptStatus.OK,
        request_sha256="r" * 64,
    )
    try:
        journal.session.llm_attempt(**AT, attempt=attempt)
        register_secrets([local_key])
        journal.session.llm_attempt(**AT, attempt=msgspec.structs.replace(attempt, attempt=2))
        journal.session.flush()
        first, second = journal.stored[-2:]
        assert first.model == "m-" + local_key
        assert second.model == "m-[REDACTED:known_secret]"
        assert (second.profile_id, second.provider) == ("p", "openai")
    finally:
        clear_known_secrets()


def _methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(fn)
        for name, fn in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


@pytest.mark.parametrize("implementation", [RunSession, BufferedRecorder, FakeRecorder])
def test_every_recorder_has_every_method_of_the_port(implementation: type) -> None:
    port = _methods(RunRecorder)
    assert port  # the protocol's methods, one per thing the runner records
    methods = _methods(implementation)
    assert set(port) <= set(methods)
    if implementation is not FakeRecorder:  # the fake takes **fields and passes them on
        for name, signature in port.items():
            assert str(methods[name]) == str(signature), name


def test_the_fake_checks_what_the_session_checks() -> None:
    fake: Any = FakeRecorder()
    with pytest.raises(JournalInvariantError, match="no decision"):
        fake.checkpoint_written(**AT, sha256="e" * 64, size=1)
