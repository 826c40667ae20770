"""The LLM call log: group-committed intents, write-ahead replies, in-doubt attempts.

docs/operations.md "LLM call log". The runtime parts run against the fake server (a
subprocess on loopback), counting the requests it really received.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.llm.budget import Budget
from runjournal.adapters.llm.calllog import (
    REPLY_BATCH,
    CallsStopped,
    Intent,
    Outcome,
    ReplyStore,
    WriteAhead,
    log_path,
    pending_attempts,
    read_log,
    restore_replies,
)
from runjournal.adapters.llm.cassette import Reply
from runjournal.adapters.llm.client_options import parse_client_options
from runjournal.adapters.llm.runtime import LLMServices
from runjournal.adapters.packed_store import PackedStore
from runjournal.adapters.profiles import Profile
from runjournal.domain.decisions import Stage
from runjournal.domain.llm import AttemptStatus, CallScope
from support.llm_servers import ServerProcess, start_fake

KEY_ENV = "RJ_FAKE_KEY"
KEY = "sk-" + "test-" + "W3" * 20
FRESH = CallScope("ask", "docs/a.md", Stage.EXTRACT, "c" * 64, identity="i" * 64)
RESUMED = msgspec.structs.replace(FRESH, reuse=True)


@pytest.fixture(scope="module")
def fake() -> Iterator[ServerProcess]:
    with start_fake(api_key_env=KEY_ENV, env={KEY_ENV: KEY}) as server:
        yield server


def profile(url: str) -> Profile:
    return Profile(
        id="fake",
        provider="openai",
        model="fake-model",
        base_url=url,
        api_key_env=KEY_ENV,
        params={"temperature": 0, "max_tokens": 50},
        client=parse_client_options(
            {"max_retries": 0, "prices": {"input_per_million": 2.0, "output_per_million": 4.0}}
        ),
    )


def services(cache: Path, run_id: str, **kw: Any) -> LLMServices:
    return LLMServices(environ={KEY_ENV: KEY}, wal=WriteAhead(str(cache), run_id), **kw)


def _intent(seq: int, **kw: Any) -> Intent:
    fields: dict[str, Any] = {
        "seq": seq,
        "step": "s",
        "lane": "l",
        "stage": Stage.EXTRACT,
        "chunk": "c",
        "call": seq,
        "attempt": 1,
        "profile_id": "p",
        "provider": "openai",
        "model": "m",
        "endpoint": "http://127.0.0.1:1/v1",
        "request_sha256": "r" * 64,
        "key": f"{seq:064x}",
        "prompt_tokens": 10,
        "max_tokens": 50,
        "bound_cost": 0.5,
        "time": 0.0,
    }
    return Intent(**{**fields, **kw})


class TestLog:
    def test_concurrent_intents_share_syncs_and_all_are_durable(self, tmp_path: Path) -> None:
        wal = WriteAhead(str(tmp_path), "run1")
        barrier = threading.Barrier(16)

        def one(i: int) -> None:
            barrier.wait()
            for _ in range(20):
                wal.begin(FRESH, **_fields(i))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert wal.log is not None
        lines = list(read_log(wal.log.path))
        assert len(lines) == 320 and {x.seq for x in lines} == set(range(1, 321))
        assert wal.log.syncs < 320  # group commit: calls in flight share an fsync

    def test_intents_in_flight_share_one_write_and_a_failed_write_fails_its_batch(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The intents queued while a sync runs go to the file in one `write` with the next
        (docs/operations.md "LLM call log"); when that write fails, every intent it carried
        raises (none is sent as if durable) and the log goes on for later intents."""
        from runjournal.adapters.llm import calllog

        wal = WriteAhead(str(tmp_path), "run1")
        assert wal.log is not None
        writes: list[int] = []
        fail = threading.Event()
        syncing = threading.Event()
        release = threading.Event()
        real_write, real_fsync = os.write, os.fsync

        def write(fd: int, data: Any) -> int:
            if fd == wal.log._fd:  # type: ignore[union-attr]
                writes.append(bytes(data).count(b"\n"))
                if fail.is_set():
                    raise OSError(28, "No space left on device")
            return real_write(fd, data)

        def fsync(fd: int) -> None:
            syncing.set()
            release.wait(10)
            real_fsync(fd)

        monkeypatch.setattr(calllog.os, "write", write)
        monkeypatch.setattr(calllog.os, "fsync", fsync)
        errors: list[BaseException] = []

        def one(i: int) -> None:
            try:
                wal.begin(FRESH, **_fields(i))
            except OSError as exc:
                errors.append(exc)

        first = threading.Thread(target=one, args=(0,))
        first.start()
        assert syncing.wait(10)  # the first intent's sync holds the others back
        rest = [threading.Thread(target=one, args=(i,)) for i in range(1, 9)]
        for t in rest:
            t.start()
        while len(wal.log._queue) < 8:  # all eight queued behind it
            threading.Event().wait(0.01)
        fail.set()
        release.set()
        for t in [first, *rest]:
            t.join(10)
        assert writes == [1, 8]  # the eight intents in one write
        assert len(errors) == 8 and all(e.errno == 28 for e in errors)  # type: ignore[attr-defined]
        fail.clear()
        wal.begin(FRESH, **_fields(9))  # later intents are logged as before
        assert [x.seq for x in read_log(wal.log.path)] == [1, 10]

    def test_a_sync_wakes_its_own_batch_and_one_caller_of_the_next(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Twenty intents queued behind a running sync: each caller waits once (one of
        them is woken to sync the twenty, the others when that sync is done), where a
        wake-up of every caller at each sync made them wait 39 times (docs/performance.md
        "Wake-ups per call"). Counted, not timed."""
        from runjournal.adapters.llm import calllog
        from support.counted_waits import count_condition_waits

        waits = count_condition_waits(monkeypatch, calllog)
        wal = WriteAhead(str(tmp_path), "run1")
        assert wal.log is not None
        syncing, release = threading.Event(), threading.Event()
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            syncing.set()
            release.wait(10)
            real_fsync(fd)

        monkeypatch.setattr(calllog.os, "fsync", fsync)
        first = threading.Thread(target=wal.begin, args=(FRESH,), kwargs=_fields(0))
        first.start()
        assert syncing.wait(10)  # the first intent's sync holds the others back
        rest = [
            threading.Thread(target=wal.begin, args=(FRESH,), kwargs=_fields(i))
            for i in range(1, 21)
        ]
        for t in rest:
            t.start()
        while len(wal.log._queue) < 20:  # all twenty queued behind it
            threading.Event().wait(0.01)
        release.set()
        for t in [first, *rest]:
            t.join(10)
        assert wal.log.syncs == 2
        assert len(waits) == 20
        assert sorted(x.seq for x in read_log(wal.log.path)) == list(range(1, 22))

    def test_a_torn_last_line_is_skipped(self, tmp_path: Path) -> None:
        path = tmp_path / "run.log"
        whole = msgspec.json.encode(_intent(1)) + b"\n"
        path.write_bytes(whole + whole[: len(whole) // 2])
        assert [x.seq for x in read_log(str(path))] == [1]

    def test_pending_attempts_in_doubt_ok_and_already_journaled(self) -> None:
        lines = [
            _intent(1),
            _intent(2),
            _intent(3),
            Outcome(seq=2, status=AttemptStatus.OK, prompt_tokens=7, completion_tokens=3, cost=0.1),
        ]
        journaled = {("s", "l", "extract", "c", 3, 1)}
        pending = pending_attempts(lines, journaled)
        assert [p.attempt.call for p in pending] == [1, 2]
        doubt, ok = pending[0].attempt, pending[1].attempt
        assert doubt.status is AttemptStatus.IN_DOUBT
        assert (doubt.prompt_tokens, doubt.completion_tokens, doubt.cost) == (10, 50, 0.5)
        assert ok.status is AttemptStatus.OK and ok.prompt_tokens == 7 and ok.cost == 0.1

    def test_replies_in_the_log_go_back_to_a_store_that_lost_them(self, tmp_path: Path) -> None:
        store = ReplyStore(str(tmp_path / "replies"))
        lines = [_intent(1), Outcome(seq=1, status=AttemptStatus.OK, content="hi")]
        assert restore_replies(lines, store) == 1
        assert store.get(_intent(1).key) == Reply(content="hi")
        assert restore_replies(lines, store) == 0

    def test_replies_are_packed_and_old_reply_files_still_read(self, tmp_path: Path) -> None:
        """With the cache root's packed store a reply is an entry, not a file
        (docs/internals.md "Packed store"); a reply file of an older run is still found."""
        old = ReplyStore(str(tmp_path / "llm" / "replies"))
        old.put("ab" + "0" * 62, Reply(content="from a file"))
        with FsRoot.open(tmp_path) as root:
            packed = PackedStore(root)
            store = ReplyStore(str(tmp_path / "llm" / "replies"), packed)
            store.put("cd" + "1" * 62, Reply(content="packed"))
            assert store.get("cd" + "1" * 62) == Reply(content="packed")
            assert store.get("ab" + "0" * 62) == Reply(content="from a file")
            assert not (tmp_path / "llm" / "replies" / "cd").exists()
            # held until a batch is full or the run's end flushes it, read from the store
            assert packed.names("llm/replies/") == []
            store.flush()
            assert packed.names("llm/replies/") == [f"llm/replies/cd/cd{'1' * 62}.json"]
            assert store.get("cd" + "1" * 62) == Reply(content="packed")
            store.forget("cd" + "1" * 62)
            store.forget("ab" + "0" * 62)
            assert store.get("cd" + "1" * 62) is None and store.get("ab" + "0" * 62) is None
            packed.close()

    def test_replies_are_put_in_batches_and_all_by_the_runs_end(self, tmp_path: Path) -> None:
        """Replies go to the packed store REPLY_BATCH at a time (one index transaction
        each), are read from the store meanwhile, and the rest are put before the run
        journals what it lacks (`pending`, ahead of its last group sync)."""
        with FsRoot.open(tmp_path) as root:
            packed = PackedStore(root)
            wal = WriteAhead(str(tmp_path), "run1", packed)
            assert wal.replies is not None
            keys = [f"{i:02x}" + "e" * 62 for i in range(REPLY_BATCH + 5)]
            for i, key in enumerate(keys[:-1]):
                wal.replies.put(key, Reply(content=f"r{i}"))
            assert len(packed.names("llm/replies/")) == REPLY_BATCH
            wal.replies.put(keys[-1], Reply(content="last"))
            assert wal.lookup(RESUMED, keys[-1]) == Reply(content="last")  # held, read
            wal.invalid(keys[-2])  # a held reply that did not validate is never put
            assert wal.pending(set()) == []
            names = packed.names("llm/replies/")
            assert len(names) == len(keys) - 1 and not any(keys[-2] in n for n in names)
            wal.close(settled=True)
            packed.close()
        with FsRoot.open(tmp_path) as root:
            packed = PackedStore(root)
            again = ReplyStore(str(tmp_path / "llm" / "replies"), packed)
            assert again.get(keys[0]) == Reply(content="r0")
            assert again.get(keys[-1]) == Reply(content="last")
            packed.close()

    def test_restored_replies_are_put_before_recover_returns(self, tmp_path: Path) -> None:
        """`recover` puts a killed run's replies back through a batching store: they are
        in the packed store when `restore_replies` returns (a resume reuses them)."""
        lines = [_intent(1), Outcome(seq=1, status=AttemptStatus.OK, content="kept")]
        with FsRoot.open(tmp_path) as root:
            packed = PackedStore(root)
            store = ReplyStore(str(tmp_path / "llm" / "replies"), packed)
            assert restore_replies(lines, store) == 1
            packed.close()
        with FsRoot.open(tmp_path) as root:
            packed = PackedStore(root)
            again = ReplyStore(str(tmp_path / "llm" / "replies"), packed)
            assert again.get(_intent(1).key) == Reply(content="kept")
            packed.close()

    def test_no_request_starts_once_the_run_stops(self, tmp_path: Path) -> None:
        wal = WriteAhead(str(tmp_path), "run1")
        wal.refuse_new()
        with pytest.raises(CallsStopped):
            wal.begin(FRESH, **_fields(1))
        assert not os.path.exists(log_path(str(tmp_path), "run1"))  # nothing was sent


def _fields(i: int) -> dict[str, Any]:
    return {
        "call": i,
        "attempt": 1,
        "profile_id": "p",
        "provider": "openai",
        "model": "m",
        "request_sha256": "r" * 64,
        "endpoint": "e",
        "key": "k" * 64,
        "prompt_tokens": 1,
        "max_tokens": 2,
        "bound_cost": 0.0,
    }


class TestRuntime:
    def test_a_resumed_stage_reuses_the_stored_reply_and_spends_nothing(
        self, fake: ServerProcess, tmp_path: Path
    ) -> None:
        first = services(tmp_path, "run1")
        call = first.runtime_for(profile(fake.url)).for_call(FRESH)
        before = len(fake.requests())
        answers = [call.complete("same question"), call.complete("same question")]
        assert len(fake.requests()) == before + 2  # asked twice in one stage: two requests
        first.wal.close(settled=True)

        budget = Budget(max_tokens=1)
        again = services(tmp_path, "run2", budget=budget)
        call = again.runtime_for(profile(fake.url)).for_call(RESUMED)
        assert [call.complete("same question"), call.complete("same question")] == answers
        assert len(fake.requests()) == before + 2  # nothing asked again
        assert [a.reused for a in call.attempts] == [True, True]
        assert budget.spent()[0] == 0  # a reused reply costs nothing now

    def test_without_reuse_the_request_is_sent_and_logged(
        self, fake: ServerProcess, tmp_path: Path
    ) -> None:
        run = services(tmp_path, "run1")
        runtime = run.runtime_for(profile(fake.url))
        runtime.for_call(FRESH).complete("asked once")
        before = len(fake.requests())
        call = runtime.for_call(FRESH)  # not resumed: a fresh run asks again
        call.complete("asked once")
        assert len(fake.requests()) == before + 1 and not call.attempts[0].reused
        assert run.wal.log is not None
        lines = list(read_log(run.wal.log.path))
        assert [type(x).__name__ for x in lines] == ["Intent", "Outcome"] * 2
        assert run.wal.pending(set())[0].attempt.status is AttemptStatus.OK

    def test_an_invalid_reply_is_not_reused(self, fake: ServerProcess, tmp_path: Path) -> None:
        run = services(tmp_path, "run1")
        call = run.runtime_for(profile(fake.url)).for_call(RESUMED)
        with pytest.raises(Exception, match="did not validate"):
            call.ask("REPLY: not json at all", dict[str, int])
        before = len(fake.requests())
        call = run.runtime_for(profile(fake.url)).for_call(RESUMED)
        with pytest.raises(Exception, match="did not validate"):
            call.ask("REPLY: not json at all", dict[str, int])
        assert len(fake.requests()) > before  # the invalid replies were asked again
