"""Unit tests of `adapters/debug_bundle.py`: allocation, summary, trace, spans, LLM metadata.

Secret-shaped tokens are built at run time (concatenation of random parts), never as
literals, so the repository holds nothing a push-protection scanner would flag.
"""

from __future__ import annotations

import errno
import hashlib
import json
import secrets
import string
import threading
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runjournal.adapters.debug_bundle import (
    COMMAND,
    INCOMPLETE_MARKER,
    RUN,
    SUMMARY_DIR,
    TRACE_DIR,
    TRACE_FILE,
    BundleAllocationError,
    DebugBundle,
    JournalSpans,
    SummaryWriter,
    TraceWriter,
    TracingLLM,
    command_payload,
    resolution_payload,
    trace_llm_calls,
)
from runjournal.adapters.fsroot import FsIOError, FsRoot
from runjournal.adapters.profiles import OFFLINE, OfflineRuntime
from runjournal.cli.compose import allocate_debug_bundle
from runjournal.domain.chunking import ChunkingSettings
from runjournal.domain.decisions import CheckpointState, Stage
from runjournal.domain.events import (
    ArtifactGenerated,
    LaneResolved,
    RunPhase,
    RunStatus,
    RunTerminated,
    StageDecided,
    StageExecuted,
    StageFailed,
)
from runjournal.domain.identity import LaneComponents
from runjournal.domain.modules import Module, Normalized
from runjournal.domain.pipeline import ResolvedPipeline, ResolvedStep, Scope, Source
from runjournal.domain.reasons import Category, ReasonCode
from support.faulty_fs import Fault, faulty_root_class

ALNUM = string.ascii_letters + string.digits


def rnd(n: int, alphabet: str = ALNUM) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def github_token() -> tuple[str, str]:
    body = rnd(36)
    return "gh" + "p_" + body, body


def openai_key() -> tuple[str, str]:
    body = rnd(48)
    return "s" + "k-" + "proj-" + body, body


def read_trace(bundle_dir: Path) -> list[dict]:
    path = bundle_dir / TRACE_DIR / TRACE_FILE
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def faults() -> list[Fault]:
    """The faults of this test's fake roots (`support.faulty_fs`), read at each call."""
    return []


def fail_on(faults: list[Fault], method: str, predicate) -> None:
    """Make <method>(name, ...) of this test's roots raise EIO when predicate(root, name)."""
    faults.append(
        Fault(
            method,
            predicate,
            lambda name: FsIOError(name, errno.EIO, "input/output error (injected)"),
        )
    )


def allocate(
    debug_root: Path, run_id: str, *, trace: bool, faults: list[Fault] | None = None
) -> DebugBundle:
    """A bundle under a debug root opened the way the composition root opens it (through
    a fake root failing `faults`, when given)."""
    opener = faulty_root_class(faults).open if faults is not None else FsRoot.open
    return allocate_debug_bundle(
        lambda: opener(debug_root, create=True), str(debug_root), run_id, trace=trace
    )


# --- allocation ------------------------------------------------------------------


class TestAllocate:
    def test_layout_and_permissions(self, tmp_path: Path) -> None:
        root = tmp_path / "debug"
        bundle = allocate(root, "run-1", trace=True)
        path = Path(bundle.path)
        assert path == (root / "run-1").resolve()
        assert sorted(p.name for p in path.iterdir()) == [INCOMPLETE_MARKER, SUMMARY_DIR, TRACE_DIR]
        assert bundle.trace is not None
        assert bundle.close() == []
        assert not (path / INCOMPLETE_MARKER).exists()
        for p in [root, *root.rglob("*")]:
            expected = 0o700 if p.is_dir() else 0o600
            assert p.stat().st_mode & 0o777 == expected, p

    def test_summary_only_has_no_trace_root(self, tmp_path: Path) -> None:
        bundle = allocate(tmp_path / "d", "r", trace=False)
        assert bundle.trace is None
        assert not (Path(bundle.path) / TRACE_DIR).exists()
        bundle.close()

    def test_exclusive_and_never_touches_an_existing_bundle(self, tmp_path: Path) -> None:
        existing = tmp_path / "d" / "r"
        existing.mkdir(parents=True)
        (existing / "keep.txt").write_text("someone else's")
        with pytest.raises(BundleAllocationError) as info:
            allocate(tmp_path / "d", "r", trace=True)
        assert info.value.cleaned
        assert "already exists" in str(info.value)
        assert (existing / "keep.txt").read_text() == "someone else's"

    def test_unusable_debug_root_is_a_typed_error(self, tmp_path: Path) -> None:
        blocker = tmp_path / "file"
        blocker.write_text("x")
        with pytest.raises(BundleAllocationError) as info:
            allocate(blocker / "sub", "r", trace=False)
        assert str(blocker / "sub" / "r") in str(info.value)

    def test_half_allocated_bundle_is_removed(self, tmp_path: Path, faults: list[Fault]) -> None:
        fail_on(faults, "mkdir", lambda root, name: name == TRACE_DIR)
        with pytest.raises(BundleAllocationError) as info:
            allocate(tmp_path / "d", "r", trace=True, faults=faults)
        assert info.value.cleaned
        assert list((tmp_path / "d").iterdir()) == []

    def test_half_allocated_bundle_that_cannot_be_removed_stays_marked(
        self, tmp_path: Path, faults: list[Fault]
    ) -> None:
        fail_on(faults, "mkdir", lambda root, name: name == SUMMARY_DIR)
        fail_on(faults, "remove_tree", lambda root, name: True)
        with pytest.raises(BundleAllocationError) as info:
            allocate(tmp_path / "d", "r", trace=True, faults=faults)
        assert not info.value.cleaned
        assert "INCOMPLETE" in str(info.value)
        assert (
            (tmp_path / "d" / "r" / INCOMPLETE_MARKER)
            .read_text()
            .startswith("debug bundle of run r is incomplete")
        )

    def test_marker_write_failure_fails_allocation(
        self, tmp_path: Path, faults: list[Fault]
    ) -> None:
        fail_on(faults, "write_bytes", lambda root, name: name == INCOMPLETE_MARKER)
        with pytest.raises(BundleAllocationError):
            allocate(tmp_path / "d", "r", trace=False, faults=faults)
        assert list((tmp_path / "d").iterdir()) == []


class TestClose:
    def test_a_failed_summary_write_keeps_the_marker(
        self, tmp_path: Path, faults: list[Fault]
    ) -> None:
        bundle = allocate(tmp_path / "d", "r", trace=False, faults=faults)
        fail_on(faults, "write_bytes", lambda root, name: name == RUN)
        assert bundle.summary.write(COMMAND, {"a": 1})
        assert not bundle.summary.write(RUN, {"a": 1})
        failures = bundle.close()
        assert [(f.target, f.name) for f in failures] == [("debug_summary", RUN)]
        assert "input/output error" in failures[0].line()
        assert (Path(bundle.path) / INCOMPLETE_MARKER).exists()
        assert bundle.close() == failures  # idempotent

    def test_marker_that_cannot_be_cleared_is_a_failure(
        self, tmp_path: Path, faults: list[Fault]
    ) -> None:
        bundle = allocate(tmp_path / "d", "r", trace=False, faults=faults)
        fail_on(faults, "remove", lambda root, name: name == INCOMPLETE_MARKER)
        failures = bundle.close()
        assert [(f.target, f.name) for f in failures] == [("debug_bundle", INCOMPLETE_MARKER)]

    def test_lost_trace_records_are_counted(self, tmp_path: Path, faults: list[Fault]) -> None:
        bundle = allocate(tmp_path / "d", "r", trace=True, faults=faults)
        fail_on(faults, "append_line", lambda root, name: True)
        assert bundle.trace is not None
        for i in range(5):
            bundle.trace.record("k", "n", {"i": i})
        failures = bundle.close()
        assert [f.target for f in failures] == ["debug_trace"]
        assert "5 record(s) lost" in failures[0].message


# --- summary ---------------------------------------------------------------------


class TestSummaryWriter:
    def test_documents_are_redacted_at_the_boundary(self, tmp_path: Path) -> None:
        token, body = github_token()
        plain = rnd(24)
        with FsRoot.open(tmp_path / "s", create=True) as root:
            writer = SummaryWriter(root)
            assert writer.write(
                RUN,
                {"note": f"using {token}", "db_password": plain, "nested": [{"api_key": plain}]},
            )
        text = (tmp_path / "s" / RUN).read_text()
        assert body not in text and plain not in text
        doc = json.loads(text)
        assert doc["document"] == "run" and doc["format_version"] == 1
        assert doc["db_password"] == "[REDACTED]"
        assert doc["nested"] == [{"api_key": "[REDACTED]"}]
        assert "[REDACTED:github_token]" in doc["note"]

    def test_unknown_document_is_a_programming_error(self, tmp_path: Path) -> None:
        with FsRoot.open(tmp_path, create=True) as root, pytest.raises(ValueError):
            SummaryWriter(root).write("../escape.json", {})

    def test_failures_are_recorded_not_raised(self, tmp_path: Path, faults: list[Fault]) -> None:
        fail_on(faults, "write_bytes", lambda root, name: True)
        with faulty_root_class(faults).open(tmp_path, create=True) as root:
            writer = SummaryWriter(root)
            assert not writer.write(COMMAND, {"x": 1})
        assert writer.failures and writer.failures[0].name == COMMAND
        assert writer.written == []

    def test_command_payload_hides_secret_overrides(self) -> None:
        token, body = openai_key()
        plain = rnd(20)
        argv = ["run", "p.toml", "--set", f"api_token={plain}", "--set", f"note={token}"]
        doc = command_payload(
            argv=argv,
            run_id="r",
            tool_version="0",
            pipeline="p",
            pipeline_file="/p.toml",
            overrides={"api_token": plain, "note": token, "lang": "en"},
            resume=False,
            recompute=(),
            inputs=(),
            debug="summary",
        )
        text = json.dumps(doc)
        assert plain not in text and body not in text
        assert doc["overrides"]["lang"] == "en"
        assert doc["overrides"]["api_token"] == "[REDACTED]"

    def test_resolution_payload_holds_reference_identities_not_bytes(self) -> None:
        ref_text = "generated campaign text " + rnd(32)
        module = _EchoModule()
        step = ResolvedStep(
            id="s",
            module=module,
            scope=Scope.DOCUMENT,
            consumes=(),
            params={"api_key": "plain-" + rnd(10), "n": 3},
            components=LaneComponents(*(["x"] * 7)),
        )
        pipeline = ResolvedPipeline(
            name="p",
            steps=(step,),
            sources=(Source("a.md", b"alpha", hashlib.sha256(b"alpha").hexdigest()),),
            chunking=ChunkingSettings(),
            references={"ref.md": ref_text},
            reference_digests={"ref.md": hashlib.sha256(ref_text.encode()).hexdigest()},
        )
        doc = resolution_payload(
            [{"name": "jobs", "value": 1, "origin": "default"}], pipeline=pipeline
        )
        assert doc["status"] == "resolved"
        refs = doc["pipeline"]["references"]
        assert refs == [
            {
                "name": "ref.md",
                "sha256": hashlib.sha256(ref_text.encode()).hexdigest(),
                "size": len(ref_text),
            }
        ]
        assert ref_text not in json.dumps(doc)
        assert "alpha" not in json.dumps(doc)
        failed = resolution_payload([], error="inputs: no match")
        assert failed["status"] == "failed" and failed["pipeline"] is None


# --- trace -----------------------------------------------------------------------


class TestTraceWriter:
    def test_records_are_json_lines_in_order_and_redacted(self, tmp_path: Path) -> None:
        token, body = github_token()
        with FsRoot.open(tmp_path, create=True) as root:
            trace = TraceWriter(root, flush_every=2)
            trace.record("module", "meta", {"authorization": "Bearer " + rnd(30), "t": token})
            trace.record("module", f"name {token}", {"ok": 1})
            trace.record("stage", "extract", {"obj": object()})
            assert trace.flush()
        lines = (tmp_path / TRACE_FILE).read_text().splitlines()
        assert body not in "\n".join(lines)
        recs = [json.loads(line) for line in lines]
        assert [r["seq"] for r in recs] == [1, 2, 3]
        assert list(recs[0]) == ["seq", "time", "kind", "name", "data"]
        assert recs[0]["data"]["authorization"] == "[REDACTED]"
        assert "[REDACTED:" in recs[1]["name"]
        assert recs[2]["data"]["obj"].startswith("<object object")
        assert (tmp_path / TRACE_FILE).stat().st_mode & 0o777 == 0o600

    def test_buffered_until_flush_every(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        calls: list[bytes] = []
        original = FsRoot.append_line

        def spy(self, name, data):
            calls.append(data)
            return original(self, name, data)

        monkeypatch.setattr(FsRoot, "append_line", spy)
        with FsRoot.open(tmp_path, create=True) as root:
            trace = TraceWriter(root, flush_every=3)
            for i in range(7):
                trace.record("k", "n", {"i": i})
            assert len(calls) == 2
            trace.flush()
        assert len(calls) == 3
        assert len((tmp_path / TRACE_FILE).read_text().splitlines()) == 7

    def test_failure_never_raises_and_drops_the_rest(
        self, tmp_path: Path, faults: list[Fault]
    ) -> None:
        fail_on(faults, "append_line", lambda root, name: True)
        with faulty_root_class(faults).open(tmp_path, create=True) as root:
            trace = TraceWriter(root, flush_every=1)
            for i in range(4):
                trace.record("k", "n", {"i": i})
            assert not trace.flush()
        assert len(trace.failures) == 1
        assert trace.dropped == 4
        assert trace.failures[0].target == "debug_trace"

    def test_records_after_close_are_ignored(self, tmp_path: Path) -> None:
        with FsRoot.open(tmp_path, create=True) as root:
            trace = TraceWriter(root, flush_every=1)
            trace.record("k", "before", {})
            assert trace.close()
        trace.record("k", "after", {})  # the root is closed: must neither raise nor fail
        assert trace.failures == [] and trace.records == 1
        assert len((tmp_path / TRACE_FILE).read_text().splitlines()) == 1

    def test_oversized_record_is_replaced_by_its_digest(self, tmp_path: Path) -> None:
        with FsRoot.open(tmp_path, create=True) as root:
            trace = TraceWriter(root, max_record_bytes=200)
            trace.record("module", "big", {"blob": "x" * 1000})
            trace.flush()
        rec = json.loads((tmp_path / TRACE_FILE).read_text())
        assert rec["data"]["omitted"] == "record too large"
        assert rec["data"]["bytes"] > 1000

    def test_unrecordable_material_is_noted(self, tmp_path: Path) -> None:
        with FsRoot.open(tmp_path, create=True) as root:
            trace = TraceWriter(root)
            trace.record("module", "bad", 42)  # type: ignore[arg-type]
            trace.flush()
        rec = json.loads((tmp_path / TRACE_FILE).read_text())
        assert "unrecordable" in rec["data"]

    def test_thread_safe_sequence(self, tmp_path: Path) -> None:
        with FsRoot.open(tmp_path, create=True) as root:
            trace = TraceWriter(root, flush_every=7)

            def work(k: int) -> None:
                for i in range(50):
                    trace.record("module", "t", {"k": k, "i": i})

            threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            trace.flush()
        recs = [json.loads(x) for x in (tmp_path / TRACE_FILE).read_text().splitlines()]
        assert sorted(r["seq"] for r in recs) == list(range(1, 201))

    @settings(
        max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        data=st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=20),
            lambda inner: (
                st.lists(inner, max_size=4)
                | st.dictionaries(st.text(max_size=8), inner, max_size=4)
            ),
            max_leaves=12,
        ),
        where=st.sampled_from(["key", "shape", "list"]),
    )
    def test_planted_secret_never_reaches_the_file(
        self, tmp_path: Path, data: object, where: str
    ) -> None:
        token, body = github_token()
        plain = rnd(24)
        planted = {
            "key": {"client_secret": plain, "other": data},
            "shape": {"other": data, "text": f"x {token} y"},
            "list": {"items": [data, token, {"password": plain}]},
        }[where]
        path = tmp_path / uuid4().hex
        with FsRoot.open(path, create=True) as root:
            trace = TraceWriter(root)
            trace.record("module", "p", planted)
            trace.flush()
        text = (path / TRACE_FILE).read_text()
        assert body not in text and plain not in text
        json.loads(text)


# --- spans from journal events -------------------------------------------------------


class _Recorder:
    def __init__(self) -> None:
        self.records: list[tuple[str, str, dict]] = []

    def record(self, kind: str, name: str, data: dict) -> None:
        self.records.append((kind, name, dict(data)))


_ENV = {"originator_id": uuid4(), "timestamp": datetime.now(UTC)}


def _lane(step: str, lane: str, v: int) -> LaneResolved:
    return LaneResolved(
        **_ENV,
        originator_version=v,
        step=step,
        lane=lane,
        components=LaneComponents(*(["c"] * 7)),
        lane_identity="lid-" + lane,
        dependencies=[],
        chunks=2,
        forced=False,
    )


def _decided(step: str, lane: str, v: int) -> StageDecided:
    return StageDecided(
        **_ENV,
        originator_version=v,
        step=step,
        lane=lane,
        stage=Stage.EXTRACT,
        chunk="c1",
        code=ReasonCode.NOT_RESUMED,
        category=Category.EXECUTION,
        detail="",
        forced=False,
        resumed=False,
        checkpoint=CheckpointState.NOT_LOOKED_UP,
        input="i",
        dependencies="d",
        recorded={},
    )


class TestJournalSpans:
    def test_unattached_does_nothing(self) -> None:
        spans = JournalSpans()
        spans(_lane("a", "x", 1))  # nowhere to write: no record, and no state kept
        rec = _Recorder()
        spans.attach(rec)
        spans(_lane("b", "y", 2))
        # Had the unattached call opened step "a", its end would be recorded here first.
        assert [(k, n, d.get("event")) for k, n, d in rec.records] == [
            ("step", "b", "begin"),
            ("lane", "b/y", "begin"),
        ]
        spans.attach(None)
        spans(_lane("c", "z", 3))
        assert len(rec.records) == 2  # detached again: nothing more is recorded

    def test_a_bug_in_the_translation_is_not_swallowed(self) -> None:
        class WrongSignature:
            def record(self, kind: str, name: str) -> None:  # not the TraceRecorder port
                raise AssertionError("never called with two arguments")

        spans = JournalSpans()
        spans.attach(WrongSignature())  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            spans(_lane("a", "x", 1))

    def test_step_lane_and_stage_spans(self) -> None:
        rec = _Recorder()
        spans = JournalSpans()
        spans.attach(rec)
        events = [
            _lane("a", "x", 1),
            _decided("a", "x", 2),
            StageExecuted(
                **_ENV,
                originator_version=3,
                step="a",
                lane="x",
                stage=Stage.EXTRACT,
                chunk="c1",
                sha256="s",
                size=1,
            ),
            ArtifactGenerated(
                **_ENV,
                originator_version=4,
                step="a",
                lane="x",
                kind="k",
                schema="s",
                media_type="m",
                sha256="h",
                size=2,
                warnings=["w"],
            ),
            _lane("b", "corpus", 5),
            StageFailed(
                **_ENV,
                originator_version=6,
                step="b",
                lane="corpus",
                stage=Stage.MERGE,
                chunk="",
                code=ReasonCode.STAGE_FAILED,
                message="boom",
            ),
            RunTerminated(
                **_ENV, originator_version=7, status=RunStatus.FAILED, phase=RunPhase.EXECUTION
            ),
        ]
        for e in events:
            spans(e)
        shape = [(k, n, d.get("event")) for k, n, d in rec.records]
        assert shape == [
            ("step", "a", "begin"),
            ("lane", "a/x", "begin"),
            ("stage", "extract", "decided"),
            ("stage", "extract", "executed"),
            ("lane", "a/x", "end"),
            ("step", "a", "end"),
            ("step", "b", "begin"),
            ("lane", "b/corpus", "begin"),
            ("stage", "merge", "failed"),
            ("lane", "b/corpus", "end"),
            ("step", "b", "end"),
            ("run", "terminated", None),
        ]
        assert rec.records[5][2]["lanes"] == 1
        assert rec.records[10][2]["status"] == "failed"

    def test_a_failing_recorder_never_reaches_emit(self) -> None:
        class Picky(_Recorder):
            def record(self, kind: str, name: str, data: dict) -> None:
                if kind == "lane":
                    raise RuntimeError("cannot record lanes")
                super().record(kind, name, data)

        rec = Picky()
        spans = JournalSpans()
        spans.attach(rec)
        spans(_lane("a", "x", 1))  # must not raise into RunSession.emit
        assert rec.records[0][:2] == ("step", "a")
        assert rec.records[-1][:2] == ("trace", "error")
        assert "cannot record lanes" in rec.records[-1][2]["error"]


# --- LLM metadata ---------------------------------------------------------------------


class _EchoModule(Module):
    name = "test.echo"
    fingerprint = "test.echo/1"
    artifact_kind = "echo"
    schema = "test.echo/v1"

    def extract(self, chunk, ctx):
        return 0

    def merge(self, parts, ctx):
        return 0

    def normalize(self, merged, ctx):
        return Normalized(0)


class TestTracingLLM:
    def test_metadata_only(self) -> None:
        rec = _Recorder()
        token, body = openai_key()
        prompt = f"summarize this, key {token}"
        llm = TracingLLM(OfflineRuntime(OFFLINE), rec, step="s")
        out = llm.complete(prompt, system="be brief")
        assert json.loads(out)["model"] == "echo-1"
        assert llm.profile is OFFLINE  # other attributes pass through
        (k1, n1, req), (k2, n2, resp) = rec.records
        assert (k1, n1, k2, n2) == ("llm", "request", "llm", "response")
        assert req["prompt_sha256"] == hashlib.sha256(prompt.encode()).hexdigest()
        assert req["prompt_chars"] == len(prompt)
        assert (
            req["provider"] == "offline"
            and req["model"] == "echo-1"
            and req["profile"] == "offline"
        )
        assert resp["response_sha256"] == hashlib.sha256(out.encode()).hexdigest()
        assert body not in json.dumps(rec.records) and "summarize" not in json.dumps(rec.records)

    def test_errors_are_recorded_and_reraised(self) -> None:
        rec = _Recorder()

        class Failing:
            profile = OFFLINE

            def complete(self, prompt, *, system=None):
                raise RuntimeError("provider down")

        with pytest.raises(RuntimeError):
            TracingLLM(Failing(), rec, step="s").complete("p")
        assert [n for _, n, _ in rec.records] == ["request", "error"]
        assert rec.records[1][2]["error_type"] == "RuntimeError"

    def test_wrapping_keeps_identity(self) -> None:
        step = ResolvedStep(
            id="s",
            module=_EchoModule(),
            scope=Scope.DOCUMENT,
            consumes=(),
            params={},
            components=LaneComponents(*(["x"] * 7)),
            llm=OfflineRuntime(OFFLINE),
        )
        plain = ResolvedStep(
            id="t",
            module=_EchoModule(),
            scope=Scope.DOCUMENT,
            consumes=(),
            params={},
            components=LaneComponents(*(["y"] * 7)),
        )
        pipeline = ResolvedPipeline(
            name="p", steps=(step, plain), sources=(), chunking=ChunkingSettings()
        )
        traced = trace_llm_calls(pipeline, _Recorder())
        assert isinstance(traced.steps[0].llm, TracingLLM)
        assert traced.steps[1].llm is None
        assert [s.components for s in traced.steps] == [s.components for s in pipeline.steps]
