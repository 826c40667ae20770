"""CPU-bound module calls under `--executor threads`, `processes` and `dask`, in one run.

Builds DOCS documents of CHUNKS one-paragraph chunks (200 extracts by default) for a path
plugin whose extract is pure-Python work (a loop of integer arithmetic) calibrated here to
about WORK_MS per call, and times REPEAT cold runs (fresh cache root) of each executor with
`--jobs JOBS`. In the same run, the floor of each executor is the same pipeline with no
work per call (start-up, a cluster's start and stop, shipping, decisions, checkpoints,
journal: everything but the module's CPU time).

    python bench/bench_executors.py [--docs 20] [--chunks 10] [--work-ms 20] [--jobs 2]
                                    [--repeat 5]

Reported per executor (medians of REPEAT): wall, cpu (user + system of the run and of
every process under it, its pool or a LocalCluster's nannies and workers, sampled every
20 ms with psutil: the last sample of each, so up to 20 ms of each process is missed),
the floor, the speedup over `threads` (threads wall / wall) and the speedup of the work
part alone ((wall - floor) of threads / (wall - floor); target >= 1.7x with 2 workers on
2 cores: the floor, a cluster's start-up above all, is paid once per run).
The peer: the same calls of the same pure-Python function, once in one process and once
over a pool of JOBS processes outside runjournal, measured between the runs: the speedup
this machine offers at that moment (other users of the cores lower it), the most an
executor can reach. Then the Dask scheduling overhead per task: REPEAT rounds of CALLS
zero-work `StageTask`s through the run's own `OffloadingExecutor` (capacity JOBS) on a
LocalCluster of JOBS workers started in this process, against the same through a
`processes` pool: the wall per task, and per task per worker slot (wall x JOBS / CALLS).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = Path(sys.executable).parent / "runjournal"

PLUGIN = '''
from runjournal.domain.modules import Module, Normalized


def burn(rounds):
    acc = 0
    for i in range(rounds):
        acc = (acc * 31 + i) % 1000003
    return acc


class Burn(Module):
    """Pure-Python work per chunk: `rounds` iterations of integer arithmetic."""

    fingerprint = "bench.burn/1"
    artifact_kind = "burn"
    schema = "bench.burn/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        return burn(int(ctx.params["rounds"])) + len(chunk.text)

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged)
'''

PIPELINE = """name = "executors"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 40
[[steps]]
id = "burn"
module = "plugins/burn.py:Burn"
params = {{ rounds = {rounds} }}
"""


def calibrate(work_ms: float) -> tuple[int, float]:
    """Rounds of `burn` that take about `work_ms` here, and what they take (median ms)."""
    namespace: dict[str, object] = {}
    exec(PLUGIN.split("class Burn")[0], namespace)
    burn = namespace["burn"]
    rounds = 20000
    for _ in range(3):
        took = statistics.median(_time(burn, rounds) for _ in range(5))
        rounds = max(1, int(rounds * work_ms / 1000 / took))
    return rounds, statistics.median(_time(burn, rounds) for _ in range(7)) * 1000


def _burn_module():
    namespace: dict[str, object] = {}
    exec(PLUGIN.split("class Burn")[0], namespace)
    return namespace["burn"]


def available_speedup(pool, rounds: int, calls: int, workers: int) -> float:
    """What `workers` processes buy on this machine now: `calls` burns in this process,
    against the same spread over an already started pool (the peer of the runs)."""
    burn = _burn_module()
    start = time.perf_counter()
    for _ in range(calls):
        burn(rounds)
    serial = time.perf_counter() - start
    start = time.perf_counter()
    pool.map(_pool_burn, [rounds] * calls, chunksize=max(1, calls // (4 * workers)))
    return serial / (time.perf_counter() - start)


def _pool_burn(rounds: int) -> int:
    return _burn_module()(rounds)


def _time(fn, arg) -> float:
    start = time.perf_counter()
    fn(arg)
    return time.perf_counter() - start


def make_project(root: Path, docs: int, chunks: int) -> None:
    (root / "plugins").mkdir(parents=True)
    (root / "plugins" / "burn.py").write_text(PLUGIN)
    (root / "docs").mkdir()
    for d in range(docs):
        paragraphs = [f"Document {d} paragraph {c} words." for c in range(chunks)]
        (root / "docs" / f"d{d:03d}.md").write_text("\n\n".join(paragraphs) + "\n")


def run(root: Path, executor: str, jobs: int, rounds: int, tag: str) -> tuple[float, float]:
    """One cold run: (wall s, cpu s of the run and what it reaped)."""
    (root / "pipeline.toml").write_text(PIPELINE.format(rounds=rounds))
    cache, out = root / f"cache-{tag}", root / f"out-{tag}"
    shutil.rmtree(cache, ignore_errors=True)
    argv = [str(SCRIPT), "run", str(root / "pipeline.toml"), "--executor", executor]
    argv += ["--jobs", str(jobs), "--cache-root", str(cache), "--output-root", str(out)]
    argv += ["--no-progress", "--json"]
    import psutil  # a dependency of distributed, which this bench needs anyway

    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out_file, tempfile.TemporaryFile("w+") as err_file:
        proc = subprocess.Popen(argv, stdout=out_file, stderr=err_file, text=True)
        # CPU of the run and of every process under it: pool workers are forked by a
        # forkserver and cluster workers by nannies, so the run never reaps them and
        # RUSAGE_CHILDREN misses them; each one's last sample is kept.
        seen: dict[int, float] = {}
        root_proc = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                tree = [root_proc, *root_proc.children(recursive=True)]
            except psutil.Error:
                tree = []
            for p in tree:
                try:
                    t = p.cpu_times()
                    seen[p.pid] = t.user + t.system
                except psutil.Error:
                    pass
            time.sleep(0.02)
        wall = time.perf_counter() - start
        out_file.seek(0)
        err_file.seek(0)
        stdout, stderr = out_file.read(), err_file.read()
    if proc.returncode != 0:
        raise SystemExit(f"{executor} run failed: {stderr.strip()[-500:]}")
    calls = json.loads(stdout)["module_calls"]
    if calls < 1:
        raise SystemExit(f"{executor}: no module calls")
    return wall, sum(seen.values())


def overhead(jobs: int, calls: int, repeat: int) -> dict[str, float]:
    """Median wall per zero-work task through `OffloadingExecutor`, Dask and processes."""
    from runjournal.adapters.executors.dask_workers import DaskWorkers
    from runjournal.adapters.executors.offloading import OffloadingExecutor
    from runjournal.adapters.executors.processes import ProcessWorkers
    from runjournal.domain.decisions import Stage
    from runjournal.domain.modules import Chunk
    from runjournal.domain.pipeline import ModuleShipment
    from runjournal.domain.runner.tasks import StageCall, StageTask, TaskContext

    chunk = Chunk(id="c", source="a.md", start=0, end=1, text="a", sha256="0" * 64)
    context = TaskContext("s", "a.md", {}, {}, {}, {})
    task = StageTask(
        ModuleShipment("builtin.terms", os.getcwd()), Stage.EXTRACT, "c", context, chunk
    )
    call = StageCall(lambda: None, lambda: task, lambda reply: reply)
    results: dict[str, float] = {}
    for name, make in (
        ("dask", lambda: DaskWorkers(jobs)),
        ("processes", lambda: ProcessWorkers(jobs)),
    ):
        executor = OffloadingExecutor(make(), jobs)
        try:
            _round(executor, call, 2 * jobs)  # workers started, the module loaded once
            results[name] = (
                statistics.median(_round(executor, call, calls) for _ in range(repeat)) / calls
            )
        finally:
            executor.close()
    return results


def _round(executor, call, calls: int) -> float:
    """`calls` calls with `capacity` in flight, as the scheduler keeps them."""
    start = time.perf_counter()
    submitted = done = 0
    while done < calls:
        while submitted < calls and submitted - done < executor.capacity:
            executor.submit(submitted, call)
            submitted += 1
        _, reply = executor.next_done()
        if reply.error is not None:
            raise SystemExit(f"zero-work task failed: {reply.error}")
        done += 1
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20)
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--work-ms", type=float, default=20.0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args()
    if args.repeat < 5:
        parser.error("--repeat must be >= 5 (figures are medians of >= 5 runs)")
    rounds, per_call_ms = calibrate(args.work_ms)
    executors = ("threads", "processes", "dask")
    times: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    available: list[float] = []
    extracts = args.docs * args.chunks
    context = multiprocessing.get_context("spawn")
    with (
        tempfile.TemporaryDirectory(prefix="rj-bench-exec-") as tmp,
        context.Pool(args.jobs) as pool,
    ):
        root = Path(tmp)
        make_project(root, args.docs, args.chunks)
        pool.map(_pool_burn, [1] * args.jobs)  # started before anything is timed
        for _ in range(args.repeat):  # interleaved: a load change hits every executor alike
            available.append(available_speedup(pool, rounds, extracts, args.jobs))
            for executor in executors:
                for floor in (False, True):
                    key = (executor, floor)
                    result = run(root, executor, args.jobs, 0 if floor else rounds, executor)
                    times.setdefault(key, []).append(result)
    print(
        f"{extracts} extracts ({args.docs} documents x {args.chunks} chunks) of "
        f"{per_call_ms:.1f} ms pure-Python work each (calibrated: {rounds} rounds), "
        f"--jobs {args.jobs}, medians of {args.repeat} cold runs; {os.cpu_count()} cpus, "
        f"load average {os.getloadavg()[0]:.1f} at the end"
    )
    print(
        f"{'executor':>10} {'wall s':>7} {'cpu s':>7} {'floor s':>7} {'speedup':>8} "
        f"{'work speedup':>12}"
    )
    medians = {
        key: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
        for key, v in times.items()
    }
    threads_wall = medians[("threads", False)][0]
    threads_work = threads_wall - medians[("threads", True)][0]
    for executor in executors:
        wall, cpu = medians[(executor, False)]
        floor = medians[(executor, True)][0]
        work = wall - floor
        work_speedup = f"{threads_work / work:11.2f}x" if work > 0 else f"{'noise':>12}"
        print(
            f"{executor:>10} {wall:7.2f} {cpu:7.2f} {floor:7.2f} {threads_wall / wall:7.2f}x "
            f"{work_speedup}"
        )
    print(
        f"available: {args.jobs} processes burning the same {extracts} calls outside "
        f"runjournal: {statistics.median(available):.2f}x one process (median of "
        f"{args.repeat}, interleaved with the runs; the most any executor can reach now)"
    )
    per_task = overhead(args.jobs, args.calls, args.repeat)
    print(
        f"scheduling overhead, {args.calls} zero-work tasks, {args.jobs} workers, medians of "
        f"{args.repeat}: "
        + ", ".join(
            f"{name} {seconds * 1000:.2f} ms/task ({seconds * args.jobs * 1000:.2f} ms per "
            f"task per worker slot)"
            for name, seconds in per_task.items()
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
