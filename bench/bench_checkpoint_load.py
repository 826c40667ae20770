"""Micro-benchmark: one `CheckpointLoader.load()` of a small PRESENT checkpoint.

Prints the time per load (target: well under 50 µs) and its ratio to a raw
`open().read()` + sha256 of the same file in the same run, so the number travels
between machines. Run: `python bench/bench_checkpoint_load.py [iterations]`.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from runjournal.adapters.checkpoints import CheckpointLoader, CheckpointRecorder, Workspace
from runjournal.adapters.fsroot import FsRoot
from runjournal.domain.decisions import CheckpointState, Stage, StageDigests
from runjournal.domain.identity import LaneComponents
from runjournal.domain.ports import CheckpointKey, CheckpointRecord

REPEATS = 5


def best_per_call(fn: Callable[[], object], iterations: int) -> float:
    """Best mean over REPEATS rounds, in seconds per call (the least disturbed round)."""
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(iterations):
            fn()
        best = min(best, (time.perf_counter() - start) / iterations)
    return best


def main(iterations: int = 20_000) -> None:
    payload = b'{"terms":[{"term":"checkpoint","count":3},{"term":"lane","count":2}]}'
    components = LaneComponents(*(hashlib.sha256(c.encode()).hexdigest() for c in "abcdefg"))
    record = CheckpointRecord(
        codec_id="builtin.terms:normalize",
        lane_identity=hashlib.sha256(b"lane").hexdigest(),
        digests=StageDigests(components, hashlib.sha256(b"input").hexdigest(), ""),
        output_sha256=hashlib.sha256(payload).hexdigest(),
        payload=payload,
        warnings=["one short paragraph"],
    )
    key = CheckpointKey("terms", "docs/intro.md", Stage.NORMALIZE)
    with tempfile.TemporaryDirectory() as tmp, FsRoot.open(Path(tmp) / "ws", create=True) as root:
        workspace = Workspace(root, "bench")
        CheckpointRecorder(workspace).write(key, record)
        loader = CheckpointLoader(workspace)
        assert loader.load(key, record.codec_id).state is CheckpointState.PRESENT
        path = Path(tmp) / "ws" / Workspace.checkpoint_name(key)
        size = path.stat().st_size

        def raw() -> bytes:
            with open(path, "rb") as handle:
                return hashlib.sha256(handle.read()).digest()

        load_s = best_per_call(lambda: loader.load(key, record.codec_id), iterations)
        raw_s = best_per_call(raw, iterations)
    print(f"checkpoint file: {size} bytes ({len(payload)} payload bytes)")
    print(f"load():               {load_s * 1e6:8.2f} µs per call (target < 50 µs)")
    print(f"open().read()+sha256: {raw_s * 1e6:8.2f} µs per call")
    print(f"ratio load/raw:       {load_s / raw_s:8.2f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)
