"""What knowing the inputs' digests costs per input: `input_check = "verify"` (read, UTF-8
check and sha256 of every file) against `"stat"` with every file trusted from the stat
cache (read once for the chunks, no check, no hash), and the stat cache's first run
(hashed and recorded). Issue 29: "a stat-based fast path for inputs ... at most 5 us cpu
per decision".

DOCS documents of SIZE bytes in a temp dir; each figure is the best of REPEAT passes of
`load_sources` in this process (cpu time), per input and per decision at PER_KB
decisions per KB of input (the glossary example makes 6.4 over examples/real-docs:
1,508 decisions for 237 kB, bench/bench_cache_bytes.py), so about 140 for a 22 KB page,
the average of the issue's Python docs.

    python bench/bench_input_check.py [--docs 2000] [--size 22000] [--per-kb 6.4]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.input_stats import RACY_NS, InputStats
from runjournal.adapters.sources import load_sources

WORDS = ["journal", "checkpoint", "resume", "stage", "lane", "digest", "segment", "index"]


def best(passes: int, fn) -> float:
    out = float("inf")
    for _ in range(passes):
        start = time.process_time()
        fn()
        out = min(out, time.process_time() - start)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--size", type=int, default=22000)
    parser.add_argument("--per-kb", type=float, default=6.4)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(29)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "docs").mkdir()
        for d in range(args.docs):
            text = " ".join(rng.choice(WORDS) for _ in range(args.size // 7))
            (base / "docs" / f"d{d:06d}.md").write_text(text[: args.size])
        with FsRoot.open(base / "cache", create=True) as root:

            def load(stats: InputStats | None) -> None:
                load_sources(["docs/*.md"], base_dir=str(base), key="inputs", stats=stats)
                if stats is not None:
                    stats.close()

            verify = best(args.repeat, lambda: load(None))
            # a recording clock past the racy window: every file trusted afterwards
            later = lambda: time.time_ns() + 10 * RACY_NS  # noqa: E731
            first = best(1, lambda: load(InputStats(root, clock=later)))
            trusted = best(args.repeat, lambda: load(InputStats(root, clock=later)))
    n, per = args.docs, max(1, round(args.per_kb * args.size / 1000))
    print(f"{n:,} inputs of {args.size:,} bytes; cpu, best of {args.repeat}")
    for name, cpu in (("verify", verify), ("stat, first run", first), ("stat, trusted", trusted)):
        print(
            f"{name:<16} {cpu / n * 1e6:7.1f} us per input  "
            f"{cpu / n / per * 1e6:6.2f} us per decision at {per} decisions per input"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
