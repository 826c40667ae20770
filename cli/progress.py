"""Progress of a run on stderr: the whole run and the current step (docs/operations.md
"Progress and colour").

The line: `stages 12/~40 (8 reused, 4 executed) · 3 in flight · 1 failed · 1,234 tokens
· cost 0.0012 · 2.4 stages/s · ETA 11s │ terms · docs/a.md · chunk 3/7`. It is fed

- by start-up phases (`opening the journal`, ...), shown at once;
- live from the journal (`event`, a session listener): chunk plans, lanes, decisions,
  executions, failures and LLM attempts, so a fully reused run shows its progress too;
- by the runner: the extract calls of a lane (`__call__`) and the calls in flight
  (`track` wraps the executor the scheduler submits to).

The total is known once every source's chunk plan is resolved (each lane decides an
extract per chunk, a merge and a normalize); until then it is an estimate (`~`).

On a capable terminal the line is rewritten in place (`\\r\\x1b[2K`), after `DELAY_S`,
and cleared at the end; with `TERM=dumb` no escape sequence is written: a plain line at
most every `DUMB_INTERVAL_S`, and for each phase. When stderr is not a terminal, one plain
line at most every `PLAIN_INTERVAL_S` and none before, so a short run prints nothing.
"""

from __future__ import annotations

import collections
import enum
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from runjournal.cli.style import dumb_terminal, is_terminal
from runjournal.domain.decisions import Stage
from runjournal.domain.events import (
    ChunkPlanResolved,
    LaneResolved,
    LLMBatchCompleted,
    LLMBatchPolled,
    LLMBatchSubmitted,
    LLMCallAttempted,
    RunEvent,
    StageDecided,
    StageExecuted,
    StageFailed,
)
from runjournal.domain.pipeline import ResolvedPipeline, Scope
from runjournal.domain.reasons import Category
from runjournal.domain.runner.scheduler import SLOT_FREED

DELAY_S = 0.5
INTERVAL_S = 0.1
DUMB_INTERVAL_S = 2.0
PLAIN_INTERVAL_S = 5.0
MAX_WIDTH = 120
CLEAR = "\r\x1b[2K"
PLANNING = "planning chunks"
STAGES_PER_LANE = 2  # besides one extract per chunk: the lane's merge and its normalize

_active: list[ProgressDisplay] = []  # displays with a line on screen, for `clear_active`


def clear_active() -> None:
    """Clear any progress line before something else is printed on stderr."""
    for display in list(_active):
        display.finish()


class Mode(enum.Enum):
    OFF = "off"
    TERMINAL = "terminal"  # rewritten in place
    DUMB = "dumb"  # a terminal without escape sequences: plain lines, phases too
    PLAIN = "plain"  # not a terminal (a CI log): a plain line every PLAIN_INTERVAL_S


# The span the progress line's rate and ETA are measured over.
RATE_WINDOW_S = 30.0


class RunCounts:
    """What the line says about the whole run, folded from events (no I/O, no clock)."""

    def __init__(self) -> None:
        self.scopes: list[bool] | None = None  # per step: corpus scope?
        self.sources: list[str] = []
        self.chunks: dict[str, int] = {}  # per source, from its chunk plan
        self.lanes = 0
        self.reused = 0
        self.executed = 0
        self.failed = 0
        self.in_flight = 0
        # extracts a lane has settled (checkpointed or failed) whose events the journal
        # has not had yet: a lane's events arrive when it ends, so a huge document would
        # show `stages 0/…` for minutes without them (issue 29)
        self.settled: dict[tuple[str, str], int] = {}
        self.tokens = 0
        self.cost = 0.0
        # (elapsed s, stages done) as the line was drawn: the rate and the ETA are taken
        # over the last RATE_WINDOW_S, so a burst of reuse at the start, or a slow first
        # stage, does not mislead them for the rest of the run (issue 29)
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def expect(self, pipeline: ResolvedPipeline) -> None:
        self.scopes = [s.scope is Scope.CORPUS for s in pipeline.steps]
        self.sources = [s.name for s in pipeline.sources]

    def apply(self, event: RunEvent) -> bool:
        """Fold one event; whether it changes what is shown."""
        if isinstance(event, StageDecided):
            if event.category is Category.REUSE:
                self.reused += 1
            return True
        if isinstance(event, StageExecuted):
            self.executed += 1
            self._journaled(event.step, event.lane, event.stage)
        elif isinstance(event, StageFailed):
            self.failed += 1
            self._journaled(event.step, event.lane, event.stage)
        elif isinstance(event, LLMCallAttempted):
            self.tokens += event.prompt_tokens + event.completion_tokens
            self.cost += event.cost
        elif isinstance(event, ChunkPlanResolved):
            self.chunks[event.source] = event.chunks
        elif isinstance(event, LaneResolved):
            self.lanes += 1
            return False
        else:
            return False
        return True

    def settle(self, step: str, lane: str, settled: int) -> None:
        """The runner's count of a lane's extracts settled so far."""
        self.settled[step, lane] = settled

    def _journaled(self, step: str, lane: str, stage: Stage) -> None:
        """An extract the runner had reported settled is now counted from the journal."""
        key = (step, lane)
        left = self.settled.get(key, 0)
        if stage is Stage.EXTRACT and left:
            if left == 1:
                del self.settled[key]
            else:
                self.settled[key] = left - 1

    @property
    def done(self) -> int:
        return self.reused + self.executed + self.failed + sum(self.settled.values())

    @property
    def started(self) -> bool:
        """Stages are under way: a lane resolved, a stage done, a call in flight or an LLM
        call made (a lane's events may reach the journal only when it ends, issue 32)."""
        return self.lanes > 0 or self.done > 0 or self.in_flight > 0 or self.tokens > 0

    def total(self) -> tuple[int | None, bool]:
        """(stages in the plan, whether exact): an estimate until every chunk plan is in."""
        if self.scopes is None:
            return None, False
        exact = all(s in self.chunks for s in self.sources)
        per_source = [self.chunks.get(s, 1) for s in self.sources]
        total = 0
        for corpus in self.scopes:
            if corpus:
                total += sum(per_source) + STAGES_PER_LANE
            else:
                total += sum(n + STAGES_PER_LANE for n in per_source)
        return max(total, self.done), exact

    def line(self, elapsed: float) -> str:
        """`stages 12/~40 (8 reused, 4 executed) · 3 in flight · ... · ETA 11s`."""
        total, exact = self.total()
        shown = "~" if total is None else (f"{total}" if exact else f"~{total}")
        executed = self.executed + sum(self.settled.values())  # a failure, once journaled
        parts = [
            f"stages {self.done}/{shown} ({self.reused} reused, {executed} executed)",
            f"{self.in_flight} in flight",
        ]
        if self.failed:
            parts.append(f"{self.failed} failed")
        if self.tokens or self.cost:
            parts.append(f"{self.tokens:,} tokens · cost {self.cost:.4g}")
        rate = self.rate(elapsed)
        if rate:
            parts.append(f"{rate:.0f} stages/s" if rate >= 10 else f"{rate:.1f} stages/s")
            if total is not None:
                eta = (total - self.done) / rate
                parts.append(f"ETA {'~' if not exact else ''}{duration(eta)}")
        return " · ".join(parts)

    def rate(self, elapsed: float) -> float | None:
        """Stages per second over the last RATE_WINDOW_S (the whole run until that much
        has passed); None before a stage is done."""
        if elapsed <= 0 or not self.done:
            return None
        samples = self._samples
        samples.append((elapsed, self.done))
        while len(samples) > 1 and samples[1][0] <= elapsed - RATE_WINDOW_S:
            samples.popleft()
        since, done_then = samples[0]
        if elapsed - since >= RATE_WINDOW_S / 2 and self.done > done_then:
            return (self.done - done_then) / (elapsed - since)
        return self.done / elapsed


def duration(seconds: float) -> str:
    """`42s`, `3m05s`, `1h02m`."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _batch_text(event: RunEvent) -> str:
    """`batch batch_abc in_progress 120/400` (what the progress line shows of a batch)."""
    if isinstance(event, LLMBatchSubmitted):
        verb = "followed" if event.resumed else "submitted"
        return f"batch {event.batch_id} {verb}: {event.requests} request(s)"
    if isinstance(event, LLMBatchPolled):
        failed = f", {event.failed} failed" if event.failed else ""
        return f"batch {event.batch_id} {event.status} {event.completed}/{event.total}{failed}"
    assert isinstance(event, LLMBatchCompleted)
    return f"batch {event.batch_id} {event.status}: collected {event.completed}"


class _Tracked:
    """The scheduler's executor, counting the calls in flight (submitted, not yet done)."""

    def __init__(self, inner: Any, display: ProgressDisplay) -> None:
        self._inner = inner
        self._display = display

    @property
    def capacity(self) -> int:
        return int(self._inner.capacity)

    def submit(self, key: int, call: Callable[[], Any]) -> None:
        self._inner.submit(key, call)
        self._display.in_flight(+1)

    def next_done(self) -> tuple[int, Any]:
        done = self._inner.next_done()
        if done[0] != SLOT_FREED:  # a parked call is still in flight
            self._display.in_flight(-1)
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class ProgressDisplay:
    def __init__(
        self,
        *,
        enabled: bool,
        stream: TextIO | None = None,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream or sys.stderr
        if not enabled:
            self._mode = Mode.OFF
        elif not is_terminal(self._stream):
            self._mode = Mode.PLAIN
        else:
            self._mode = Mode.DUMB if dumb_terminal(env) else Mode.TERMINAL
        self._clock = clock
        self._start = clock()
        self._last = self._start if self._mode is Mode.PLAIN else float("-inf")
        self._shown = False
        self._lock = threading.Lock()
        self.counts = RunCounts()
        self._current: tuple[str, str, str] = ("", "", "")  # step, lane, what

    @property
    def mode(self) -> Mode:
        return self._mode

    # --- what is fed ----------------------------------------------------------------

    def expect(self, pipeline: ResolvedPipeline) -> None:
        """The plan's steps and sources: how many stages the run has (once chunked)."""
        self.counts.expect(pipeline)

    def track(self, executor: Any) -> Any:
        """The executor the scheduler submits to, counting calls in flight when shown."""
        return executor if self._mode is Mode.OFF else _Tracked(executor, self)

    def in_flight(self, delta: int) -> None:
        self.counts.in_flight = max(0, self.counts.in_flight + delta)
        self._show()

    def phase(self, text: str) -> None:
        """A start-up phase: shown at once (it may last a while, e.g. loading modules)."""
        self._current = ("", "", text)
        self._show(urgent=True)

    def __call__(self, step: str, lane: str, done: int, total: int) -> None:
        """The runner's extract progress of one lane."""
        self.counts.settle(step, lane, done)
        self._current = (step, lane, f"chunk {done}/{total}")
        self._show(last=done == total)

    def event(self, event: RunEvent) -> None:
        """A journal listener: the run's counts and its current step."""
        if self._mode is Mode.OFF:
            return
        if isinstance(event, LLMBatchSubmitted | LLMBatchPolled | LLMBatchCompleted):
            # a batch run waits on its batches: their state is the news (operations.md
            # "Batch runs")
            self._current = ("", "", _batch_text(event))
            self._show()
            return
        if not self.counts.apply(event):
            return
        if isinstance(event, StageDecided):
            self._current = (event.step, event.lane, f"{event.stage.value} {event.code.value}")
        elif isinstance(event, ChunkPlanResolved):
            self._current = (PLANNING, event.source, "")
        elif isinstance(event, LLMCallAttempted) and self._current[0] in ("", PLANNING):
            # the stage that is calling, not a chunk plan left over from before (issue 32)
            self._current = (event.step, event.lane, f"{event.stage.value} LLM call")
        self._show()

    def finish(self) -> None:
        with self._lock:
            if self._shown and self._mode is Mode.TERMINAL:
                self._stream.write(CLEAR)
                self._stream.flush()
            self._shown = False
            if self in _active:
                _active.remove(self)

    # --- how ------------------------------------------------------------------------

    def line(self, now: float, width: int | None = None) -> str:
        """What is shown: the run's counts (once a lane started), then the current step;
        a lane too long for `width` keeps its end (`…ation-copy9.md`)."""
        step, lane, what = self._current
        current = " · ".join(p for p in (step, lane, what) if p)
        if not self.counts.started:
            return current
        summary = self.counts.line(now - self._start)
        if not current:
            return summary
        text = f"{summary} │ {current}"
        if width is not None and len(text) > width and lane:
            keep = max(8, len(lane) - (len(text) - width) - 1)
            if keep < len(lane):
                lane = "…" + lane[-keep:]
                text = f"{summary} │ " + " · ".join(p for p in (step, lane, what) if p)
        return text

    def _columns(self) -> int:
        """The width of the terminal stderr is on (stdout may be a file: `>out.txt`)."""
        if os.environ.get("COLUMNS", "").isdigit() and int(os.environ["COLUMNS"]) > 0:
            return int(os.environ["COLUMNS"])
        try:
            return os.get_terminal_size(self._stream.fileno()).columns or 80
        except (AttributeError, ValueError, OSError):
            return shutil.get_terminal_size().columns

    def _show(self, *, urgent: bool = False, last: bool = False) -> None:
        mode = self._mode
        if mode is Mode.OFF or (mode is Mode.PLAIN and urgent):
            return
        now = self._clock()
        if mode is Mode.PLAIN:
            if now - self._last < PLAIN_INTERVAL_S:
                return
        elif not urgent:
            if now - self._start < DELAY_S:
                return
            interval = DUMB_INTERVAL_S if mode is Mode.DUMB else INTERVAL_S
            if now - self._last < interval and not (last and mode is Mode.TERMINAL):
                return
        with self._lock:
            self._last = now
            if mode is Mode.PLAIN:
                line = self.line(now)
            else:  # a terminal line fits the terminal's width
                width = max(20, min(MAX_WIDTH, self._columns() - 1))
                line = self.line(now, width)[:width]
            try:
                if mode is Mode.TERMINAL:
                    self._stream.write(CLEAR + line)
                    self._shown = True
                    if self not in _active:
                        _active.append(self)
                else:
                    self._stream.write(f"runjournal: {line}\n")
                self._stream.flush()
            except (OSError, ValueError):  # stderr closed or gone: progress is not the run
                self._mode = Mode.OFF
