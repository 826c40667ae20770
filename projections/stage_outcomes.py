"""What became of each stage decision: executed, reused, refused, failed, or not started.

A decision to execute is journaled before the stage runs (docs/internals.md "The
scheduler (`scheduler.py`)"), so a run that stops (interrupted, abandoned, or failed and
no longer scheduling) can hold decisions whose stage never ran. Their stage's
`StageExecuted` or `StageFailed` is what says it ran; until one is seen the decision is
pending, and what is still pending when the events end was never started
(docs/operations.md "Stages that were decided but never started").
"""

from __future__ import annotations

import enum
from collections import deque

from runjournal.domain.events import RunEvent, StageDecided, StageExecuted, StageFailed
from runjournal.domain.reasons import Category

# (step, lane, stage, chunk): one stage of one run.
StageKey = tuple[str, str, str, str]


class Outcome(enum.StrEnum):
    EXECUTED = "executed"  # the stage ran and its result was recorded
    REUSED = "reused"  # a checkpoint or an accepted artifact was used: nothing to run
    REFUSED = "refused"  # a required predecessor could not be restored: never runs
    FAILED = "failed"  # the stage ran and failed (its decision and its `stage_failed`)
    NOT_STARTED = "not_started"  # decided to run, never ran: the run stopped first
    # a repeated identical chunk (same chunk id) whose twin ran in this run: its result
    # was used again, nothing was left undone (explain's word, issue 32)
    DEDUPLICATED = "deduplicated"


# Decisions that take effect when they are made: nothing runs after them.
_AT_ONCE = {
    Category.REUSE: Outcome.REUSED,
    Category.PREDECESSOR_FAILURE: Outcome.REFUSED,
    Category.FAILURE: Outcome.FAILED,
}


def key_of(event: StageDecided | StageExecuted | StageFailed) -> StageKey:
    return (event.step, event.lane, event.stage.value, event.chunk)


_REUSE, _PREDECESSOR_FAILURE, _FAILURE = (
    Category.REUSE,
    Category.PREDECESSOR_FAILURE,
    Category.FAILURE,
)


def immediate(event: StageDecided) -> Outcome | None:
    """The outcome of a decision that needs no execution; None while it waits for one.

    `_AT_ONCE` by identity: an enum member's hash is a Python call (about 0.9 us), and
    every fold of every decision asks this (the live views, `run`'s committed fold,
    `explain`, the audit; docs/performance.md "Fully cached `run --resume`")."""
    category = event.category
    if category is _REUSE:
        return Outcome.REUSED
    if category is _PREDECESSOR_FAILURE:
        return Outcome.REFUSED
    if category is _FAILURE:
        return Outcome.FAILED
    return None


class _Twins(deque):
    """The tokens of several pending decisions of one stage key, oldest first."""


class PendingStages:
    """Decisions to execute whose stage has not been seen running yet, by stage.

    Holds only those: a lane's events are journaled together, so this stays as small as
    one lane, plus whatever a stopped run never started.

    One stage key can be pending more than once: a chunk's id is the digest of its
    source and bytes (domain/identity.py), so a document that repeats a chunk decides
    each copy before any runs (docs/operations.md "Stages that were decided but never
    started"). Such twins wait in decision order and each execution settles the oldest:
    a twin is never overwritten, so every decision is counted once (issue #25).
    """

    def __init__(self) -> None:
        # one token, or `_Twins` when the key is pending more than once (rare)
        self._pending: dict[StageKey, object] = {}
        # keys of which one twin ran while another was still pending (rarer still)
        self._ran_twins: set[StageKey] = set()

    def apply(self, event: RunEvent, token: object = None) -> tuple[object, Outcome] | None:
        """Fold one event; when it settles a pending decision, that decision's token and
        outcome. A decision to execute is remembered with `token` (the caller's handle)."""
        if isinstance(event, StageDecided):
            if immediate(event) is None:
                key = key_of(event)
                held = self._pending.get(key, _ABSENT)
                if held is _ABSENT:
                    self._pending[key] = token
                elif isinstance(held, _Twins):
                    held.append(token)
                else:
                    self._pending[key] = _Twins((held, token))
            return None
        if isinstance(event, StageExecuted | StageFailed):
            key = key_of(event)
            held = self._pending.get(key, _ABSENT)
            if held is _ABSENT:
                return None
            outcome = Outcome.EXECUTED if isinstance(event, StageExecuted) else Outcome.FAILED
            if isinstance(held, _Twins):
                settled = held.popleft()
                if len(held) == 1:
                    self._pending[key] = held[0]
                if outcome is Outcome.EXECUTED:
                    self._ran_twins.add(key)
                return settled, outcome
            del self._pending[key]
            return held, outcome
        return None

    def deduplicated(self) -> list[object]:
        """The tokens, among those still pending, of decisions whose identical twin (same
        step, lane, stage and chunk id) executed in this run: the stage's result exists,
        the run did not stop before it. `never_started` still lists them (the manifest's
        counts); explain shows them with their own word."""
        out: list[object] = []
        for key in self._ran_twins:
            held = self._pending.get(key, _ABSENT)
            if held is _ABSENT:
                continue
            out.extend(held if isinstance(held, _Twins) else [held])
        return out

    def never_started(self) -> list[object]:
        """The tokens of the decisions whose stage never ran, in decision order of each
        key's first pending decision (twins together)."""
        out: list[object] = []
        for held in self._pending.values():
            if isinstance(held, _Twins):
                out.extend(held)
            else:
                out.append(held)
        return out


_ABSENT = object()
