"""The `openai` client's imports start as soon as a step is known to call an endpoint, on
a daemon thread, so they overlap planning instead of delaying the first request; a run
that only replays never imports it (docs/performance.md "Concurrency: `--jobs N`
against an LLM endpoint"). Each case runs in a fresh interpreter: the import is once
per process."""

from __future__ import annotations

import subprocess
import sys

CASE = """
import sys, threading
from runjournal.adapters.llm import runtime
from runjournal.adapters.llm.runtime import LLMServices
from runjournal.adapters.profiles import Profile
services = LLMServices(prefetch_client={prefetch})
profile = Profile(id="p", provider="openai", model="m", base_url="http://127.0.0.1:9/v1")
replay = {replay}
if replay:
    services.replay = object()
services.runtime_for(profile)
started = runtime._client_import_started.is_set()
if {needed}:  # a stage executes
    services.client_needed()
    started = runtime._client_import_started.is_set()
for t in threading.enumerate():
    if t.name == "runjournal-openai-import":
        t.join()
print("started" if started else "not started")
print("imported" if "openai" in sys.modules else "not imported")
"""


def _case(replay: bool, *, prefetch: bool = True, needed: bool = False) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", CASE.format(replay=replay, prefetch=prefetch, needed=needed)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_a_profile_that_calls_an_endpoint_starts_the_client_import() -> None:
    assert _case(replay=False) == ["started", "imported"]


def test_a_replayed_profile_never_imports_the_client() -> None:
    assert _case(replay=True) == ["not", "started", "not", "imported"]


def test_a_resume_starts_the_import_only_when_a_stage_executes() -> None:
    # `run --resume` builds its services with prefetch_client=False (issue 29)
    assert _case(replay=False, prefetch=False) == ["not", "started", "not", "imported"]
    assert _case(replay=False, prefetch=False, needed=True) == ["started", "imported"]
    assert _case(replay=True, prefetch=False, needed=True) == ["not", "started", "not", "imported"]
