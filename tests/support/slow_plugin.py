"""A plugin module whose extract sleeps: a run that is still going (or killed) while a
maintenance command looks at it (tests/e2e/test_maintenance.py,
tests/e2e/test_python_api_maintenance.py)."""

from __future__ import annotations

_SOURCE = """
import time
from runjournal.domain.modules import Module, Normalized

class Slow(Module):
    name = "test.slow"
    fingerprint = "test.slow/1"
    artifact_kind = "slow"
    schema = "test.slow/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        time.sleep(SECONDS)
        return 1

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged)
"""


def slow_plugin(seconds: int) -> str:
    """The plugin's source, its extract sleeping `seconds`."""
    return _SOURCE.replace("SECONDS", str(int(seconds)))
