"""`settled_heap`: the objects that exist before the stages run, kept out of the
cyclic garbage collector's passes while they run.

By the time a run's stages start, the process holds every imported module, the resolved
pipeline and the composed collaborators: tens of thousands of long-lived objects that
each full collection walks again and never frees. A big resume allocates enough to
trigger such collections, and they cost several percent of its cpu
(docs/performance.md "Fully cached `run --resume`"). `gc.freeze` moves those objects to
the permanent generation for the duration; `gc.unfreeze` gives them back afterwards, so
an in-process caller (the tests) collects them as before. Nothing is disabled: objects
allocated by the run itself are collected as usual.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["settled_heap"]


@contextlib.contextmanager
def settled_heap() -> Iterator[None]:
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
