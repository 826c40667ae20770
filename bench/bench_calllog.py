"""What the LLM call log adds to one call: CPU and wall per request, with and without it.

Runs CALLS intent + outcome pairs (`WriteAhead.begin` / `end`, a reply stored) from
THREADS threads against a temporary cache root, and the same with the call log off
(`WriteAhead(None, None)`: only the in-flight count). Reports per call: CPU (process
user + system over CALLS), wall per call seen by one thread, and how many `fsync`s the
group commit needed (docs/operations.md "LLM call log").

    python bench/bench_calllog.py [--calls 4000] [--threads 1 16 64]
    python bench/bench_calllog.py --url http://127.0.0.1:PORT/v1 [--calls 1000]

With `--url` (a running tests/support/fake_openai.py, `--latency 0`), whole metered calls
through `LLMServices` instead: the client, the limiter and the call log together, with
the log on and off, so the difference is what the log adds to a real call.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

from runjournal.adapters.llm.calllog import WriteAhead
from runjournal.adapters.llm.cassette import Reply
from runjournal.domain.decisions import Stage
from runjournal.domain.llm import AttemptStatus, CallScope, LLMAttempt

SCOPE = CallScope("ask", "docs/a.md", Stage.EXTRACT, "c" * 64, identity="i" * 64)
REPLY = Reply(content='{"topic": "apples and apricots"}', prompt_tokens=40, completion_tokens=9)


def _run(wal: WriteAhead, calls: int, threads: int) -> tuple[float, float]:
    per = calls // threads

    def work(t: int) -> None:
        for i in range(per):
            key = f"{t:08x}{i:056x}"
            seq = wal.begin(
                SCOPE,
                call=i + 1,
                attempt=1,
                profile_id="fake",
                provider="openai",
                model="fake-model",
                request_sha256="r" * 64,
                endpoint="http://127.0.0.1:8080/v1",
                key=key,
                prompt_tokens=40,
                max_tokens=256,
                bound_cost=0.0003,
            )
            attempt = LLMAttempt(
                call=i + 1,
                attempt=1,
                profile_id="fake",
                provider="openai",
                model="fake-model",
                status=AttemptStatus.OK,
                http_status=200,
                prompt_tokens=40,
                completion_tokens=9,
                request_sha256="r" * 64,
                reply_sha256="s" * 64,
            )
            wal.end(seq, attempt, REPLY, key)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    cpu, wall = time.process_time(), time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.process_time() - cpu, time.perf_counter() - wall


def _calls(url: str, calls: int, threads: int, cache: str | None) -> float:
    """CPU seconds of `calls` metered calls from `threads` threads (the log on or off)."""
    from runjournal.adapters.llm.client_options import parse_client_options
    from runjournal.adapters.llm.runtime import LLMServices
    from runjournal.adapters.profiles import Profile

    profile = Profile(
        id="fake",
        provider="openai",
        model="fake-model",
        base_url=url,
        api_key_env="RJ_BENCH_KEY",
        params={"temperature": 0, "max_tokens": 40},
        client=parse_client_options({"max_retries": 0}),
    )
    services = LLMServices(
        environ={"RJ_BENCH_KEY": "sk-bench"}, wal=WriteAhead(cache, "bench" if cache else None)
    )
    runtime = services.runtime_for(profile)
    runtime.for_call(SCOPE).complete("warm up")  # the client's import and connection
    per = calls // threads

    def work(t: int) -> None:
        for i in range(per):
            runtime.for_call(SCOPE).complete(f"question {t} {i} about apples")

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    cpu = time.process_time()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    used = time.process_time() - cpu
    services.close()
    services.wal.close(settled=True)
    return used


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--url", default=None)
    args = parser.parse_args()
    if args.url:
        print("threads  log  cpu/call ms (whole metered call)")
        for threads in args.threads:
            calls = args.calls - args.calls % threads
            for on in (False, True, False, True):
                with tempfile.TemporaryDirectory() as tmp:
                    cpu = _calls(args.url, calls, threads, tmp if on else None)
                print(f"{threads:7}  {'on ' if on else 'off'}  {cpu / calls * 1000:11.3f}")
        return
    print("threads  log  cpu/call ms  wall/call/thread ms  fsyncs")
    for threads in args.threads:
        calls = args.calls - args.calls % threads
        for on in (False, True):
            with tempfile.TemporaryDirectory() as tmp:
                wal = WriteAhead(tmp, "bench") if on else WriteAhead(None, None)
                cpu, wall = _run(wal, calls, threads)
                syncs = wal.log.syncs if wal.log is not None else 0
                wal.close(settled=True)
                print(
                    f"{threads:7}  {'on ' if on else 'off'}  {cpu / calls * 1000:11.3f}  "
                    f"{wall / (calls / threads) * 1000:19.3f}  {syncs:6}"
                )
    print(f"(file system of {tempfile.gettempdir()}; cpus {os.cpu_count()})")


if __name__ == "__main__":
    main()
