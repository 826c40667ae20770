"""`manifest.validation.status` is passed|failed once the run has ended (docs/internals.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from runjournal.domain.events import (
    OutputsValidated,
    RefusedName,
    RunAllocated,
    RunError,
    RunEvent,
    RunPhase,
    RunStatus,
    RunTerminated,
)
from runjournal.domain.run import Run, run_aggregate_id
from runjournal.projections.base import fold
from runjournal.projections.manifest import ManifestProjection

T0 = datetime(2026, 11, 30, 15, 0, tzinfo=UTC)


def events(*, validated: list[RefusedName] | None, status: RunStatus | None) -> list[RunEvent]:
    """An allocated run, optionally validated (with these refusals), optionally terminated."""
    t = [T0]

    def tick() -> datetime:
        t[0] += timedelta(seconds=1)
        return t[0]

    run = Run(run_aggregate_id("r1"), tick)
    run.trigger(
        RunAllocated,
        run_id="r1",
        pipeline="p",
        pipeline_file="/p.toml",
        argv=[],
        tool_version="0.1.0",
        run_dir="/out/r1",
        output_root="/out",
        cache_root="/c",
        workspace=None,
        debug_bundle=None,
        host="h",
        pid=1,
        process_start=0.0,
    )
    if validated is not None:
        run.trigger(OutputsValidated, checked=3, refused=validated)
    if status is not None:
        error = None if status is RunStatus.SUCCEEDED else RunError(message="stopped")
        run.trigger(RunTerminated, status=status, phase=RunPhase.EXECUTION, error=error)
    return list(run.collect_events())


def validation(evs: list[RunEvent]) -> dict:
    return fold(ManifestProjection(), evs).view()["validation"]


@pytest.mark.parametrize("status", [RunStatus.FAILED, RunStatus.INTERRUPTED, RunStatus.ABANDONED])
def test_a_run_that_ended_before_its_outputs_were_checked_failed_validation(
    status: RunStatus,
) -> None:
    assert validation(events(validated=None, status=status)) == {
        "status": "failed",
        "outputs_checked": 0,
        "refused": [],
    }


def test_pending_only_while_running() -> None:
    assert validation(events(validated=None, status=None))["status"] == "pending"
    assert validation(events(validated=[], status=None))["status"] == "passed"


def test_checked_outputs_decide_once_validated() -> None:
    ok = validation(events(validated=[], status=RunStatus.SUCCEEDED))
    assert ok == {"status": "passed", "outputs_checked": 3, "refused": []}
    # Names were checked and passed; the run failed later (e.g. writing the outputs).
    assert validation(events(validated=[], status=RunStatus.FAILED))["status"] == "passed"
    refused = validation(events(validated=[RefusedName("a", "reserved")], status=RunStatus.FAILED))
    assert refused["status"] == "failed" and refused["refused"] == [
        {"name": "a", "refusal": "reserved"}
    ]


@pytest.mark.parametrize("status", [None, *(s for s in RunStatus if s is not RunStatus.RUNNING)])
@pytest.mark.parametrize("validated", [None, [], [RefusedName("x", "reserved")]])
def test_a_terminated_view_is_never_pending(
    status: RunStatus | None, validated: list[RefusedName] | None
) -> None:
    got = validation(events(validated=validated, status=status))["status"]
    if status is None and validated is None:
        assert got == "pending"
    else:
        assert got in ("passed", "failed")
