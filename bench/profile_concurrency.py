"""Where a `--jobs 64` LLM run's cpu goes: one cold run against the instant fake server,
sampled by py-spy, its samples grouped by what the coordinator was doing.

The same corpus as bench/bench_concurrency.py (250 documents x 4 chunks = 1,000
`llm.json` calls). py-spy samples every thread of the run process at 250 Hz and keeps
only busy threads (running, or waiting on the disk: a file sync counts, a socket wait does
not); a sample goes to the first group whose function is on its stack, in the order below.
Skipped with a message when py-spy is not installed (`pip install
'.[bench]'`).

    python bench/profile_concurrency.py [--docs 250] [--chunks 4] [--jobs 64] [--repeat 5]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_concurrency as bench

# (group, a function that marks it), first match wins: outer phases before inner calls.
GROUPS: tuple[tuple[str, str], ...] = (
    ("openai import (overlapped with planning)", "_import_client_meanwhile"),
    ("manifest self-check at the end", "check_run_manifest"),
    ("manifest self-check: committed batches folded", "CommittedFold.committed"),
    ("official openai client (request, HTTP, body)", "OpenAITransport.send"),
    ("call log: intent written before the request", "WriteAhead.begin"),
    ("call log: reply stored after it", "WriteAhead.end"),
    ("call identity and request digest", "Call._intent"),
    ("checkpoint writes", "CheckpointRecorder.write"),
    ("chunk plans settled", "settle_plans"),
    ("journal commits", "CommitBehind._work"),
    ("terminalization (outputs, report, views)", "Terminalizer"),
    ("scheduler, lanes, decisions", "Scheduler.run"),
    ("other imports", "_find_and_load"),
)


# Innermost frames of threads that wait (py-spy may count them busy while they wake up).
IDLE = ("_worker ", "Condition.wait ", "Event.wait ", "Queue.get ")


def spy_binary() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


def groups(raws: list[Path]) -> tuple[collections.Counter[str], int]:
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    lines = [line for raw in raws for line in raw.read_text().splitlines()]
    for line in lines:
        stack, _, n = line.rpartition(" ")
        if not stack.strip() or not n.isdigit():
            continue  # a sample with no Python frame: a thread outside the interpreter
        if stack.rsplit(";", 1)[-1].startswith(IDLE):
            continue  # a pool thread waiting for work, a thread waiting on a condition
        total += int(n)
        name = next((g for g, mark in GROUPS if mark in stack), "other (our code elsewhere)")
        counts[name] += int(n)
    return counts, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=250)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5, help="cold runs whose samples add up")
    args = parser.parse_args()
    spy = spy_binary()
    if spy is None:
        print("py-spy is not installed: profile skipped (pip install '.[bench]')")
        return 0
    server, url = bench.start_fake(0.0)
    tmp = Path(tempfile.mkdtemp(prefix="rj-profile-concurrency-"))
    try:
        root = tmp / "corpus"
        bench.make_corpus(root, args.docs, args.chunks, url, url)
        raws: list[Path] = []
        env = {**bench.ENV, bench.KEY_VAR: "sk-" + "bench-" + "x" * 24}
        for i in range(args.repeat):  # cold runs: a fresh cache and output root each
            raw = tmp / f"samples-{i}.txt"
            argv = [str(bench.SCRIPT), "run", str(root / "pipeline.toml"), "--json"]
            argv += ["--no-progress", "--profile", "fake"]
            argv += ["--profiles-file", str(root / "profiles.toml"), "--jobs", str(args.jobs)]
            argv += ["--output-root", str(tmp / f"out-{i}"), "--cache-root", str(tmp / f"c-{i}")]
            record = [spy, "record", "-r", "250", "--nonblocking", "-f", "raw", "-o", str(raw)]
            proc = subprocess.run(
                [*record, "--", *argv], env=env, capture_output=True, text=True, check=False
            )
            if proc.returncode != 0 or not raw.exists():
                print(f"py-spy could not profile the run: {proc.stderr.strip()[-300:]}")
                return 1
            raws.append(raw)
        counts, total = groups(raws)
        calls = args.docs * args.chunks
        print(
            f"{calls} calls ({args.docs} documents x {args.chunks} chunks), --jobs {args.jobs}, "
            f"instant server, {args.repeat} cold runs: {total} busy samples (running or in a disk "
            f"wait) at 250 Hz; "
            f"load {bench.load()}"
        )
        for name, n in counts.most_common():
            print(f"{n / total:6.1%}  {name}")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.exit(main())
