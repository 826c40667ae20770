"""End-to-end: selective recomputation (`run --recompute STEP`) and `--jobs`.

docs/operations.md "Selective recomputation": success with module-call
counts proving no producer ran; every predecessor failure reason with every byte under
the cache root unchanged; recovery; deterministic decisions whatever `--jobs` is; the
failed predecessor visible in the journal, `explain` and the manifest.

The probe plugin logs every module call (step, lane, stage, thread) to the file named
by $PROBE_LOG (outside identity, so a primed workspace can be copied), and its `Roll`
module returns a fresh nonce per call like an LLM, so an unwanted re-execution of a
forced step would also change checkpoint bytes.
"""

from __future__ import annotations

import json
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from runjournal.adapters.checkpoints import (
    EnvelopeCodec,
    SharedComponents,
    decode_shared,
    shared_name,
)
from runjournal.domain.decisions import Stage
from runjournal.domain.names import safe_lane_id
from runjournal.domain.ports import CheckpointKey, CheckpointRecord
from support.cache_entries import CacheEntry, cache_entries, checkpoints

PROBE_PLUGIN = '''
import os
import threading
import time
import uuid
from typing import Any

from runjournal.domain.modules import Module, Normalized


def _log(ctx, stage):
    line = f"{ctx.step}\\t{ctx.lane}\\t{stage}\\t{threading.current_thread().name}\\n"
    with open(os.environ["PROBE_LOG"], "a", encoding="utf-8") as fh:
        fh.write(line)


def _jitter(ctx, text):
    # Later chunks finish first under --jobs N, so completion order != chunk order.
    time.sleep(ctx.params.get("delay", 0.0) * (3 - len(text) % 3))


class Words(Module):
    """A deterministic producer: word counts per chunk, with a normalize warning."""

    fingerprint = "test.words/1"
    artifact_kind = "words"
    schema = "test.words/v1"
    chunk_type = int
    merged_type = int
    artifact_type = dict[str, int]

    def extract(self, chunk, ctx):
        _log(ctx, "extract")
        _jitter(ctx, chunk.text)
        return len(chunk.text.split())

    def merge(self, parts, ctx):
        _log(ctx, "merge")
        return sum(parts)

    def normalize(self, merged, ctx):
        _log(ctx, "normalize")
        return Normalized({"words": merged}, [f"{ctx.lane} has {merged} words"])


class Roll(Module):
    """A non-deterministic consumer (a fresh nonce per call), like an LLM step."""

    fingerprint = "test.roll/1"
    artifact_kind = "roll"
    schema = "test.roll/v1"
    chunk_type = dict[str, Any]
    merged_type = list[dict[str, Any]]
    artifact_type = dict[str, Any]

    def extract(self, chunk, ctx):
        _log(ctx, "extract")
        _jitter(ctx, chunk.text)
        return {"chunk": chunk.sha256, "nonce": uuid.uuid4().hex}

    def merge(self, parts, ctx):
        _log(ctx, "merge")
        return parts

    def normalize(self, merged, ctx):
        _log(ctx, "normalize")
        return Normalized({"consumed": ctx.consumed, "parts": merged})
'''

DOCS = {
    "a.md": "Alpha one two.\n\nAlpha three four five.\n\nAlpha six.\n",
    "b.md": "Beta one.\n\nBeta two three.\n\nBeta four five six seven.\n\nBeta end.\n",
}

STEPS = ("words", "rolls", "side", "summary")


def _pipeline_text(*, delay: float = 0.0, words_extra: str = "") -> str:
    params = f"delay = {delay}"
    return f"""
name = "probe"
inputs = ["docs/*.md"]

[chunking]
strategy = "paragraphs"
max_chars = 30

[[steps]]
id = "words"
module = "plugins/probe.py:Words"
scope = "document"
params = {{ {params}{words_extra} }}

[[steps]]
id = "rolls"
module = "plugins/probe.py:Roll"
scope = "document"
consumes = ["words"]
params = {{ {params} }}

# Independent of `rolls`, but after it in file order: a required step whose
# restoration must still happen before any forced step executes.
[[steps]]
id = "side"
module = "plugins/probe.py:Words"
scope = "document"
params = {{ {params} }}

[[steps]]
id = "summary"
module = "plugins/probe.py:Roll"
scope = "corpus"
consumes = ["rolls", "words"]
params = {{ {params} }}
"""


@dataclass
class Call:
    step: str
    lane: str
    stage: str
    thread: str


@dataclass
class Probe:
    """A private pipeline using the probe plugin, with its roots and call log."""

    cli: Any
    root: Path
    pipeline: Path
    out: Path
    cache: Path
    log: Path
    delay: float = 0.0

    def write_pipeline(self, **kw: Any) -> None:
        self.pipeline.write_text(_pipeline_text(delay=self.delay, **kw))

    def run(self, *args: str) -> tuple[Any, dict]:
        return self.cli.json(
            "run",
            str(self.pipeline),
            *args,
            "--output-root",
            str(self.out),
            "--cache-root",
            str(self.cache),
            "--no-progress",
            env={"PROBE_LOG": str(self.log)},
        )

    def calls(self) -> list[Call]:
        """The module calls logged since the last call to this method."""
        if not self.log.exists():
            return []
        lines = self.log.read_text().splitlines()
        self.log.unlink()
        return [Call(*line.split("\t")) for line in lines]

    def workspace(self) -> Path:
        return self.cache / "workspaces" / "probe"

    def lane_dir(self, step: str, lane: str) -> Path:
        return self.workspace() / "steps" / step / safe_lane_id(lane)

    def normalize_file(self, step: str, lane: str) -> CacheEntry:
        """The lane's one normalize checkpoint, wherever its scope put it (packed or a file)."""
        lane_dir = f"workspaces/probe/steps/{step}/{safe_lane_id(lane)}/"
        [entry] = checkpoints(self.cache, lane_dir + "*/normalize.ckpt")
        return entry

    def events(self, run_id: str) -> list[dict]:
        proc, doc = self.cli.json("journal", "show", run_id, "--output-root", str(self.out))
        assert proc.returncode == 0, proc.stderr
        return doc["events"]


def _make_probe(cli: Any, root: Path, *, delay: float = 0.0, write: bool = True) -> Probe:
    if write:
        root.mkdir(parents=True, exist_ok=True)
        (root / "plugins").mkdir()
        (root / "plugins" / "probe.py").write_text(PROBE_PLUGIN)
        (root / "docs").mkdir()
        for name, text in DOCS.items():
            (root / "docs" / name).write_text(text)
    probe = Probe(
        cli=cli,
        root=root,
        pipeline=root / "pipeline.toml",
        out=root / "out",
        cache=root / "cache",
        log=root / "calls.log",
        delay=delay,
    )
    if write:
        probe.write_pipeline()
    return probe


@pytest.fixture
def probe(cli: Any, tmp_path: Path) -> Probe:
    return _make_probe(cli, tmp_path / "probe")


@pytest.fixture(scope="module")
def _template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {"dir": tmp_path_factory.mktemp("probe-template") / "probe"}


@pytest.fixture
def primed(cli: Any, tmp_path: Path, _template: dict[str, Path]) -> Probe:
    """A probe whose workspace holds a complete normal run (primed once, then copied)."""
    template = _template["dir"]
    if not (template / "cache").is_dir():
        first = _make_probe(cli, template)
        proc, doc = first.run()
        assert proc.returncode == 0, proc.stderr
        assert doc["status"] == "succeeded"
        assert len(first.calls()) == doc["module_calls"] > 0
    root = tmp_path / "probe"
    shutil.copytree(template, root, ignore=shutil.ignore_patterns("out", "calls.log"))
    return _make_probe(cli, root, write=False)


def snapshot(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every path under `root` with its kind, mode and bytes."""
    out: dict[str, tuple[str, int, bytes]] = {}
    if not root.exists():
        return out
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        rel = str(path.relative_to(root))
        if stat.S_ISDIR(st.st_mode):
            out[rel] = ("dir", stat.S_IMODE(st.st_mode), b"")
        else:
            out[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return out


REGISTRY = "journals"  # the cache root's journal registry (docs/operations.md "Cache retention")


def cache_content(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """`snapshot` of the cache root without its journal registry: a run that uses the cache
    root records its journal there first, whatever happens next, so that another
    project's `gc --cache` keeps what this journal references."""
    return {
        rel: entry
        for rel, entry in snapshot(root).items()
        if rel != REGISTRY and not rel.startswith(REGISTRY + "/")
    }


def registered_journals(root: Path) -> set[str]:
    """The journals the cache root's registry names."""
    return {json.loads(path.read_text())["journal"] for path in (root / REGISTRY).glob("*.json")}


def decisions(events: list[dict]) -> list[tuple[str, str, str, str, str]]:
    return [
        (
            e["data"]["step"],
            e["data"]["lane"],
            e["data"]["stage"],
            e["data"]["chunk"],
            e["data"]["code"],
        )
        for e in events
        if e["type"] == "StageDecided"
    ]


def _outputs_by_name(doc: dict) -> dict[str, bytes]:
    return {o["name"]: Path(o["path"]).read_bytes() for o in doc["outputs"]}


LANES = {"words": ["docs/a.md", "docs/b.md"], "side": ["docs/a.md", "docs/b.md"]}
LANES["rolls"] = LANES["words"]
LANES["summary"] = ["corpus"]


# --------------------------------------------------------------------------- success


class TestRecomputeSuccess:
    def test_consumer_recompute_runs_no_producer(self, primed: Probe) -> None:
        probe = primed
        before_outputs = _outputs_by_name(probe.run()[1])  # an ordinary run: all not_resumed
        probe.calls()

        proc, doc = probe.run("--recompute", "rolls")
        assert proc.returncode == 0, proc.stderr
        assert doc["status"] == "succeeded" and doc["error"] is None
        assert doc["recompute"] == {"selected": ["rolls"], "forced": ["rolls", "summary"]}

        calls = probe.calls()
        assert {c.step for c in calls} == {"rolls", "summary"}, "a producer was executed"
        assert doc["module_calls"] == len(calls)
        # every stage of every forced lane ran: one extract per chunk, one merge, one normalize
        for lane in LANES["rolls"]:
            stages = [c.stage for c in calls if c.step == "rolls" and c.lane == lane]
            assert stages.count("merge") == stages.count("normalize") == 1
            assert stages.count("extract") >= 3

        events = probe.events(doc["run_id"])
        seq = decisions(events)
        for step in ("words", "side"):
            mine = [d for d in seq if d[0] == step]
            assert mine == [
                (step, lane, "normalize", "", "predecessor_reused") for lane in LANES[step]
            ]
        for step in ("rolls", "summary"):
            mine = [d for d in seq if d[0] == step]
            assert mine and {d[4] for d in mine} == {"forced_recompute"}
            for lane in LANES[step]:
                stages = [d[2] for d in mine if d[1] == lane]
                assert stages[-2:] == ["merge", "normalize"]
                assert set(stages[:-2]) == {"extract"}
        assert doc["decisions"] == {
            "forced_recompute": sum(1 for d in seq if d[4] == "forced_recompute"),
            "predecessor_reused": 4,
        }

        restored = [e["data"] for e in events if e["type"] == "ArtifactGenerated"]
        assert {(a["step"], a["restored"]) for a in restored} == {
            ("words", True),
            ("side", True),
            ("rolls", False),
            ("summary", False),
        }
        # The restored artifacts are the accepted bytes; only stored normalize warnings return.
        after_outputs = _outputs_by_name(doc)
        for name, data in after_outputs.items():
            if name.startswith(("artifacts/words/", "artifacts/side/")):
                assert data == before_outputs[name]
            else:
                assert data != before_outputs[name], "a forced step must really re-roll"
        warnings = {(w["step"], w["lane"], w["message"]) for w in doc["warnings"]}
        assert ("words", "docs/a.md", "docs/a.md has 9 words") in warnings
        assert {w[0] for w in warnings} == {"words", "side"}

    @pytest.mark.parametrize(
        ("selected", "forced"),
        [
            (("words",), {"words", "rolls", "summary"}),
            (("summary",), {"summary"}),
            (("side",), {"side"}),
            (("rolls", "side"), {"rolls", "side", "summary"}),
        ],
        ids=["first-step", "leaf", "independent", "several"],
    )
    def test_only_forced_steps_execute(
        self, primed: Probe, selected: tuple[str, ...], forced: set[str]
    ) -> None:
        args = [a for s in selected for a in ("--recompute", s)]
        proc, doc = primed.run(*args)
        assert proc.returncode == 0, proc.stderr
        assert {c.step for c in primed.calls()} == forced
        seq = decisions(primed.events(doc["run_id"]))
        for step, _lane, stage, _chunk, code in seq:
            if step in forced:
                assert code == "forced_recompute"
            else:
                assert (stage, code) == ("normalize", "predecessor_reused")
        restored = {(d[0], d[1]) for d in seq if d[4] == "predecessor_reused"}
        assert restored == {(s, ln) for s in STEPS if s not in forced for ln in LANES[s]}

    def test_recompute_without_checkpoints_restores_and_writes_nothing(self, primed: Probe) -> None:
        before = cache_content(primed.cache)
        proc, doc = primed.run("--recompute", "summary", "--no-checkpoints")
        assert proc.returncode == 0, proc.stderr
        assert doc["decisions"]["predecessor_reused"] == 6
        assert {c.step for c in primed.calls()} == {"summary"}
        assert cache_content(primed.cache) == before

    def test_recompute_after_resume_refresh_still_finds_producers(self, primed: Probe) -> None:
        """A resumed run keeps the accepted artifacts restorable by a later --recompute."""
        proc, doc = primed.run("--resume")
        assert proc.returncode == 0, proc.stderr
        assert set(doc["decisions"]) == {"reused"}
        proc, doc = primed.run("--recompute", "summary")
        assert proc.returncode == 0, proc.stderr
        assert {c.step for c in primed.calls()} == {"summary"}


# --------------------------------------------------------------------------- failures


def _flip_byte(probe: Probe) -> tuple[str, str, str]:
    path = probe.normalize_file("words", "docs/b.md")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    return "words", "docs/b.md", "predecessor_corrupt"


def _delete(step: str, lane: str) -> Callable[[Probe], tuple[str, str, str]]:
    def mutate(probe: Probe) -> tuple[str, str, str]:
        probe.normalize_file(step, lane).unlink()
        return step, lane, "predecessor_missing"

    return mutate


def _change_params(probe: Probe) -> tuple[str, str, str]:
    probe.write_pipeline(words_extra=", salt = 1")
    return "words", "docs/a.md", "predecessor_identity_mismatch"


def _change_source(probe: Probe) -> tuple[str, str, str]:
    doc = probe.root / "docs" / "b.md"
    doc.write_text(doc.read_text() + "\nBeta appendix paragraph.\n")
    return "words", "docs/b.md", "predecessor_identity_mismatch"


def _rewrite_envelope(
    probe: Probe, step: str, lane: str, change: Callable[[CheckpointRecord], CheckpointRecord]
) -> None:
    path = probe.normalize_file(step, lane)
    key = CheckpointKey(step, lane, Stage.NORMALIZE)
    codec = EnvelopeCodec()

    def shared(ref: bytes) -> SharedComponents | None:
        [entry] = cache_entries(probe.cache, f"workspaces/probe/{shared_name(ref)}")
        return decode_shared(entry.read_bytes(), ref)

    header, payload = codec.open(path.read_bytes(), key, shared)
    record = CheckpointRecord(
        codec_id=header.codec_id,
        lane_identity=header.lane_identity,
        digests=header.digests,
        output_sha256=header.output_sha256,
        payload=payload,
        warnings=list(header.warnings),
        provenance=header.provenance,
    )
    path.write_bytes(codec.encode(key, change(record)))


def _wrong_provenance(field: str, value: Any) -> Callable[[Probe], tuple[str, str, str]]:
    """Same lane identity and payload, but the envelope names another producer."""

    def mutate(probe: Probe) -> tuple[str, str, str]:
        def change(record: CheckpointRecord) -> CheckpointRecord:
            prov = msgspec.structs.replace(record.provenance, **{field: value})
            return msgspec.structs.replace(record, provenance=prov)

        _rewrite_envelope(probe, "side", "docs/b.md", change)
        return "side", "docs/b.md", "predecessor_provenance_invalid"

    return mutate


def _no_provenance(probe: Probe) -> tuple[str, str, str]:
    _rewrite_envelope(
        probe, "words", "docs/a.md", lambda r: msgspec.structs.replace(r, provenance=None)
    )
    return "words", "docs/a.md", "predecessor_provenance_invalid"


def _codec_invalid_payload(probe: Probe) -> tuple[str, str, str]:
    """A well-formed envelope whose payload does not decode through the module codec."""
    import hashlib

    payload = b'{"words":"many"}'
    _rewrite_envelope(
        probe,
        "words",
        "docs/a.md",
        lambda r: msgspec.structs.replace(
            r, payload=payload, output_sha256=hashlib.sha256(payload).hexdigest()
        ),
    )
    return "words", "docs/a.md", "predecessor_corrupt"


def _codec_id_changed(probe: Probe) -> tuple[str, str, str]:
    _rewrite_envelope(
        probe, "words", "docs/b.md", lambda r: msgspec.structs.replace(r, codec_id="0" * 32)
    )
    return "words", "docs/b.md", "predecessor_corrupt"


def _schema_unsupported(probe: Probe) -> tuple[str, str, str]:
    """A workspace of another schema version: a schema failure there is predecessor_corrupt."""
    manifest = probe.workspace() / "workspace.json"
    doc = json.loads(manifest.read_text())
    doc["workspace_schema_version"] = 2
    manifest.write_text(json.dumps(doc))
    return "words", "docs/a.md", "predecessor_corrupt"


FAILURES: dict[str, Callable[[Probe], tuple[str, str, str]]] = {
    "missing": _delete("words", "docs/a.md"),
    "missing-after-forced-step": _delete("side", "docs/b.md"),
    "identity-params": _change_params,
    "identity-source": _change_source,
    "corrupt-flipped-byte": _flip_byte,
    "corrupt-codec-payload": _codec_invalid_payload,
    "corrupt-codec-id": _codec_id_changed,
    "provenance-fingerprint": _wrong_provenance("module_fingerprint", "test.words/0"),
    "provenance-sha256": _wrong_provenance("sha256", "0" * 64),
    "provenance-lane": _wrong_provenance("lane", "docs/a.md"),
    "provenance-absent": _no_provenance,
    "schema-unsupported": _schema_unsupported,
}


# `explain` is checked once per distinct reason code.
EXPLAINED = {
    "missing",
    "identity-params",
    "corrupt-flipped-byte",
    "provenance-fingerprint",
    "schema-unsupported",
}


class TestRecomputeFailure:
    @pytest.mark.parametrize("case", sorted(FAILURES))
    def test_failed_predecessor(self, primed: Probe, case: str) -> None:
        probe = primed
        pristine = snapshot(probe.root)
        step, lane, code = FAILURES[case](probe)
        cache_before = cache_content(probe.cache)

        proc, doc = probe.run("--recompute", "rolls")

        assert proc.returncode == 1, proc.stderr
        assert probe.calls() == [], "neither the producer nor any consumer may execute"
        assert cache_content(probe.cache) == cache_before, "the cache must stay byte-identical"
        assert f"sqlite://{(probe.root / 'out' / 'journal.sqlite3').resolve()}" in (
            registered_journals(probe.cache)
        ), "the journal that references this cache is registered in it"
        # one stderr line naming only the step, the lane and the reason code
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr
        assert f"step '{step}' lane '{lane}' {code}" in lines[0]
        assert str(probe.cache) not in lines[0] and ".ckpt" not in lines[0]
        assert doc["status"] == "failed" and doc["report"] is None
        assert set(doc["error"]) == {"step", "lane", "reason_code", "message"}
        assert (doc["error"]["step"], doc["error"]["lane"]) == (step, lane)
        assert doc["error"]["reason_code"] == code
        assert doc["error"]["message"] == (
            f"required predecessor step '{step}' lane '{lane}' cannot be restored: {code}"
        )
        failure = json.loads(Path(doc["failure_report"]).read_text())
        assert failure["error"] == doc["error"]
        manifest = json.loads(Path(doc["manifest"]).read_text())
        assert manifest["status"] == "failed"
        assert manifest["error"]["reason_code"] == code
        assert (manifest["error"]["step"], manifest["error"]["lane"]) == (step, lane)
        assert not (Path(doc["run_dir"]) / "artifacts").exists()

        # the journal: the predecessor decision is recorded before the failure is enforced
        events = probe.events(doc["run_id"])
        seq = decisions(events)
        assert seq[-1] == (step, lane, "normalize", "", code)
        assert all(d[4] == "predecessor_reused" for d in seq[:-1])
        assert not [e for e in events if e["type"] in ("StageExecuted", "CheckpointWritten")]
        assert events[-1]["type"] == "RunTerminated"
        assert events[-1]["data"]["status"] == "failed"
        assert events[-1]["data"]["error"]["reason_code"] == code
        if case in EXPLAINED:  # one case per reason code keeps the suite fast
            explained, view = probe.cli.json(
                "explain", doc["run_id"], "--output-root", str(probe.out)
            )
            assert explained.returncode == 0, explained.stderr
            assert view["totals"].get(code) == 1
            [step_view] = [s for s in view["steps"] if s["step"] == step]
            [lane_view] = [ln for ln in step_view["lanes"] if ln["lane"] == lane]
            assert lane_view["stages"] == {"normalize": {code: 1}}

        # recovery: put the files back as they were, and the same command succeeds
        _restore_tree(probe.root, pristine)
        proc, doc = probe.run("--recompute", "rolls")
        assert proc.returncode == 0, proc.stderr
        assert {c.step for c in probe.calls()} == {"rolls", "summary"}

    def test_ordinary_run_rebuilds_the_missing_predecessor(self, primed: Probe) -> None:
        _delete("words", "docs/a.md")(primed)
        proc, _doc = primed.run("--recompute", "rolls")
        assert proc.returncode == 1
        proc, doc = primed.run("--resume")
        assert proc.returncode == 0, proc.stderr
        assert doc["decisions"]["checkpoint_missing"] == 1
        primed.calls()
        proc, doc = primed.run("--recompute", "rolls")
        assert proc.returncode == 0, proc.stderr
        assert {c.step for c in primed.calls()} == {"rolls", "summary"}

    def test_empty_cache_fails_without_writing(self, probe: Probe) -> None:
        proc, doc = probe.run("--recompute", "rolls")
        assert proc.returncode == 1
        assert doc["error"]["reason_code"] == "predecessor_missing"
        assert (doc["error"]["step"], doc["error"]["lane"]) == ("words", "docs/a.md")
        assert probe.calls() == []
        # no file and no directory either, but the journal's registry entry
        assert cache_content(probe.cache) == {}
        assert len(registered_journals(probe.cache)) == 1


def _restore_tree(root: Path, pristine: dict[str, tuple[str, int, bytes]]) -> None:
    """Undo every change under `root` recorded since `pristine` (outputs excepted)."""
    for rel, (kind, mode, data) in pristine.items():
        path = root / rel
        if kind == "dir":
            path.mkdir(exist_ok=True)
        elif not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
        path.chmod(mode)
    for path in sorted(root.rglob("*"), reverse=True):
        rel = str(path.relative_to(root))
        if rel not in pristine and not rel.startswith("out"):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()


# --------------------------------------------------------------------------- --jobs


def _event_shape(events: list[dict]) -> list[tuple[Any, ...]]:
    """Event order and the deterministic steps' digests; no timestamps, paths or nonces."""
    out = []
    for e in events:
        d = e["data"]
        digest = d.get("sha256") if d.get("step") in ("words", "side") else None
        out.append(
            (
                e["type"],
                d.get("step"),
                d.get("lane"),
                d.get("stage"),
                d.get("chunk"),
                d.get("code"),
                digest,
            )
        )
    return out


class TestJobs:
    def test_decision_order_is_the_same_for_any_jobs(self, cli: Any, tmp_path: Path) -> None:
        shapes: dict[int, list[list[tuple[Any, ...]]]] = {}
        seqs: dict[int, list[list[tuple[str, ...]]]] = {}
        for jobs in (1, 4):
            probe = _make_probe(cli, tmp_path / f"jobs{jobs}", delay=0.005)
            shapes[jobs], seqs[jobs] = [], []
            for args in ((), ("--recompute", "rolls")):
                proc, doc = probe.run("--jobs", str(jobs), *args)
                assert proc.returncode == 0, proc.stderr
                calls = probe.calls()
                assert doc["module_calls"] == len(calls)
                threads = {c.thread for c in calls if c.stage == "extract"}
                if jobs == 1:
                    assert threads == {"MainThread"}
                else:
                    assert threads and all(t.startswith("runjournal-job") for t in threads)
                events = probe.events(doc["run_id"])
                shapes[jobs].append(_event_shape(events))
                seqs[jobs].append(decisions(events))
        assert seqs[1] == seqs[4]
        assert shapes[1] == shapes[4]
        normal, recompute = seqs[1]
        assert {d[4] for d in normal} == {"not_resumed"}
        assert {d[4] for d in recompute} == {"forced_recompute", "predecessor_reused"}
        assert len([d for d in normal if d[2] == "extract"]) > 8

    def test_jobs_must_be_positive(self, probe: Probe) -> None:
        proc = probe.cli("run", str(probe.pipeline), "--jobs", "0", "--output-root", str(probe.out))
        assert proc.returncode == 2
        assert "jobs" in proc.stderr
        assert not probe.out.exists()
