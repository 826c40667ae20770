"""Where a `--jobs 64` LLM run's cpu goes, measured per component on the threads that
spend it: the same cold runs as bench/bench_concurrency.py against the instant fake server
(`--latency`: one answering after that many seconds).

A sampling profiler counts a thread that waits for the disk as busy, so
its shares are not cpu (py-spy gave the manifest self-check a third of a run's samples
where the check took 0.05 s of cpu). Here each run process wraps a few functions so that
each call adds the cpu its own thread spent inside it (`time.thread_time`: user and
system time of that thread, nothing while it waits) to its component; the outermost
call of a component counts, components nest (the client is inside the call). Printed:
per component, cpu per call (milliseconds, the median of REPEAT runs, over the calls of
the run), beside the run's cpu per call (`getrusage` of the run process, minus a
one-call run's, over calls - 1, as bench_concurrency.py computes it).

Also printed: how many times each component was entered per call (its outermost calls;
a checkpoint `write_many` is one index transaction) and the run's voluntary context
switches per call (`getrusage`, every thread: each a wait and a wake-up).

    python bench/cpu_by_component.py [--docs 250] [--chunks 4] [--jobs 64] [--repeat 5]
                                     [--latency 0.2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_concurrency as bench

# (component, "module:qualified name" where the name is looked up when called), as printed;
# a component's calls may be inside the ones above it
_RJ = "runjournal."
COMPONENTS: tuple[tuple[str, str], ...] = (
    ("one LLM call (all below, on its job thread)", _RJ + "adapters.llm.runtime:Call._exchange"),
    ("  the transport's send", _RJ + "adapters.llm.transport:OpenAITransport.send"),
    ("    official client's request (HTTP, headers)", "openai._base_client:SyncAPIClient.request"),
    ("    reply body read under its cap", _RJ + "adapters.llm.transport:OpenAITransport._body"),
    ("  intent logged, group fsync waited", _RJ + "adapters.llm.calllog:WriteAhead.begin"),
    ("  reply stored, outcome logged", _RJ + "adapters.llm.calllog:WriteAhead.end"),
    ("checkpoint writes (writer threads)", _RJ + "adapters.checkpoints:CheckpointRecorder.write"),
    (
        "checkpoint writes (writer threads)",
        _RJ + "adapters.checkpoints:CheckpointRecorder.write_many",
    ),
    ("packed store puts (all entries)", _RJ + "adapters.packed_store:PackedStore.put"),
    ("scheduler: lanes, decisions, events", _RJ + "domain.runner.scheduler:Scheduler.run"),
    ("packed store puts (all entries)", _RJ + "adapters.packed_store:PackedStore.put_many"),
    ("segment retired and sealed", _RJ + "adapters.packed_store:PackedStore._retire"),
    ("journal commits (committer thread)", _RJ + "adapters.journal.store:JournalStore._put"),
    ("chunk plans looked up", _RJ + "domain.runner.pipeline_runner:resolve_plans"),
    ("chunk plans published and synced", _RJ + "domain.runner.pipeline_runner:settle_plans"),
    ("after the stages: self-check, report, latest", _RJ + "app.run_pipeline:_finish"),
    ("  checkpoint writes handed to the pool", _RJ + "cli.parallel:CheckpointWritePool.submit"),
    ("every fsync of the process", _RJ + "adapters.llm.calllog:os.fsync"),
)

CHILD = """
import importlib, json, os, sys, threading, time
components = json.loads(sys.argv[1])
spent = {name: 0.0 for name, _ in components}
counts = {name: 0 for name, _ in components}
lock, local = threading.Lock(), threading.local()

def wrap(name, fn):
    def timed(*args, **kwargs):
        depth = getattr(local, name, 0)
        setattr(local, name, depth + 1)
        start = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            setattr(local, name, depth)
            if not depth:
                with lock:
                    spent[name] += time.thread_time() - start
                    counts[name] += 1
    return timed

for name, where in components:
    module, _, attr = where.partition(":")
    owner = importlib.import_module(module)
    *path, last = attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    setattr(owner, last, wrap(name, getattr(owner, last)))

from runjournal.cli.main import main
sys.argv = ["runjournal", *sys.argv[3:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
finally:
    with open(os.environ["RJ_BENCH_SPENT"], "w") as fh:
        json.dump({"spent": spent, "counts": counts}, fh)
sys.exit(code)
"""


def measured(
    root: Path, cache: Path, jobs: int, spent: Path
) -> tuple[float, dict[str, float], dict[str, int]]:
    """One run under the wrappers: its cpu (getrusage), the cpu of each component and
    how many times it was entered (outermost calls); in the counts, "switches": the
    run's voluntary context switches (a thread that blocked: a wait, a wake-up)."""
    argv = [sys.executable, "-c", CHILD, json.dumps(COMPONENTS), "-", "run"]
    argv += [str(root / "pipeline.toml"), "--json", "--no-progress", "--profile", "fake"]
    argv += ["--profiles-file", str(root / "profiles.toml"), "--jobs", str(jobs)]
    argv += ["--output-root", f"{cache}-out", "--cache-root", str(cache)]
    env = {**bench.ENV, bench.KEY_VAR: "sk-" + "bench-" + "x" * 24}
    env["RJ_BENCH_SPENT"] = str(spent)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    got = json.loads(spent.read_text())
    return cpu, got["spent"], {**got["counts"], "switches": after.ru_nvcsw - before.ru_nvcsw}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=250)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--latency", type=float, default=0.0, help="seconds per answer (0: the instant server)"
    )
    args = parser.parse_args()
    calls = args.docs * args.chunks
    server, url = bench.start_fake(args.latency)
    tmp = Path(tempfile.mkdtemp(prefix="rj-bench-cpu-"))
    try:
        bench.make_corpus(tmp / "corpus", args.docs, args.chunks, url, url)
        bench.make_corpus(tmp / "one", 1, 1, url, url)
        starts, runs, switches = [], [], []
        parts: dict[str, list[float]] = {name: [] for name, _ in COMPONENTS}
        entered: dict[str, list[float]] = {name: [] for name, _ in COMPONENTS}
        print(
            f"{calls} calls ({args.docs} documents x {args.chunks} chunks), --jobs {args.jobs}, "
            f"{f'latency {args.latency * 1000:.0f} ms' if args.latency else 'instant server'}, "
            f"medians of {args.repeat} cold runs; load {bench.load()} before"
        )
        for i in range(args.repeat):
            starts.append(measured(tmp / "one", tmp / f"one-{i}", args.jobs, tmp / "s.json")[0])
            cpu, spent, counts = measured(
                tmp / "corpus", tmp / f"run-{i}", args.jobs, tmp / "s.json"
            )
            runs.append(cpu)
            switches.append(counts["switches"] / calls)
            for name, seconds in spent.items():
                parts[name].append(seconds / calls * 1000)
                entered[name].append(counts[name] / calls)
        per = (statistics.median(runs) - statistics.median(starts)) / (calls - 1) * 1000
        print(f"the run's cpu per call (getrusage, above a one-call run): {per:.2f} ms")
        print(
            f"voluntary context switches per call, all threads: {statistics.median(switches):.1f}"
        )
        print("    cpu/call  entered/call  component")
        for name, values in parts.items():
            times = statistics.median(entered[name])
            print(f"{statistics.median(values):8.3f} ms  {times:12.2f}  {name}")
        print(f"load {bench.load()} after")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.exit(main())
