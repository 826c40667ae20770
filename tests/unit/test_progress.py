"""The progress line: only on a terminal, only after a moment, cleared at the end."""

from __future__ import annotations

import io

import pytest
from runjournal.cli import progress as progress_mod
from runjournal.cli.progress import ProgressDisplay, RunCounts


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_silent_when_not_a_terminal():
    stream = io.StringIO()
    display = ProgressDisplay(enabled=True, stream=stream)
    display._start -= 10
    display("s", "lane", 1, 2)
    assert stream.getvalue() == ""


def test_silent_for_runs_shorter_than_a_moment(monkeypatch):
    stream = FakeTTY()
    display = ProgressDisplay(enabled=True, stream=stream)
    display("s", "lane", 1, 2)
    assert stream.getvalue() == ""


def test_shows_and_clears_after_a_moment(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")  # TERM=dumb gets plain lines instead
    monkeypatch.setenv("COLUMNS", "200")
    stream = FakeTTY()
    display = ProgressDisplay(enabled=True, stream=stream)
    display._start -= progress_mod.DELAY_S + 1
    display("terms", "docs/a.md", 3, 7)
    assert "terms" in stream.getvalue() and "3/7" in stream.getvalue()
    display.finish()
    assert stream.getvalue().endswith("\r\x1b[2K")


def test_disabled_never_writes():
    stream = FakeTTY()
    display = ProgressDisplay(enabled=False, stream=stream)
    display._start -= 10
    display("s", "l", 1, 1)
    display.finish()
    assert stream.getvalue() == ""


# --- the whole run: counts, rate, ETA, with a fake clock and a fake stream ---------------

from datetime import UTC, datetime  # noqa: E402
from types import SimpleNamespace  # noqa: E402
from uuid import uuid4  # noqa: E402

from runjournal.domain.decisions import CheckpointState, Stage  # noqa: E402
from runjournal.domain.events import (  # noqa: E402
    ChunkPlanResolved,
    LaneResolved,
    LLMCallAttempted,
    StageDecided,
    StageExecuted,
    StageFailed,
)
from runjournal.domain.identity import LaneComponents  # noqa: E402
from runjournal.domain.llm import AttemptStatus  # noqa: E402
from runjournal.domain.pipeline import Scope  # noqa: E402
from runjournal.domain.reasons import ReasonCode, category_of  # noqa: E402

_BASE = {"originator_id": uuid4(), "originator_version": 1, "timestamp": datetime.now(UTC)}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _decided(code: ReasonCode, stage: Stage = Stage.EXTRACT, lane: str = "a.md") -> StageDecided:
    return StageDecided(
        **_BASE,
        step="terms",
        lane=lane,
        stage=stage,
        chunk="c1",
        code=code,
        category=category_of(code),
        detail="",
        forced=False,
        resumed=True,
        checkpoint=CheckpointState.MISSING,
        input="i",
        dependencies="d",
        recorded={},
    )


def _executed(lane: str = "a.md") -> StageExecuted:
    return StageExecuted(
        **_BASE, step="terms", lane=lane, stage=Stage.EXTRACT, chunk="c", sha256="x", size=1
    )


def _plan(source: str, chunks: int) -> ChunkPlanResolved:
    return ChunkPlanResolved(**_BASE, source=source, plan_key="k", outcomes=[], chunks=chunks)


def _lane(lane: str) -> LaneResolved:
    components = LaneComponents("c", "m", "v", "r", "o", "p", "s")
    return LaneResolved(
        **_BASE, step="terms", lane=lane, components=components, lane_identity="l",
        dependencies=[], chunks=1, forced=False,
    )  # fmt: skip


def _pipeline(*scopes: Scope, sources: tuple[str, ...] = ("a.md", "b.md")) -> SimpleNamespace:
    return SimpleNamespace(
        steps=[SimpleNamespace(scope=s) for s in scopes],
        sources=[SimpleNamespace(name=n) for n in sources],
    )


def _terminal(monkeypatch, clock: Clock) -> tuple[FakeTTY, ProgressDisplay]:
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setattr(progress_mod, "MAX_WIDTH", 300)
    monkeypatch.setattr(progress_mod, "INTERVAL_S", 0.0)  # every update shown
    stream = FakeTTY()
    display = ProgressDisplay(enabled=True, stream=stream, clock=clock)
    display.expect(_pipeline(Scope.DOCUMENT, Scope.CORPUS))  # type: ignore[arg-type]
    return stream, display


def _last(stream: io.StringIO) -> str:
    return stream.getvalue().rsplit(progress_mod.CLEAR, 1)[-1]


def test_the_line_counts_the_whole_run(monkeypatch):
    clock = Clock()
    stream, display = _terminal(monkeypatch, clock)
    clock.now += 1.0
    display.event(_plan("a.md", 2))
    assert _last(stream) == "planning chunks · a.md"  # nothing started: no counts yet
    display.event(_lane("a.md"))
    display.event(_decided(ReasonCode.REUSED))
    # b.md's chunk plan is not in: the total is an estimate (a.md 2+2, b.md 1+2, corpus 3+2)
    line = _last(stream)
    assert line.startswith("stages 1/~12 (1 reused, 0 executed) · 0 in flight · ")
    assert "ETA ~" in line and line.endswith(" │ terms · a.md · extract reused")
    display.event(_plan("b.md", 3))  # a.md 2+2, b.md 3+2, corpus 5+2 = 16
    clock.now += 1.0  # 2 s since the start
    display.event(_decided(ReasonCode.NOT_RESUMED, Stage.MERGE))
    display.event(_executed())
    display.event(_executed())
    display.event(
        StageFailed(
            **_BASE, step="terms", lane="b.md", stage=Stage.EXTRACT, chunk="c",
            code=ReasonCode.STAGE_FAILED, message="boom",
        )
    )  # fmt: skip
    display.event(
        LLMCallAttempted(
            **_BASE, step="terms", lane="a.md", stage=Stage.EXTRACT, chunk="c", call=1,
            attempt=1, profile_id="p", provider="openai", model="m", status=AttemptStatus.OK,
            prompt_tokens=1200, completion_tokens=34, cost=0.0125, request_sha256="r",
        )
    )  # fmt: skip
    # 4 done in 2 s: 2.0 stages/s; 12 left: ETA 6s
    assert _last(stream) == (
        "stages 4/16 (1 reused, 2 executed) · 0 in flight · 1 failed · 1,234 tokens · "
        "cost 0.0125 · 2.0 stages/s · ETA 6s │ terms · a.md · merge not_resumed"
    )


def test_calls_in_flight_come_from_the_executor(monkeypatch):
    clock = Clock()
    stream, display = _terminal(monkeypatch, clock)
    clock.now += 1.0

    class Executor:
        capacity = 4

        def __init__(self) -> None:
            self.keys: list[int] = []
            self.closed = False

        def submit(self, key, call):
            self.keys.append(key)

        def next_done(self):
            return self.keys.pop(0), None

        def close(self):
            self.closed = True

    inner = Executor()
    tracked = display.track(inner)
    display.event(_lane("a.md"))
    assert tracked.capacity == 4
    for key in range(3):
        tracked.submit(key, lambda: None)
    assert " · 3 in flight" in _last(stream)
    assert tracked.next_done() == (0, None)
    assert " · 2 in flight" in _last(stream)
    tracked.close()
    assert inner.closed  # the rest is the inner executor's
    assert ProgressDisplay(enabled=False, stream=FakeTTY()).track(inner) is inner


def test_a_long_lane_keeps_its_end_on_a_narrow_terminal(monkeypatch):
    clock = Clock()
    stream, display = _terminal(monkeypatch, clock)
    monkeypatch.setenv("COLUMNS", "121")
    clock.now += 1.0
    display.event(_lane("a.md"))
    display("definitions", "docs/05-recomputation-copy9.md", 2, 2)
    line = _last(stream)
    assert len(line) == 120 and line.endswith("copy9.md · chunk 2/2")
    assert " │ definitions · …" in line and line.startswith("stages 2/~10 (0 reused, 2 executed)")


def test_duration():
    assert progress_mod.duration(4.4) == "4s"
    assert progress_mod.duration(185) == "3m05s"
    assert progress_mod.duration(3725) == "1h02m"


def test_not_a_terminal_one_plain_line_per_interval(monkeypatch):
    clock = Clock()
    stream = io.StringIO()
    display = ProgressDisplay(enabled=True, stream=stream, clock=clock)
    display.expect(_pipeline(Scope.DOCUMENT, sources=("a.md",)))  # type: ignore[arg-type]
    display.phase("opening the journal")  # phases are for terminals
    display.event(_plan("a.md", 1))
    display.event(_lane("a.md"))
    for _ in range(20):  # 20 updates over 4.75 s: shorter than the interval, no line
        display.event(_decided(ReasonCode.REUSED))
        clock.now += 0.25
    assert stream.getvalue() == ""
    assert clock.now == 105.0  # 5 s since the start: the first line
    display.event(_executed())
    display("terms", "a.md", 1, 1)
    assert stream.getvalue() == (
        "runjournal: stages 21/21 (20 reused, 1 executed) · 0 in flight · 4.2 stages/s · "
        "ETA 0s │ terms · a.md · extract reused\n"
    )
    for _ in range(4):  # 4 s more: still one line
        clock.now += 1.0
        display.event(_executed())
    assert stream.getvalue().count("\n") == 1
    clock.now += 1.0  # 10 s: the second line
    display.event(_executed())
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[1].startswith("runjournal: stages 26/26 (20 reused, 6 ")
    display.finish()
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()


def test_not_a_terminal_silent_with_progress_off():
    clock = Clock()
    stream = io.StringIO()
    display = ProgressDisplay(enabled=False, stream=stream, clock=clock)
    clock.now += 60
    display.event(_executed())
    display("terms", "a.md", 1, 1)
    assert stream.getvalue() == ""


def test_a_closed_stderr_switches_progress_off():
    class Gone(io.StringIO):
        writes = 0

        def write(self, text: str) -> int:
            Gone.writes += 1
            raise BrokenPipeError("gone")

    clock = Clock()
    display = ProgressDisplay(enabled=True, stream=Gone(), clock=clock)
    clock.now += 60
    display.event(_executed())  # a plain line is due: the write fails, the run goes on
    clock.now += 60
    display.event(_executed())
    assert Gone.writes == 1 and display.mode is progress_mod.Mode.OFF


def test_a_plain_log_of_an_llm_run_shows_the_calls_not_a_stale_chunk_plan(monkeypatch):
    """Issue 32: not a terminal, an LLM run whose lane events reach the journal only when
    the lane ends: the log kept printing `planning chunks · <last source>` with no count."""
    clock = Clock()
    stream = io.StringIO()
    display = ProgressDisplay(enabled=True, stream=stream, clock=clock)
    assert display.mode is progress_mod.Mode.PLAIN
    display.expect(_pipeline(Scope.DOCUMENT))  # type: ignore[arg-type]
    display.event(_plan("a.md", 2))
    display.event(_plan("b.md", 1))
    clock.now += progress_mod.PLAIN_INTERVAL_S + 1
    display.event(
        LLMCallAttempted(
            **_BASE, step="ask", lane="a.md", stage=Stage.EXTRACT, chunk="c", call=1,
            attempt=1, profile_id="p", provider="openai", model="m", status=AttemptStatus.OK,
            prompt_tokens=100, completion_tokens=20, cost=0.0, request_sha256="r",
        )
    )  # fmt: skip
    [line] = stream.getvalue().splitlines()
    assert "planning chunks" not in line
    assert line.startswith(
        "runjournal: stages 0/7 (0 reused, 0 executed) · 0 in flight · 120 tokens"
    )
    assert line.endswith(" │ ask · a.md · extract LLM call")


def test_the_rate_and_eta_follow_the_last_half_minute_not_the_whole_run():
    """1,000 stages reused in the first second, then one executed per second: after a
    minute the rate is about 1 stage/s (the whole run's average would say 17, and an ETA
    seventeen times too short); before half a minute has passed, the whole run's rate."""
    counts = RunCounts()
    counts.reused = 1000
    assert counts.rate(1.0) == pytest.approx(1000.0)
    for second in range(2, 62):
        counts.executed += 1
        rate = counts.rate(float(second))
    assert rate == pytest.approx(1.0, rel=0.1)
    assert counts.done / 61.0 > 15  # what the whole-run average would have said
    assert RunCounts().rate(5.0) is None  # nothing done yet


def test_a_batch_run_shows_its_batch_states(monkeypatch):
    """docs/operations.md "Batch runs": while the run waits on a batch, the line says
    which batch, its state and how many of its requests completed."""
    from runjournal.domain.events import LLMBatchCompleted, LLMBatchPolled, LLMBatchSubmitted

    clock = Clock()
    stream = io.StringIO()
    display = ProgressDisplay(enabled=True, stream=stream, clock=clock)
    clock.now += progress_mod.PLAIN_INTERVAL_S + 1
    display.event(
        LLMBatchSubmitted(
            **_BASE, batch_id="batch_1", request_set="s", profile_id="p", model="m",
            round=1, requests=400,
        )
    )  # fmt: skip
    clock.now += progress_mod.PLAIN_INTERVAL_S + 1
    display.event(
        LLMBatchPolled(
            **_BASE, batch_id="batch_1", status="in_progress", total=400, completed=120, failed=3
        )
    )
    clock.now += progress_mod.PLAIN_INTERVAL_S + 1
    display.event(LLMBatchCompleted(**_BASE, batch_id="batch_1", status="completed", completed=397))
    text = stream.getvalue()
    assert "batch batch_1 submitted: 400 request(s)" in text
    assert "batch batch_1 in_progress 120/400, 3 failed" in text
    assert "batch batch_1 completed: collected 397" in text


def test_a_long_lane_counts_its_settled_extracts_before_its_events_arrive(monkeypatch):
    """A huge document is one lane of thousands of extracts whose events reach the journal
    when the lane ends: the stages it settled count at once, then as journaled, never
    twice (issue 29: `stages 0/143400` for minutes)."""
    clock = Clock()
    stream, display = _terminal(monkeypatch, clock)
    display.event(_plan("a.md", 3))
    display.event(_plan("b.md", 1))
    clock.now += 1.0
    display("terms", "a.md", 1, 3)
    display("terms", "a.md", 2, 3)
    assert _last(stream).startswith("stages 2/14 (0 reused, 2 executed) · ")
    assert _last(stream).endswith("│ terms · a.md · chunk 2/3")
    display("terms", "a.md", 3, 3)
    display.event(_lane("a.md"))
    display.event(_executed())
    assert display.counts.done == 3  # one journaled, two still only settled
    display.event(_executed())
    display.event(_executed())
    display.event(_decided(ReasonCode.NOT_RESUMED, Stage.MERGE))
    assert display.counts.done == 3 and display.counts.settled == {}
    assert _last(stream).startswith("stages 3/14 (0 reused, 3 executed) · ")
