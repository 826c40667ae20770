"""The traced peak of one in-process run: what the memory-growth tests compare at two
corpus sizes (issue 29; a ratio of peaks, never a wall-clock bound)."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import runjournal


def traced_run_peak(project: runjournal.Project, *, resume: bool) -> tuple[int, Any]:
    """Peak bytes traced while `project` runs, and its result (which must succeed)."""
    gc.collect()
    tracemalloc.start()
    try:
        result = project.run(resume=resume)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.succeeded, result.document
    return peak, result
