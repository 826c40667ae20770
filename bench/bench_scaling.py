"""Is the cost per decision of `gc --cache`, `journal audit` and `explain` flat as the corpus
grows (issue 29: "`gc --cache` and `journal audit` linear")?

For each size in SIZES (documents), in one run of this script: `bench_million.py`'s corpus
and pipeline (an `llm.json` step answered at once by the loopback fake server, then
`builtin.terms`), a cold run, one no-op `run --resume`, then REPEAT times each: `journal
audit` and `explain` of the no-op resume, and `gc --cache` (every run kept: it reads every
run's references, scans the cache, removes nothing and compacts). Each command is a child
timed with `wait4` by a small spawner (bench/spawn.py: cpu = user + system, wall, and the
child's own peak RSS, not the bench's); medians of REPEAT, the largest peak RSS. Then, per
command, cpu and wall per decision at each size and the ratio of the largest size's to
the smallest's (1.00x: linear; fixed start-up makes it fall below 1), and peak RSS with
its ratio (sub-linear: below the ratio of the sizes). The load average is printed before
and after each size: cpu per decision on a shared machine moves with it.

    python bench/bench_scaling.py [--sizes 1000,3000,10000] [--repeat 3] [--keep DIR]

With `--keep DIR` the corpora, journals and caches stay under DIR/<size> (for profiling:
`python -m cProfile -o p.out -m runjournal.cli.main journal audit RUN --output-root ...`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
from pathlib import Path

from bench_concurrency import ENV, KEY_VAR, SCRIPT, start_fake
from bench_million import make_corpus, run_args
from spawn import Spawner

COMMANDS = ("gc --cache", "journal audit", "explain")


def measure(
    spawner: Spawner, root: Path, repeat: int
) -> tuple[int, dict[str, list[tuple[float, float, int]]]]:
    """The decisions of the cold run and each command's (cpu, wall, peak RSS) samples."""
    env = dict(ENV, **{KEY_VAR: "bench-key"})

    def command(*args: str, keep: bool = False) -> tuple[float, float, int, str]:
        return spawner.run([str(SCRIPT), *args], cwd=root, env=env, keep_output=keep)

    out = command(*run_args(root), keep=True)[3]
    decisions = sum(json.loads(out)["decisions"].values())
    out = command(*run_args(root, "--resume"), keep=True)[3]
    noop = json.loads(out)["run_id"]
    outs = ("--output-root", str(root / "out"))
    argv = {
        "gc --cache": ("gc", "--cache", *outs, "--cache-root", str(root / "cache"), "--json"),
        "journal audit": ("journal", "audit", noop, *outs, "--json"),
        "explain": ("explain", noop, *outs, "--json"),
    }
    samples: dict[str, list[tuple[float, float, int]]] = {name: [] for name in COMMANDS}
    for _ in range(repeat):  # interleaved: a burst of load falls on every command alike
        for name in COMMANDS:
            samples[name].append(command(*argv[name])[:3])
    return decisions, samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,3000,10000")
    parser.add_argument("--paras", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="keep each size's corpus under DIR/<size>")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    spawner = Spawner()  # children's peak RSS their own (bench/spawn.py)
    server, url = start_fake(0.0)
    rows: dict[int, tuple[int, dict[str, tuple[float, float, int]]]] = {}
    loads = []
    try:
        for size in sizes:
            with tempfile.TemporaryDirectory() as tmp:
                root = (args.keep / str(size)) if args.keep else Path(tmp)
                make_corpus(root, size, args.paras, url)
                before = os.getloadavg()[0]
                decisions, samples = measure(spawner, root, args.repeat)
                loads.append((size, before, os.getloadavg()[0]))
                rows[size] = (
                    decisions,
                    {
                        name: (
                            statistics.median(s[0] for s in got),
                            statistics.median(s[1] for s in got),
                            max(s[2] for s in got),
                        )
                        for name, got in samples.items()
                    },
                )
    finally:
        spawner.close()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
    small, large = sizes[0], sizes[-1]
    print(
        f"{len(sizes)} corpora of bench_million.py's documents ({args.paras} paragraphs), "
        f"medians of {args.repeat}; each command of the no-op resume after a cold run"
    )
    print(
        "load (1 min) before/after each size: "
        + ", ".join(f"{s:,} docs {b:.1f}/{a:.1f}" for s, b, a in loads)
    )
    print("decisions: " + ", ".join(f"{s:,} docs {rows[s][0]:,}" for s in sizes))
    head = "".join(f"{f'{s:,} docs':>12}" for s in sizes)
    print(f"{'us per decision':<22}{head}{'ratio':>9}")
    for name in COMMANDS:
        for i, what in ((0, "cpu"), (1, "wall")):
            per = {s: rows[s][1][name][i] / rows[s][0] * 1e6 for s in sizes}
            cells = "".join(f"{per[s]:12.1f}" for s in sizes)
            print(f"{name + ' ' + what:<22}{cells}{per[large] / per[small]:8.2f}x")
    print(
        f"{'peak RSS MiB':<22}{head}{'ratio':>9}"
        f"  (decisions x{rows[large][0] / rows[small][0]:.1f})"
    )
    for name in COMMANDS:
        rss = {s: rows[s][1][name][2] / 2**20 for s in sizes}
        cells = "".join(f"{rss[s]:12.0f}" for s in sizes)
        print(f"{name:<22}{cells}{rss[large] / rss[small]:8.2f}x")


if __name__ == "__main__":
    sys.exit(main())
