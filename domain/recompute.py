"""Selective recomputation policy: which steps are forced, which must be restored.

Pure: from the steps' generated-artifact dependencies (`consumes`) and the selected
steps, the forced set is the selection plus every transitive consumer; every other
step is a required reusable input that must be restored from its accepted artifact.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence

import msgspec


class UnknownStepError(ValueError):
    def __init__(self, step: str, known: Iterable[str] = ()) -> None:
        close = difflib.get_close_matches(step, sorted(known), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        super().__init__(f"--recompute names an unknown step '{step}'{hint}")
        self.step = step


class RecomputePolicy(msgspec.Struct, frozen=True):
    selected: tuple[str, ...]
    forced: tuple[str, ...]
    required: tuple[str, ...]

    @property
    def active(self) -> bool:
        return bool(self.selected)


def plan_recompute(
    step_order: Sequence[str], consumes: Mapping[str, Iterable[str]], selected: Iterable[str]
) -> RecomputePolicy:
    """Forced = selected + transitive consumers; required = every unforced step."""
    known = set(step_order)
    chosen: list[str] = []
    for step in selected:
        if step not in known:
            raise UnknownStepError(step, known)
        if step not in chosen:
            chosen.append(step)
    consumers: dict[str, list[str]] = {s: [] for s in step_order}
    for step in step_order:
        for producer in consumes.get(step, ()):
            consumers[producer].append(step)
    forced: set[str] = set()
    stack = list(chosen)
    while stack:
        step = stack.pop()
        if step in forced:
            continue
        forced.add(step)
        stack.extend(consumers[step])
    if not chosen:
        return RecomputePolicy(selected=(), forced=(), required=())
    return RecomputePolicy(
        selected=tuple(s for s in step_order if s in chosen),
        forced=tuple(s for s in step_order if s in forced),
        required=tuple(s for s in step_order if s not in forced),
    )
