"""The stress tier: race-prone paths repeated with the smallest caches and the most threads.

Every test here is marked `stress` (docs/internals.md "Testing"); CI runs the tier with the
rest of the suite, `python -m pytest -q -m "not stress"` leaves it out locally.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/stress/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.stress)
