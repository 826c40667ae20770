"""Many runs racing for the same stage leases (adapters/stage_leases.py; docs/operations.md
"Concurrent runs").

Worker processes, each with threads, each thread a run with its own `FileStageLeases`,
all started at once on one cache root. For every generation of a few keys a run does what
a lane does: look the "checkpoint" up, lease the stage, look again, execute it only when
it is still missing (an `O_EXCL` marker: a second execution is caught), write the
checkpoint atomically, release. With one run per process (the command line's case), every
stage is executed exactly once and no wait ends as a deadlock. With many runs per process
holding two leases at once in random order, nothing hangs and a stage is executed twice
only where a run went on without its lease after a refused cycle.

Size: RUNJOURNAL_STRESS_LEASE_PROCS, _THREADS, _ROUNDS, _KEYS (bounded; the default runs
in well under two minutes on an idle two-core machine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROCS = int(os.environ.get("RUNJOURNAL_STRESS_LEASE_PROCS", "4"))
THREADS = int(os.environ.get("RUNJOURNAL_STRESS_LEASE_THREADS", "6"))
ROUNDS = int(os.environ.get("RUNJOURNAL_STRESS_LEASE_ROUNDS", "25"))
KEYS = int(os.environ.get("RUNJOURNAL_STRESS_LEASE_KEYS", "3"))
TIMEOUT = 300

WORKER = r"""
import json, os, random, sys, threading, time
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.stage_leases import FileStageLeases
from runjournal.domain.leases import LeaseWaitOutcome
from support.leases import key

cache, proc, threads, rounds, keys, pairs = sys.argv[1], *map(int, sys.argv[2:7])
root = FsRoot.open(cache)
work = os.path.join(cache, "work")
totals = {"executed": 0, "reused": 0, "waited": 0, "deadlock": 0, "double": 0, "twins": 0}
errors = []
lock = threading.Lock()

def count(name, n=1):
    with lock:
        totals[name] += n

def present(g, n):
    return os.path.exists(os.path.join(work, f"ckpt-{g}-{n}"))

def execute(g, n):
    # A second execution is counted, and like the runner's it still calls the module and
    # writes the checkpoint: a run that holds the lease after it then finds the stage.
    try:
        fd = os.open(os.path.join(work, f"exec-{g}-{n}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        first = False
    else:
        os.close(fd)
        first = True
    time.sleep(random.random() / 500)  # the module call
    tmp = os.path.join(work, f".tmp-{proc}-{threading.get_ident()}-{g}-{n}")
    with open(tmp, "w") as fh:
        fh.write("x")
    os.replace(tmp, os.path.join(work, f"ckpt-{g}-{n}"))
    count("executed" if first else "double")

def run(t):
    rng = random.Random(proc * 1000 + t)
    leases = FileStageLeases(root, "ask", f"run-{proc}-{t}")
    try:
        for g in range(rounds):
            order = list(range(keys))
            rng.shuffle(order)
            groups = [order[i:i + 2] for i in range(0, keys, 2)] if pairs else [[n] for n in order]
            for group in groups:
                todo = [n for n in group if not present(g, n)]
                count("reused", len(group) - len(todo))
                held = []
                for n in todo:
                    lease, wait = leases.acquire(key(g * keys + n))
                    held.append(lease)
                    if wait is not None:
                        count("waited")
                        if wait.outcome is LeaseWaitOutcome.DEADLOCK:
                            count("deadlock")
                    bypassed = wait is not None and wait.outcome is LeaseWaitOutcome.DEADLOCK
                    if not bypassed and rng.random() < 0.2:  # a twin stage: shares the lease
                        twin, twin_wait = leases.acquire(key(g * keys + n))
                        assert twin_wait is None, twin_wait
                        count("twins")
                        held.append(twin)
                for n in todo:
                    if present(g, n):
                        count("reused")
                    else:
                        execute(g, n)
                for lease in held:
                    lease.release()
    except BaseException as exc:
        errors.append(repr(exc))
    finally:
        leases.close()

print("ready", flush=True)  # imported: the parent waits for every worker to say so
sys.stdin.readline()  # every worker starts at once
workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
for w in workers:
    w.start()
for w in workers:
    w.join()
print(json.dumps({**totals, "errors": errors}), flush=True)
"""


def _race(tmp_path: Path, procs: int, threads: int, *, pairs: bool) -> dict[str, int]:
    cache = tmp_path / "cache"
    (cache / "work").mkdir(parents=True)
    tests = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    argv = [str(threads), str(ROUNDS), str(KEYS), str(int(pairs))]
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(cache), str(p), *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for p in range(procs)
    ]
    try:
        for w in workers:  # on a loaded machine a worker still importing would miss the race
            assert w.stdout is not None
            assert w.stdout.readline() == "ready\n", w.stderr.read() if w.stderr else ""
        for w in workers:
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        results = []
        for w in workers:
            out, err = w.communicate(timeout=TIMEOUT)  # a deadlock would hang here
            assert w.returncode == 0, err
            results.append(json.loads(out))
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait(timeout=30)
    totals = {k: sum(r[k] for r in results) for k in results[0] if k != "errors"}
    assert [e for r in results for e in r["errors"]] == []
    stages = ROUNDS * KEYS
    executed = len(list((cache / "work").glob("exec-*")))
    assert executed == stages == totals["executed"]
    assert len(list((cache / "work").glob("ckpt-*"))) == stages
    assert totals["executed"] + totals["double"] + totals["reused"] == stages * procs * threads
    return totals


def test_one_run_per_process_executes_every_stage_once(tmp_path: Path) -> None:
    totals = _race(tmp_path, PROCS * 2, 1, pairs=False)
    assert totals["double"] == 0 and totals["deadlock"] == 0
    assert totals["waited"] > 0  # the runs did race for the leases


def test_many_runs_per_process_holding_pairs_never_hang(tmp_path: Path) -> None:
    totals = _race(tmp_path, PROCS, THREADS, pairs=True)
    # a stage runs twice only where a run went on without its lease (a refused cycle): each
    # such run and the lease's holder, once
    assert totals["double"] <= totals["deadlock"]
    assert totals["waited"] > 0 and totals["twins"] > 0


@pytest.fixture(autouse=True)
def _bounded() -> None:
    assert PROCS * THREADS * ROUNDS * KEYS <= 200_000, "keep the stress tier bounded"
