"""`settled_heap`: the objects that exist before the stages run, kept out of the
cyclic garbage collector's passes while they run.

By the time a run's stages start, the process holds every imported module, the resolved
pipeline and the composed collaborators: tens of thousands of long-lived objects that
each full collection walks again and never frees. A big resume allocates enough to
trigger such collections, and they cost several percent of its cpu
(docs/performance.md "Fully cached `run --resume`"). `gc.freeze` moves those objects to
the permanent generation for the duration; `gc.unfreeze` gives them back afterwards, so
an in-process caller (the tests) collects them as before. The `openai` client, imported
on its own thread while the stages start, joins them when its import ends
(adapters/llm/runtime.py). Nothing is disabled: objects allocated by the run itself are
collected as usual, the youngest generation less often (`YOUNG_THRESHOLD`).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["YOUNG_THRESHOLD", "settled_heap"]


# The youngest generation's threshold while the stages run (700 by default): a run keeps
# most of what it allocates for a while (buffered events, lane state), so each young
# collection walks objects that survive it; fewer, larger ones walk them less often
# (docs/performance.md "Concurrency: `--jobs N` against an LLM endpoint").
YOUNG_THRESHOLD = 20_000


@contextlib.contextmanager
def settled_heap() -> Iterator[None]:
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], YOUNG_THRESHOLD), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
