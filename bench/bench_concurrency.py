"""Throughput and coordinator cost of `--jobs N` against an LLM endpoint with a fixed latency.

Starts the loopback fake OpenAI-compatible server (tests/support/fake_openai.py) with
LATENCY seconds per answer, and a second one answering at once; builds DOCS documents of
CHUNKS one-paragraph chunks each (one `llm.json` call per chunk) and, for each N in
JOBS, times REPEAT cold runs (fresh cache root, so every chunk is a request) against
each server, and REPEAT cold runs of a one-document, one-chunk pipeline against the
instant server (start-up and fixed costs: the "start-up" row).

    python bench/bench_concurrency.py [--docs 250] [--chunks 4] [--latency 0.2]
                                      [--jobs 64] [--repeat 5]

Children run with bytecode caching on, whatever PYTHONDONTWRITEBYTECODE says here, and
each with its own fresh cache and output roots, all removed only at the end: on ext4,
files deleted in the last 30 s make every new inode slower to allocate (the kernel's
`recently_deleted` scan), so deleting each run's thousands of files before the next
made the later runs' system time grow (cpu per call 2.1 ms in one measurement, 4.6 ms
in the next).
Printed per N, every figure a median of REPEAT runs measured here (cpu = user + system
of the run process, from `getrusage` of the children; the load average is read before
and after):
  wall, and wall / ideal, ideal = calls x LATENCY / N (N calls always in flight, no
  start-up, no cost per call);
  cpu per call = (cpu of the run - cpu of the start-up run) / (calls - 1): what the
  coordinator spends per call (client, limiter, call log, journal, checkpoints), at
  LATENCY and against the instant server; "all" is the run's whole cpu / calls.
Targets (issue 26): at 1,000 calls, 200 ms, N = 64: wall <= 1.5x ideal and cpu per call
<= 1.5 ms (at LATENCY).

Then the first request: a cold run of FIRST documents (`--first 500`, 8 chunks each,
`--jobs` the first N) is started against the latency server, whose request count the
bench polls every 5 ms; the time from starting the process to the first request it
receives is printed (median of REPEAT), and the run is interrupted (SIGINT) once it
arrived. Target (issue 26): within 1 s for 500 documents.

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
# Children run with bytecode caching on (an installed package's normal state), whatever
# PYTHONDONTWRITEBYTECODE says here: compiling every module would be most of start-up.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

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


def start_fake(latency: float, *, log: bool = True) -> tuple[subprocess.Popen[str], str]:
    """The fake server in a process of its own; `log=False`: it keeps no request log."""
    proc = subprocess.Popen(
        [sys.executable, str(FAKE), "--port", "0", "--latency", str(latency)]
        + ([] if log else ["--no-log"]),
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
        base, hit = (statistics.median(walls[k]) for k in ("clean", "faulty"))
        print(f"{jobs:>5} {base:>8.2f} {hit:>7.2f} {hit / base:>6.2f} {attempts:>9}")


def run(
    root: Path, cache: Path, *extra: str, profiles: str = "profiles.toml"
) -> tuple[float, float, dict]:
    """One `run`: wall seconds, cpu seconds of the child, its `--json` document."""
    argv = [str(SCRIPT), "run", str(root / "pipeline.toml"), "--json", "--no-progress"]
    argv += ["--profile", "fake", "--profiles-file", str(root / profiles)]
    argv += ["--output-root", f"{cache}-out", "--cache-root", str(cache), *extra]
    env = {**ENV, KEY_VAR: "sk-" + "bench-" + "x" * 24}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(proc.stdout)


def first_request(args: argparse.Namespace, url: str, tmp: Path) -> None:
    """Seconds from starting a cold run of --first documents to its first request."""
    root = tmp / "first"
    make_corpus(root, args.first, 8, url, url)
    argv = [str(SCRIPT), "run", str(root / "pipeline.toml"), "--json", "--no-progress"]
    argv += ["--profile", "fake", "--profiles-file", str(root / "profiles.toml")]
    argv += ["--jobs", str(args.jobs[0])]
    usage = url.removesuffix("/v1") + "/_control/usage"
    env = {**ENV, KEY_VAR: "sk-" + "bench-" + "x" * 24}
    times = []
    for i in range(args.repeat):
        reset(url)
        start = time.monotonic()
        proc = subprocess.Popen(
            [
                *argv,
                "--cache-root",
                str(tmp / f"cache-first-{i}"),
                "--output-root",
                str(tmp / f"out-first-{i}"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        try:
            while True:
                with urllib.request.urlopen(usage, timeout=10) as response:
                    if json.loads(response.read()).get("requests", 0) > 0:
                        times.append(time.monotonic() - start)
                        break
                if proc.poll() is not None:
                    raise SystemExit(f"the run ended ({proc.returncode}) before any request")
                time.sleep(0.005)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
    print(
        f"first request of a cold run of {args.first} documents x 8 chunks, --jobs "
        f"{args.jobs[0]}: {statistics.median(times):.2f} s after start (median of "
        f"{args.repeat}; target <= 1 s)"
    )


FLOOR = """
import importlib, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
import openai
url, calls, jobs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
httpx = importlib.import_module(openai.DefaultHttpxClient.__mro__[1].__module__.partition(".")[0])
first = openai.OpenAI(api_key="sk-floor", base_url=url, max_retries=0)
tls = first._client._transport._pool._ssl_context
local = threading.local()
def client():  # one per thread, as the transport builds them (adapters/llm/transport.py)
    if not hasattr(local, "client"):
        local.client = openai.OpenAI(api_key="sk-floor", base_url=url, max_retries=0,
                                     http_client=openai.DefaultHttpxClient(verify=tls))
    return local.client
names = [*first.default_headers, "X-Stainless-Retry-Count", "X-Stainless-Read-Timeout"]
headers = {n: openai.Omit() for n in names if n.lower().startswith("x-stainless-")}
headers["X-Stainless-Raw-Response"] = "stream"
template = openai._models.FinalRequestOptions.construct(  # built once, copied per request
    method="post", url=str(first.base_url).rstrip("/") + "/chat/completions", headers=headers)
body = {"model": "fake-model", "temperature": 0, "seed": 7, "max_tokens": 20}
def one(i):
    request = {**body, "messages": [{"role": "user", "content": f"Document {i} paragraph."}]}
    response = client().request(httpx.Response, template.model_copy(update={"json_data": request}))
    try:
        response.read()
    finally:
        response.close()
with ThreadPoolExecutor(jobs) as pool:
    list(pool.map(one, range(jobs * 2)))
    start = time.process_time()
    list(pool.map(one, range(calls)))
    print(time.process_time() - start)
"""


def client_floor(url: str, calls: int, jobs: int) -> float:
    """Cpu ms per call of the official `openai` client alone, sending the runtime's request
    form (the client's `request` with options built once, the full URL, raw streamed
    response, a client per thread, no telemetry headers) from `jobs` threads to the
    instant server:
    the part of the coordinator's cost that no change of ours can remove."""
    proc = subprocess.run(
        [sys.executable, "-c", FLOOR, url, str(calls), str(jobs)],
        capture_output=True,
        text=True,
        env=ENV,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"client floor failed: {proc.stderr.strip()[-300:]}")
    return float(proc.stdout.split()[-1]) / calls * 1000


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=250)
    parser.add_argument("--chunks", type=int, default=4, help="chunks per document")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per answer")
    parser.add_argument("--jobs", type=int, nargs="+", default=[64])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--first", type=int, default=500, help="documents of the first-request run (0: skip)"
    )
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
    if calls < 2:
        parser.error("--docs x --chunks must be at least 2 calls")
    server, url = start_fake(args.latency)
    instant, instant_url = start_fake(0.0)
    tmp = Path(tempfile.mkdtemp(prefix="rj-bench-concurrency-"))
    try:
        if args.rate_limited:
            rate_limited(args, url, tmp)
            return 0
        make_corpus(tmp / "corpus", args.docs, args.chunks, url, instant_url)
        make_corpus(tmp / "one", 1, 1, instant_url, instant_url)
        print(
            f"{calls} calls ({args.docs} documents x {args.chunks} chunks), latency "
            f"{args.latency * 1000:.0f} ms, medians of {args.repeat} cold runs; "
            f"{os.cpu_count()} cpus, load {load()} before"
        )
        starts = [run(tmp / "one", tmp / f"cache-one-{i}")[1] for i in range(args.repeat)]
        start_cpu = statistics.median(starts)
        print(f"start-up (1 call, instant server): cpu {start_cpu:.2f} s")
        print(
            f"{'jobs':>5} {'wall s':>7} {'ideal s':>7} {'wall/ideal':>10} {'cpu s':>6} "
            f"{'cpu/call ms':>11} {'all ms':>6} {'instant wall s':>14} {'cpu s':>6} "
            f"{'cpu/call ms':>11}"
        )
        floors: list[tuple[int, float]] = []
        for jobs in args.jobs:
            row: dict[str, list[float]] = {k: [] for k in ("wall", "cpu", "iwall", "icpu")}
            for i in range(args.repeat):
                for name, profiles in (("", "profiles.toml"), ("i", "instant.toml")):
                    cache = tmp / f"cache-{jobs}-{i}-{name}"
                    wall, cpu, doc = run(
                        tmp / "corpus", cache, "--jobs", str(jobs), profiles=profiles
                    )
                    spent = doc["llm"]["spent"]
                    if spent["calls"] != calls or spent["attempts"] != calls:
                        raise SystemExit(f"expected {calls} calls, no retry: {spent}")
                    row[name + "wall"].append(wall)
                    row[name + "cpu"].append(cpu)
            wall, cpu, iwall, icpu = (statistics.median(row[k]) for k in row)
            ideal = calls * args.latency / jobs
            per, iper = ((c - start_cpu) / (calls - 1) * 1000 for c in (cpu, icpu))
            print(
                f"{jobs:>5} {wall:>7.2f} {ideal:>7.2f} {wall / ideal:>9.2f}x {cpu:>6.2f} "
                f"{per:>11.2f} {cpu / calls * 1000:>6.2f} {iwall:>14.2f} {icpu:>6.2f} "
                f"{iper:>11.2f}"
            )
            floors.append((jobs, iper))
        for jobs, iper in floors:
            floor = statistics.median(
                client_floor(instant_url, calls, jobs) for _ in range(args.repeat)
            )
            print(
                f"official client alone, {calls} calls from {jobs} threads to the instant "
                f"server: cpu/call {floor:.2f} ms (median of {args.repeat}); the run's "
                f"{iper:.2f} ms is {iper / floor:.1f}x that, {iper - floor:.2f} ms of it ours"
            )
        if args.first:
            first_request(args, url, tmp)
        print(
            f"load {load()} after; targets at 1,000 calls, 200 ms, 64 jobs: wall/ideal "
            "<= 1.5x, cpu/call <= 1.5 ms"
        )
    finally:
        for proc in (server, instant):
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
