"""LLM usage of a run: calls, attempts, tokens and cost spent, and what reuse saved.

A pure fold of `LLMCallAttempted` (spent: every attempt, retries included) and
`LLMUsageReused` (saved: the recorded cost of each reused checkpoint). Part of the
manifest, `run --json`, `runs show` and `explain` (docs/operations.md "LLM usage: spent and saved").
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from typing import Any

import msgspec
from runjournal.domain.events import LLMCallAttempted, LLMUsageReused, RunEvent
from runjournal.domain.llm import AttemptStatus, LLMUsage
from runjournal.projections.llm_retries import RetryFold, retries_text

_SLOT = 16  # a digest's bytes, and a slot of `DigestSet`'s table
_EMPTY = bytes(_SLOT)


class DigestSet:
    """A set of keys (tuples of strings and numbers) held as 16-byte digests of them.

    A fold keeps one key per LLM call and one per attempt for the whole run: as tuples
    about 180 bytes each with their set slot; as `bytes` digests in a set about 85; here
    each digest is a slot of one open-addressing table (a `bytearray`, linear probing, at
    most two thirds full), 24 to 48 bytes a key (issue 29: peak RSS). Two keys share a
    digest with a chance of about n^2 / 2^129, so membership is as a set's. One thread
    adds; others may ask `in` meanwhile (the LLM call log, docs/internals.md "Objects
    shared between threads"): a table is replaced whole when it grows, never resized in
    place, and a slot is written in one step."""

    __slots__ = ("_count", "_table", "_zero")

    def __init__(self) -> None:
        self._table = bytearray(_SLOT * 64)
        self._count = 0
        self._zero = False  # the all-zero digest (an empty slot's bytes) was added

    @staticmethod
    def _digest(key: Hashable) -> bytes:
        return hashlib.blake2b(msgspec.msgpack.encode(key), digest_size=_SLOT).digest()

    @staticmethod
    def _slot(table: bytearray, digest: bytes) -> tuple[int, bool]:
        """(offset of `digest`'s slot in `table`, whether it holds it); else an empty one."""
        mask = len(table) // _SLOT - 1
        at = (int.from_bytes(digest[:8], "little") & mask) * _SLOT
        while True:
            held = table[at : at + _SLOT]
            if held == digest:
                return at, True
            if held == _EMPTY:
                return at, False
            at = (at + _SLOT) % len(table)

    def add(self, key: Hashable) -> None:
        digest = self._digest(key)
        if digest == _EMPTY:
            self._count += not self._zero
            self._zero = True
            return
        at, held = self._slot(self._table, digest)
        if held:
            return
        if 3 * (self._count + 1) > 2 * (len(self._table) // _SLOT):
            self._grow()
            at, _ = self._slot(self._table, digest)
        self._table[at : at + _SLOT] = digest
        self._count += 1

    def _grow(self) -> None:
        old = self._table
        table = bytearray(2 * len(old))
        for at in range(0, len(old), _SLOT):
            digest = bytes(old[at : at + _SLOT])
            if digest != _EMPTY:
                to, _ = self._slot(table, digest)
                table[to : to + _SLOT] = digest
        self._table = table  # whole: a reader holds the old table or this one

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple):
            return False
        digest = self._digest(key)
        if digest == _EMPTY:
            return self._zero
        return self._slot(self._table, digest)[1]

    def __len__(self) -> int:
        return self._count


class LLMUsageFold:
    def __init__(self) -> None:
        self.spent = LLMUsage()
        self.saved = LLMUsage()
        self.by_step: dict[str, dict[str, LLMUsage]] = {}
        self.statuses: dict[str, int] = {}
        self.retries = RetryFold()
        # (step, lane, stage, chunk, call) of each call seen
        self._calls = DigestSet()
        # (step, lane, stage, chunk, call, attempt) of every journaled attempt, so a run's
        # end (or `recover`) journals from the call log only what is missing
        # (docs/operations.md "LLM call log")
        self.attempt_keys = DigestSet()

    def _step(self, step: str) -> dict[str, LLMUsage]:
        return self.by_step.setdefault(step, {"spent": LLMUsage(), "saved": LLMUsage()})

    def apply(self, event: RunEvent) -> None:
        if isinstance(event, LLMCallAttempted):
            key = (event.step, event.lane, event.stage.value, event.chunk, event.call)
            new_call = key not in self._calls
            if new_call:
                self._calls.add(key)
            self.attempt_keys.add((*key, event.attempt))
            usage = LLMUsage(
                calls=int(new_call),
                attempts=1,
                prompt_tokens=event.prompt_tokens,
                completion_tokens=event.completion_tokens,
                cost=event.cost,
                cached_tokens=event.cached_tokens,
            )
            self.spent = self.spent.plus(usage)
            step = self._step(event.step)
            step["spent"] = step["spent"].plus(usage)
            self.statuses[event.status.value] = self.statuses.get(event.status.value, 0) + 1
            self.retries.apply(event)
        elif isinstance(event, LLMUsageReused):
            self.saved = self.saved.plus(event.usage)
            step = self._step(event.step)
            step["saved"] = step["saved"].plus(event.usage)

    @property
    def used(self) -> bool:
        return bool(self.spent) or bool(self.saved)

    def view(self) -> dict[str, Any]:
        return {
            "spent": self.spent.view(),
            "saved": self.saved.view(),
            "attempts": dict(sorted(self.statuses.items())),
            "unsuccessful": sum(n for s, n in self.statuses.items() if s != AttemptStatus.OK.value),
            "retries": self.retries.view(),
            "steps": {
                step: {"spent": u["spent"].view(), "saved": u["saved"].view()}
                for step, u in sorted(self.by_step.items())
            },
        }


def usage_line(view: dict[str, Any]) -> str:
    """`3 calls (4 attempts), 812 tokens, cost 0.0012; reuse saved 2 calls, 540 tokens, …`."""

    def part(u: dict[str, Any]) -> str:
        cached = f" of which {u['cached_tokens']} cached" if u.get("cached_tokens") else ""
        return (
            f"{u['calls']} call(s) ({u['attempts']} attempt(s)), {u['tokens']} tokens "
            f"({u['prompt_tokens']} prompt{cached}, {u['completion_tokens']} completion), "
            f"cost {u['cost']:.6g}"
        )

    saved = view["saved"]
    text = f"spent {part(view['spent'])}"
    retries = retries_text(view.get("retries") or {})
    if retries:
        text += f"; unanswered attempts: {retries}"
    if saved["calls"] or saved["attempts"]:
        text += f"; reuse saved {part(saved)}"
    return text
