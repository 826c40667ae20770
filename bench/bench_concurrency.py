"""Throughput of `--jobs N` against an LLM endpoint with a fixed latency.

Starts the loopback fake OpenAI-compatible server (tests/support/fake_openai.py) with
LATENCY seconds per answer, builds DOCS documents of CHUNKS one-paragraph chunks each
(one `llm.json` call per chunk), and for each N in JOBS times REPEAT cold runs (fresh
cache root, so every chunk is a request). The floor of each N is the same cold run
against a second fake server that answers at once (start-up, the client, HTTP, decisions,
checkpoints, journal: everything but the latency), measured in the same run.

    python bench/bench_concurrency.py [--docs 16] [--chunks 4] [--latency 0.1]
                                      [--jobs 1 8 32] [--repeat 3]

Reported per N (medians of REPEAT): wall, cpu (user + system of the run process) and the
floor; ideal = ceil(calls / N) * LATENCY, the time N perfectly overlapped calls wait.
"of ideal" is the run's throughput over the ideal one, (floor + ideal) / wall: 100% when
the latency overlaps perfectly and nothing else grows. "wait" is the latency part alone,
ideal / (wall - floor): noisier, a difference of two timings.
Targets: >= 90% of ideal at N = 8, >= 75% at N = 32.

    python bench/bench_concurrency.py --rate-limited 0.035 [--docs 600 --chunks 4 --jobs 32]

With `--rate-limited F`, a fraction F of the chunks (chosen with a fixed seed) is
answered `429 Retry-After: 1` once, then served; each N runs REPEAT times against that
corpus and REPEAT times against the same corpus without the faults (the server's fault
counts reset before every run), and prints both walls (medians) and their ratio: what the
429s cost. Target (issue 26): ratio <= 1.3 at 2,400 chunks and N = 32 with F = 0.035.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FAKE = REPO / "tests" / "support" / "fake_openai.py"
SCRIPT = Path(sys.executable).parent / "runjournal"
KEY_VAR = "RJ_BENCH_KEY"

PIPELINE = """name = "concurrency"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 60
[[steps]]
id = "ask"
module = "llm.json"
params = { prompt = "{text}", temperature = 0, seed = 7, max_tokens = 20 }
"""
PROFILE = """[profiles.fake]
provider = "openai"
model = "fake-model"
base_url = "{url}"
api_key_env = "RJ_BENCH_KEY"
read_timeout = 30
max_retries = {retries}
"""


def start_fake(latency: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(FAKE), "--port", "0", "--latency", str(latency)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    if selector.select(timeout=20):
        line = proc.stdout.readline()
        if line.startswith("listening "):
            return proc, line.split()[1]
    proc.send_signal(signal.SIGTERM)
    raise SystemExit("the fake server did not start")


def make_corpus(
    root: Path,
    docs: int,
    chunks: int,
    url: str,
    instant_url: str,
    limited: frozenset[int] = frozenset(),
) -> None:
    """DOCS documents of CHUNKS paragraphs; the paragraphs numbered in `limited` get a 429."""
    (root / "docs").mkdir(parents=True)
    for d in range(docs):
        paras = [f"Document {d} paragraph {c} about topic {d * chunks + c}." for c in range(chunks)]
        paras = [
            f"FAULTS: 429@1\n{p}" if d * chunks + c in limited else p for c, p in enumerate(paras)
        ]
        (root / "docs" / f"d{d:03d}.md").write_text("\n\n".join(paras) + "\n")
    retries = "2" if limited else "0"
    (root / "pipeline.toml").write_text(PIPELINE)
    profile = PROFILE.replace("{retries}", retries)
    (root / "profiles.toml").write_text(profile.replace("{url}", url))
    (root / "instant.toml").write_text(profile.replace("{url}", instant_url))


def reset(url: str) -> None:
    """Forget the fake server's fault counts (and its request log) before a run."""
    request = urllib.request.Request(
        url.removesuffix("/v1") + "/_control/reset", method="POST", data=b""
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def rate_limited(args: argparse.Namespace, url: str, tmp: Path) -> None:
    """Walls with a fraction of 429s against the same corpus without them (medians)."""
    calls = args.docs * args.chunks
    count = round(args.rate_limited * calls)
    limited = frozenset(random.Random(7).sample(range(calls), count))
    clean, faulty = tmp / "clean", tmp / "faulty"
    make_corpus(clean, args.docs, args.chunks, url, url)
    make_corpus(faulty, args.docs, args.chunks, url, url, limited)
    print(
        f"{calls} calls ({args.docs} documents x {args.chunks} chunks), {count} answered "
        f"429 Retry-After: 1 once ({args.rate_limited:.1%}), latency "
        f"{args.latency * 1000:.0f} ms, medians of {args.repeat} cold runs; "
        f"{os.cpu_count()} cpus"
    )
    print(f"{'jobs':>5} {'clean s':>8} {'429s s':>7} {'ratio':>6} {'attempts':>9}")
    for jobs in args.jobs:
        walls: dict[str, list[float]] = {"clean": [], "faulty": []}
        attempts = 0
        for i in range(args.repeat):
            for name, root in (("clean", clean), ("faulty", faulty)):
                reset(url)
                cache = tmp / f"cache-{jobs}-{i}-{name}"
                wall, _, doc = run(root, cache, "--jobs", str(jobs))
                spent = doc["llm"]["spent"]
                expected = calls + (count if name == "faulty" else 0)
                if spent["calls"] != calls or spent["attempts"] != expected:
                    raise SystemExit(
                        f"{name}: expected {calls} calls, {expected} attempts: {spent}"
                    )
                walls[name].append(wall)
                attempts = spent["attempts"]
                shutil.rmtree(cache, ignore_errors=True)
                shutil.rmtree(root / "out", ignore_errors=True)
        base, hit = (statistics.median(walls[k]) for k in ("clean", "faulty"))
        print(f"{jobs:>5} {base:>8.2f} {hit:>7.2f} {hit / base:>6.2f} {attempts:>9}")


def run(
    root: Path, cache: Path, *extra: str, profiles: str = "profiles.toml"
) -> tuple[float, float, dict]:
    """One `run`: wall seconds, cpu seconds of the child, its `--json` document."""
    argv = [str(SCRIPT), "run", str(root / "pipeline.toml"), "--json", "--no-progress"]
    argv += ["--profile", "fake", "--profiles-file", str(root / profiles)]
    argv += ["--output-root", str(root / "out"), "--cache-root", str(cache), *extra]
    env = {**os.environ, KEY_VAR: "sk-" + "bench-" + "x" * 24}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(proc.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=16)
    parser.add_argument("--chunks", type=int, default=4, help="chunks per document")
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per answer")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--rate-limited",
        type=float,
        default=0.0,
        metavar="F",
        help="answer a fraction F of the chunks 429 Retry-After: 1 once; compare walls",
    )
    args = parser.parse_args()
    if not 0 <= args.rate_limited < 1:
        parser.error("--rate-limited must be a fraction from 0 to below 1")
    calls = args.docs * args.chunks
    server, url = start_fake(args.latency)
    instant, instant_url = start_fake(0.0)
    tmp = Path(tempfile.mkdtemp(prefix="rj-bench-concurrency-"))
    try:
        if args.rate_limited:
            rate_limited(args, url, tmp)
            return 0
        make_corpus(tmp, args.docs, args.chunks, url, instant_url)
        print(
            f"{calls} calls ({args.docs} documents x {args.chunks} chunks), "
            f"latency {args.latency * 1000:.0f} ms, medians of {args.repeat} cold runs; "
            f"{os.cpu_count()} cpus"
        )
        print(
            f"{'jobs':>5} {'wall s':>7} {'cpu s':>6} {'floor s':>7} {'ideal s':>7} "
            f"{'calls/s':>7} {'of ideal':>8} {'wait':>6}"
        )
        for jobs in args.jobs:
            row: dict[str, list[float]] = {"wall": [], "cpu": [], "floor": []}
            for i in range(args.repeat):
                for name, profiles in (("wall", "profiles.toml"), ("floor", "instant.toml")):
                    cache = tmp / f"cache-{jobs}-{i}-{name}"
                    wall, cpu, doc = run(tmp, cache, "--jobs", str(jobs), profiles=profiles)
                    spent = doc["llm"]["spent"]
                    if spent["calls"] != calls or spent["attempts"] != calls:
                        raise SystemExit(f"expected {calls} calls, no retry: {spent}")
                    row[name].append(wall)
                    if name == "wall":
                        row["cpu"].append(cpu)
                    shutil.rmtree(cache, ignore_errors=True)
            wall, cpu, floor = (statistics.median(row[k]) for k in ("wall", "cpu", "floor"))
            # the same run against an endpoint that answers at once: what is not latency
            ideal = math.ceil(calls / jobs) * args.latency
            busy = wall - floor
            wait = f"{ideal / busy:>6.0%}" if busy > 0 else f"{'noise':>6}"
            print(
                f"{jobs:>5} {wall:>7.2f} {cpu:>6.2f} {floor:>7.2f} {ideal:>7.2f} "
                f"{calls / wall:>7.1f} {(floor + ideal) / wall:>8.0%} {wait}"
            )
    finally:
        for proc in (server, instant):
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
