"""A no-op `run --resume` does only what a resume needs (issue 29, "Resume at the floor").

- The `openai` client is not imported by a resume that reuses every stage of an LLM step;
  a resume whose LLM stage executes does import it (docs/performance.md "Start-up").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.llm_servers import ASK_PIPELINE, ASK_SCHEMA, ServerProcess, start_fake

PROFILE = """
[profiles.fake]
provider = "openai"
model = "fake-model"
base_url = "{url}"
api_key_env = "RJ_FAKE_KEY"
read_timeout = 5
max_retries = 0
"""
KEY = {"RJ_FAKE_KEY": "sk-" + "local-" + "x" * 24}
# the CLI in this interpreter, then whether it imported the client (last line, JSON)
PROBE = """
import json, sys
from runjournal.cli.main import main
sys.argv = ["runjournal", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "openai": "openai" in sys.modules}))
"""


@pytest.fixture(scope="module")
def fake() -> Iterator[ServerProcess]:
    with start_fake() as server:
        yield server


def _project(root: Path, url: str) -> list[str]:
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("Alpha one, about apples.\n\nAlpha two, apricots.\n")
    (root / "docs" / "b.md").write_text("Beta has one paragraph about bananas.\n")
    (root / "pipeline.toml").write_text(ASK_PIPELINE.format(schema=ASK_SCHEMA))
    (root / "profiles.toml").write_text(PROFILE.format(url=url))
    return [
        "run",
        str(root / "pipeline.toml"),
        "--output-root",
        str(root / "out"),
        "--cache-root",
        str(root / "cache"),
        "--profile",
        "fake",
        "--profiles-file",
        str(root / "profiles.toml"),
        "--no-progress",
        "--json",
    ]


def _probe(cli, args: list[str]) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**cli.env, **KEY},
    )
    assert proc.stdout, proc.stderr
    last = json.loads(proc.stdout.splitlines()[-1])
    assert last["code"] in (0, None), proc.stderr
    return last


def test_a_no_op_resume_of_an_llm_step_never_imports_the_client(
    cli, fake: ServerProcess, tmp_path: Path
) -> None:
    args = _project(tmp_path, fake.url)
    proc = cli(*args, env=KEY)
    assert proc.returncode == 0, proc.stderr
    assert _probe(cli, [*args, "--resume"])["openai"] is False


def test_a_resume_whose_llm_stage_executes_imports_the_client(
    cli, fake: ServerProcess, tmp_path: Path
) -> None:
    args = _project(tmp_path, fake.url)
    proc = cli(*args, env=KEY)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "docs" / "b.md").write_text("Beta now has another paragraph, about berries.\n")
    assert _probe(cli, [*args, "--resume"])["openai"] is True


# --- payloads a resume does not use (docs/internals.md "Payloads a resume does not use")

TERMS = """name = "floor"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 80
[[steps]]
id = "terms"
module = "builtin.terms"
"""
PARAGRAPHS = [
    "**Journal entries** record each stage decision of the pipeline run.",
    "A **checkpoint** holds the payload of one stage for the next resume.",
    "The **lane walk** looks up every chunk before it decides the merge.",
    "An **envelope** carries the digests that a reuse decision compares.",
]


def _terms_project(root: Path, docs: int = 3) -> list[str]:
    (root / "docs").mkdir(parents=True)
    for d in range(docs):
        text = "\n\n".join(p.replace("stage", f"stage {d}") for p in PARAGRAPHS)
        (root / "docs" / f"d{d}.md").write_text(f"# Doc {d}\n\n{text}\n")
    (root / "pipeline.toml").write_text(TERMS)
    return [
        "run",
        str(root / "pipeline.toml"),
        "--output-root",
        str(root / "out"),
        "--cache-root",
        str(root / "cache"),
        "--no-progress",
        "--json",
    ]


def _artifacts(doc: dict) -> dict[str, bytes]:
    return {
        o["name"]: Path(o["path"]).read_bytes()
        for o in doc["outputs"]
        if o["name"].startswith("artifacts/")
    }


def test_a_no_op_resume_reads_payloads_per_lane_not_per_decision(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = _terms_project(tmp_path, docs=3)
    cold = invoke(*args)
    assert cold.exit_code == 0, cold.output
    opened = _count_opens(monkeypatch)
    again = invoke(*args, "--resume")
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    decisions = sum(doc["decisions"].values())
    assert set(doc["decisions"]) == {"reused"} and decisions > 3 * 3
    # one verified payload per lane (its normalize: the artifact written), the other
    # decisions from their envelope's header, or the lane's first extract header their
    # bytes repeat (docs/internals.md "Reusing a lane as a whole"), and each one's
    # trailing digest: one hash per checkpoint
    assert opened["payload"] <= 3, opened
    assert opened["payload"] + opened["header"] <= decisions
    assert opened["digest"] == decisions, opened
    assert _artifacts(doc) == _artifacts(json.loads(cold.stdout))


def _count_opens(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Envelopes opened (with their payload or not) and trailing digests checked."""
    from runjournal.adapters import checkpoints
    from runjournal.adapters.checkpoints import EnvelopeCodec

    opened = {"payload": 0, "header": 0, "digest": 0}
    real_open, real_digest = EnvelopeCodec.open, checkpoints._scope_digest

    def counting(self, data, key, shared=None, **kwargs):  # type: ignore[no-untyped-def]
        opened["payload" if kwargs.get("payload", True) else "header"] += 1
        return real_open(self, data, key, shared, **kwargs)

    def digest(key, body):  # type: ignore[no-untyped-def]
        opened["digest"] += 1
        return real_digest(key, body)

    monkeypatch.setattr(EnvelopeCodec, "open", counting)
    monkeypatch.setattr(checkpoints, "_scope_digest", digest)
    return opened


def test_a_stat_mode_no_op_resume_reads_only_the_envelopes_it_uses(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `input_check = "stat"` a lane is decided from its checkpoints' index facts
    (docs/internals.md "Decision facts in the index"): the one envelope read per lane
    is its normalize's, whose payload is the artifact; `--verify` reads them all."""
    args = [*_terms_project(tmp_path, docs=3), "--input-check", "stat"]
    cold = invoke(*args)
    assert cold.exit_code == 0, cold.output
    _trust_recorded_stats(tmp_path / "cache")
    opened = _count_opens(monkeypatch)
    again = invoke(*args, "--resume")
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    decisions = sum(doc["decisions"].values())
    assert set(doc["decisions"]) == {"reused"} and decisions > 3 * 3
    assert opened == {"payload": 3, "header": 0, "digest": 3}, opened
    assert _artifacts(doc) == _artifacts(json.loads(cold.stdout))
    for key in opened:
        opened[key] = 0
    verified = invoke(*args, "--resume", "--verify")
    assert verified.exit_code == 0, verified.output
    assert set(json.loads(verified.stdout)["decisions"]) == {"reused"}
    assert opened["payload"] == 3 and opened["digest"] == decisions, opened


def test_a_stat_mode_resume_of_a_cache_without_facts_reads_every_envelope(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index as a runjournal before index schema 3 left it (no `facts` column,
    schema 2; the records are the same): each lane is read and checked as before."""
    import contextlib
    import sqlite3

    args = [*_terms_project(tmp_path, docs=2), "--input-check", "stat"]
    cold = invoke(*args)
    assert cold.exit_code == 0, cold.output
    _trust_recorded_stats(tmp_path / "cache")
    index = tmp_path / "cache" / "pack" / "index.sqlite"
    with contextlib.closing(sqlite3.connect(index)) as db, db:
        db.execute("ALTER TABLE entries DROP COLUMN facts")
        db.execute("UPDATE meta SET value = 2 WHERE key = 'schema'")
    opened = _count_opens(monkeypatch)
    again = invoke(*args, "--resume")
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    decisions = sum(doc["decisions"].values())
    assert set(doc["decisions"]) == {"reused"}
    assert opened["digest"] == decisions, opened
    with contextlib.closing(sqlite3.connect(index)) as db:  # it wrote no entry
        assert db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0] == 2
    assert _artifacts(doc) == _artifacts(json.loads(cold.stdout))


def test_a_deleted_merge_checkpoint_reads_the_reused_extracts_payloads(
    invoke, tmp_path: Path
) -> None:
    from support.cache_entries import checkpoints

    args = _terms_project(tmp_path, docs=2)
    cold = invoke(*args)
    assert cold.exit_code == 0, cold.output
    [victim] = checkpoints(
        tmp_path / "cache", "workspaces/floor/steps/terms/*docs__d1.md*/merge.ckpt"
    )
    victim.unlink()
    again = invoke(*args, "--resume")
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    assert doc["decisions"]["checkpoint_missing"] == 1
    assert sum(doc["decisions"].values()) == sum(json.loads(cold.stdout)["decisions"].values())
    assert _artifacts(doc) == _artifacts(json.loads(cold.stdout))


def test_a_deleted_extract_checkpoint_in_the_middle_recomputes_only_it(
    invoke, tmp_path: Path
) -> None:
    from support.cache_entries import checkpoints

    args = _terms_project(tmp_path, docs=2)
    cold = invoke(*args)
    assert cold.exit_code == 0, cold.output
    extracts = checkpoints(
        tmp_path / "cache", "workspaces/floor/steps/terms/*docs__d0.md*/extract/*.ckpt"
    )
    assert len(extracts) >= 3
    extracts[len(extracts) // 2].unlink()
    again = invoke(*args, "--resume")
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    # the one extract runs again; its result is the same, so the merge and normalize
    # after it are reused (early cutoff)
    assert doc["decisions"] == {
        "reused": sum(json.loads(cold.stdout)["decisions"].values()) - 1,
        "checkpoint_missing": 1,
    }
    assert _artifacts(doc) == _artifacts(json.loads(cold.stdout))


def test_a_same_size_edit_with_its_mtime_restored_is_seen_under_verify(
    invoke, tmp_path: Path
) -> None:
    args = _terms_project(tmp_path, docs=2)
    stat_args = [*args, "--input-check", "stat"]
    cold = invoke(*stat_args)
    assert cold.exit_code == 0, cold.output
    path = tmp_path / "docs" / "d1.md"
    before = os.stat(path)
    data = path.read_bytes()
    edited = data.replace(b"Journal entries", b"Journal entrieS", 1)
    assert len(edited) == len(data) and edited != data
    path.write_bytes(edited)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    again = invoke(*stat_args, "--resume", "--verify")
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    assert doc["decisions"].get("reused", 0) < sum(doc["decisions"].values())
    # the digest recorded anew: the next stat-mode resume trusts it and reuses everything
    last = invoke(*stat_args, "--resume")
    assert last.exit_code == 0, last.output
    assert set(json.loads(last.stdout)["decisions"]) == {"reused"}


# --- inputs a resume does not read (docs/internals.md "Inputs a resume does not read")


def _spy_opens(monkeypatch: pytest.MonkeyPatch, under: Path) -> list[str]:
    """Paths under `under` opened in this process (builtins.open and os.open)."""
    import builtins

    opened: list[str] = []
    real_open, real_os_open = builtins.open, os.open
    prefix = str(under.resolve())

    def spy_open(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        if isinstance(file, (str, os.PathLike)) and os.fspath(file).startswith(prefix):
            opened.append(os.fspath(file))
        return real_open(file, *args, **kwargs)

    def spy_os_open(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if isinstance(path, (str, os.PathLike)) and os.fspath(path).startswith(prefix):
            opened.append(os.fspath(path))
        return real_os_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(os, "open", spy_os_open)
    return opened


def _trust_recorded_stats(cache: Path) -> None:
    """As if the stat rows were recorded long after the files' last change (not racy)."""
    import sqlite3
    import time

    with sqlite3.connect(cache / "inputs.sqlite") as db:
        db.execute("UPDATE inputs SET recorded_ns = ?", (time.time_ns() + 10**11,))


def test_a_stat_mode_no_op_resume_opens_no_input_file(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = [*_terms_project(tmp_path, docs=3), "--input-check", "stat"]
    cold = invoke(*args)
    assert cold.exit_code == 0, cold.output
    _trust_recorded_stats(tmp_path / "cache")
    opened = _spy_opens(monkeypatch, tmp_path / "docs")
    again = invoke(*args, "--resume")
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    assert set(doc["decisions"]) == {"reused"}
    assert opened == []
    assert _artifacts(doc) == _artifacts(json.loads(cold.stdout))


def test_a_stat_mode_resume_reads_only_the_input_whose_extract_executes(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from support.cache_entries import checkpoints

    args = [*_terms_project(tmp_path, docs=3), "--input-check", "stat"]
    cold = invoke(*args)
    assert cold.exit_code == 0, cold.output
    _trust_recorded_stats(tmp_path / "cache")
    extracts = checkpoints(
        tmp_path / "cache", "workspaces/floor/steps/terms/*docs__d2.md*/extract/*"
    )
    extracts[len(extracts) // 2].unlink()
    opened = _spy_opens(monkeypatch, tmp_path / "docs")
    again = invoke(*args, "--resume")
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    assert doc["decisions"]["checkpoint_missing"] == 1
    assert [Path(p).name for p in opened] == ["d2.md"]
    assert _artifacts(doc) == _artifacts(json.loads(cold.stdout))


# --- block summaries repeated without reading their source run ("Block summaries")


def _types(invoke, out: Path, run_id: str) -> list[str]:
    shown = invoke("journal", "show", run_id, "--output-root", str(out), "--json")
    assert shown.exit_code == 0, shown.output
    return [e["type"] for e in json.loads(shown.stdout)["events"]]


def _blocks(invoke, out: Path, run_id: str) -> list[dict]:
    shown = invoke("journal", "show", run_id, "--output-root", str(out), "--json")
    assert shown.exit_code == 0, shown.output
    return [e["data"] for e in json.loads(shown.stdout)["events"] if e["type"] == "EventsReused"]


def test_a_no_op_resume_after_a_no_op_resume_repeats_its_blocks_without_reading_their_source(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runjournal.adapters.journal.reuse import BlockIndex

    args = _terms_project(tmp_path, docs=4)
    cold = invoke(*args)
    assert cold.exit_code == 0, cold.output
    first = invoke(*args, "--resume")  # blocks naming the cold run (its plans: its own)
    assert first.exit_code == 0, first.output
    loads: list[str] = []
    real_load = BlockIndex._load

    def counting(self):  # type: ignore[no-untyped-def]
        loads.append("source runs read")
        return real_load(self)

    monkeypatch.setattr(BlockIndex, "_load", counting)
    runs = [json.loads(first.stdout)["run_id"]]
    for _ in range(2):
        again = invoke(*args, "--resume")
        assert again.exit_code == 0, again.output
        doc = json.loads(again.stdout)
        assert set(doc["decisions"]) == {"reused"} and doc["internal_error"] is None
        runs.append(doc["run_id"])
    # the units found among the earlier run's own, or as its blocks: no source run read
    assert loads == []
    out = tmp_path / "out"
    keys = ("kind", "step", "first", "units", "count", "digest", "source_run")
    second, third = ([{k: b[k] for k in keys} for b in _blocks(invoke, out, r)] for r in runs[1:])
    assert second and third == second
    assert {b["kind"] for b in third} == {"inputs", "plans", "lanes", "outputs"}
    for run in runs:
        audit = invoke("journal", "audit", run, "--output-root", str(out))
        assert audit.exit_code == 0, audit.output


def test_a_resume_after_an_edit_still_finds_the_units_one_by_one(invoke, tmp_path: Path) -> None:
    args = _terms_project(tmp_path, docs=4)
    cold = invoke(*args)
    assert cold.exit_code == 0, cold.output
    assert invoke(*args, "--resume").exit_code == 0
    path = tmp_path / "docs" / "d1.md"
    path.write_text(path.read_text() + "\nA **new term** appears in one more paragraph.\n")
    edited = invoke(*args, "--resume")
    assert edited.exit_code == 0, edited.output
    doc = json.loads(edited.stdout)
    assert doc["internal_error"] is None and set(doc["decisions"]) != {"reused"}
    again = invoke(*args, "--resume")
    assert again.exit_code == 0, again.output
    assert set(json.loads(again.stdout)["decisions"]) == {"reused"}
    for run in (doc["run_id"], json.loads(again.stdout)["run_id"]):
        audit = invoke("journal", "audit", run, "--output-root", str(tmp_path / "out"))
        assert audit.exit_code == 0, audit.output


# --- `run`'s manifest check of a resume journaled as summaries ("Block summaries")


def _spy_read_back(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The runs whose events were read back with their summaries expanded from the runs
    they name (`JournalStore.projected_events`: what the manifest check read back)."""
    from runjournal.adapters.journal.store import JournalStore

    read: list[str] = []
    real = JournalStore.projected_events

    def counting(self, run_id):  # type: ignore[no-untyped-def]
        read.append(run_id)
        return real(self, run_id)

    monkeypatch.setattr(JournalStore, "projected_events", counting)
    return read


@pytest.mark.parametrize("blocks", [True, False], ids=["block-summaries", "lane-summaries"])
def test_a_no_op_resume_checks_its_manifest_without_reading_the_earlier_run_back(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, blocks: bool
) -> None:
    args = _terms_project(tmp_path, docs=4)
    if not blocks:
        args.append("--no-block-summary")
    cold = invoke(*args)
    assert cold.exit_code == 0, cold.output
    runs = []
    for _ in range(2):  # blocks naming the cold run, then blocks repeated
        read = _spy_read_back(monkeypatch)
        again = invoke(*args, "--resume")
        assert again.exit_code == 0, again.output
        doc = json.loads(again.stdout)
        assert set(doc["decisions"]) == {"reused"} and doc["internal_error"] is None
        assert read == []  # the check folded the summaries from what the session applied
        runs.append(doc["run_id"])
        monkeypatch.undo()
    out = tmp_path / "out"
    kinds = {b["kind"] for b in _blocks(invoke, out, runs[-1])}
    assert kinds == ({"inputs", "plans", "lanes", "outputs"} if blocks else set())
    assert blocks or "LaneReused" in _types(invoke, out, runs[-1])
    for run in runs:  # the audit still expands every summary from the run it names
        audit = invoke("journal", "audit", run, "--output-root", str(out))
        assert audit.exit_code == 0, audit.output


def _journal_fold(out: Path, run_id: str) -> bytes:
    """The journal's fold of a run as `manifest.json` bytes, its summaries expanded from the
    runs they name (what `projections rebuild manifest` writes)."""
    from runjournal.adapters.journal import open_journal
    from runjournal.cli.output import json_bytes
    from runjournal.projections.base import fold
    from runjournal.projections.manifest import ManifestProjection

    with open_journal(str(out / "journal.sqlite3")) as store:
        return json_bytes(fold(ManifestProjection(), store.projected_events(run_id)).view())


def _internal_error(result, out: Path) -> dict:
    """A run that exited 70 with its manifest rewritten from the journal's fold."""
    assert result.exit_code == 70, result.output
    doc = json.loads(result.stdout)
    assert doc["status"] == "succeeded" and set(doc["decisions"]) == {"reused"}
    assert "manifest.json was rewritten from the journal" in doc["internal_error"]
    assert Path(doc["manifest"]).read_bytes() == _journal_fold(out, doc["run_id"])
    return doc


def test_a_no_op_resume_whose_manifest_disagrees_is_still_rewritten_and_exits_70(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runjournal.projections.manifest import ManifestProjection

    class Lossy(ManifestProjection):  # a live fold with a bug: it drops every decision
        def decided(self, event):  # type: ignore[no-untyped-def]
            return

    args = _terms_project(tmp_path, docs=4)
    assert invoke(*args).exit_code == 0
    assert invoke(*args, "--resume").exit_code == 0  # the next one repeats its blocks
    read = _spy_read_back(monkeypatch)
    monkeypatch.setattr("runjournal.cli.compose.ManifestProjection", Lossy)
    result = invoke(*args, "--resume")
    assert read == []  # found, and rewritten, from the committed fold
    doc = _internal_error(result, tmp_path / "out")
    assert "lanes" in {b["kind"] for b in _blocks(invoke, tmp_path / "out", doc["run_id"])}


def test_a_block_whose_listeners_got_other_events_than_its_units_is_an_internal_error(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recorder bug that hands the live views other events than a block's units: the
    committed fold builds the block's events from its units (whose digests are the
    block's), so it differs from the live manifest that folded the others, which is
    rewritten from it without reading the run back (exit 70; docs/internals.md "A summary
    applied as a count")."""
    import msgspec
    from runjournal.domain.events import LaneResolved
    from runjournal.domain.run import Run

    args = _terms_project(tmp_path, docs=4)
    assert invoke(*args).exit_code == 0
    real = Run.record_block_reuse

    def tampering(self, **kwargs):  # type: ignore[no-untyped-def]
        summary, expanded = real(self, **kwargs)
        for i, event in enumerate(expanded):
            if type(event) is LaneResolved:
                expanded[i] = msgspec.structs.replace(
                    event, lane_identity="not-" + event.lane_identity
                )
                break
        return summary, expanded

    monkeypatch.setattr(Run, "record_block_reuse", tampering)
    read = _spy_read_back(monkeypatch)
    result = invoke(*args, "--resume")
    assert read == []
    doc = _internal_error(result, tmp_path / "out")
    monkeypatch.undo()
    audit = invoke("journal", "audit", doc["run_id"], "--output-root", str(tmp_path / "out"))
    assert audit.exit_code == 0, audit.output  # the journal itself was right
