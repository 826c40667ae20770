"""Counting condition waits: the wake-up tests count how often callers wait instead of
timing them (docs/performance.md "Wake-ups per call")."""

from __future__ import annotations

import threading
import types

import pytest


def count_condition_waits(monkeypatch: pytest.MonkeyPatch, module: types.ModuleType) -> list[int]:
    """A list that gets one item per `Condition.wait` made by `module`'s conditions
    (those it creates through its `threading` name from now on)."""
    waits: list[int] = []

    class Counting(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(1)  # under the condition's lock
            return super().wait(timeout)

    shim = types.SimpleNamespace(**{**vars(threading), "Condition": Counting})
    monkeypatch.setattr(module, "threading", shim)
    return waits
