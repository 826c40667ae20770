"""`journal audit|export|import` and `projections status|rebuild`, end to end.

One history of real runs of a small two-step pipeline (cold, resume, changed input,
failed, recompute) per backend, made once through the installed console script, on
SQLite and on PostgreSQL when RUNJOURNAL_TEST_POSTGRES_URL is set; two concurrent runs
need PostgreSQL. The error matrices and a projection version bump run in-process through
click's CliRunner in tests/cli/test_journal_cmds.py.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from eventsourcing.persistence import StoredEvent
from runjournal.adapters.journal import EventMapper, open_journal
from runjournal.domain.events import EventsReused, LaneReused, StageDecided
from runjournal.domain.reasons import Category, ReasonCode
from runjournal.domain.run import run_aggregate_id
from support import synthetic as syn
from support.console import CLI as Console
from support.inprocess import InProcess, one_error_line
from support.paths import FIXTURES
from support.v1_journal import COLD, RESUME

PLUGIN = """
import os
import time
from runjournal.domain.modules import Module, Normalized

class Words(Module):
    name = "test.words"
    fingerprint = "test.words/1"
    artifact_kind = "words"
    schema = "test.words/v1"
    chunk_type = list[str]
    merged_type = list[str]
    artifact_type = list[str]

    def extract(self, chunk, ctx):
        time.sleep(float(os.environ.get("RJ_TEST_SLEEP", "0")))
        gate, deadline = os.environ.get("RJ_TEST_GATE"), time.monotonic() + 60
        while gate and not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.02)  # held until the test opens the gate
        if ctx.overrides.get("fail") == ctx.lane:
            raise RuntimeError("asked to fail")
        return sorted({w.strip(".,").lower() for w in chunk.text.split()})

    def merge(self, parts, ctx):
        return sorted({w for p in parts for w in p})

    def normalize(self, merged, ctx):
        return Normalized(merged)

class Count(Module):
    name = "test.count"
    fingerprint = "test.count/1"
    artifact_kind = "count"
    schema = "test.count/v1"
    chunk_type = int
    merged_type = int
    artifact_type = dict[str, int]

    def extract(self, chunk, ctx):
        return 1

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized({lane: len(v) for lane, v in sorted(ctx.consumed["words"].items())})
"""

PIPELINE = """
name = "audited"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 40
[[steps]]
id = "words"
module = "plugins/words.py:Words"
[[steps]]
id = "count"
module = "plugins/words.py:Count"
scope = "corpus"
consumes = ["words"]
"""

DOCS = {
    "a.md": "Alpha beta gamma.\n\nDelta epsilon zeta.\n\nEta theta iota.\n",
    "b.md": "Kappa lambda mu.\n\nNu xi omicron.\n",
}


class Project:
    """A pipeline on disk plus the roots and journal URL its runs use."""

    def __init__(self, root: Path, console: Console, journal: str | None = None) -> None:
        self.root = root
        self.console = console
        (root / "docs").mkdir(parents=True)
        (root / "plugins").mkdir()
        for name, text in DOCS.items():
            (root / "docs" / name).write_text(text)
        (root / "plugins" / "words.py").write_text(PLUGIN)
        (root / "pipeline.toml").write_text(PIPELINE)
        self.out = root / "out"
        self.cache = root / "cache"
        self.journal = journal

    def where(self) -> list[str]:
        return ["--output-root", str(self.out)] + (
            ["--journal", self.journal] if self.journal else []
        )

    def run_args(self, *extra: str) -> list[str]:
        pipeline = str(self.root / "pipeline.toml")
        roots = ["--cache-root", str(self.cache), *self.where()]
        return ["run", pipeline, "--no-progress", "--json", *roots, *extra]

    def run(self, *extra: str, expect: int = 0) -> dict[str, Any]:
        proc = self.console(*self.run_args(*extra))
        assert proc.returncode == expect, proc.stderr
        return dict(json.loads(proc.stdout))

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.console(*args, *self.where())


@dataclass
class History:
    project: Project
    runs: dict[str, dict[str, Any]]  # label -> `run --json` document


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def history(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[History]:
    tmp = tmp_path_factory.mktemp(f"history-{request.param}")
    console = Console(tmp / "home")
    with contextlib.ExitStack() as stack:
        url = None
        if request.param == "postgres":
            url = stack.enter_context(syn.backend("postgres", tmp))
        project = Project(tmp / "p", console, url)
        runs = {"cold": project.run(), "resume": project.run("--resume", "--no-block-summary")}
        runs["blocks"] = project.run("--resume")  # block summaries (the default)
        (project.root / "docs" / "b.md").write_text(DOCS["b.md"] + "\nRho sigma tau.\n")
        runs["changed"] = project.run("--resume")
        runs["failed"] = project.run("--resume", "--set", "fail=docs/a.md", expect=1)
        runs["recompute"] = project.run("--recompute", "count")
        yield History(project, runs)


@pytest.fixture
def console(tmp_path: Path) -> Console:
    return Console(tmp_path / "home")


# --- audit -------------------------------------------------------------------------


def test_real_runs_audit_clean(history: History) -> None:
    project, codes = history.project, set()
    for doc in history.runs.values():
        proc = project("journal", "audit", doc["run_id"], "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        audit = json.loads(proc.stdout)
        assert audit["verdict"] == "ok" and audit["differences"] == audit["violations"] == []
        # decisions whose stage never started (a failed run stopped first) count apart
        never = doc.get("not_started", {})
        assert audit["decisions"] == sum(doc["decisions"].values()) + sum(never.values())
        codes |= set(doc["decisions"])
    assert {
        "not_resumed",
        "reused",
        "input_changed",
        "overrides_changed",
        "stage_failed",
        "forced_recompute",
        "predecessor_reused",
    } <= codes
    run_id = history.runs["failed"]["run_id"]
    proc = project("journal", "audit", run_id)
    assert proc.returncode == 0 and proc.stdout.startswith(f"run {run_id}: ok (")
    assert proc.stderr == ""


def sqlite_copy(project: Project, tmp_path: Path) -> Path:
    """A SQLite copy of the project's journal (a PostgreSQL one is copied event by event)."""
    copy = tmp_path / "copy.sqlite3"
    if not project.journal:
        with sqlite3.connect(project.out / "journal.sqlite3") as src, sqlite3.connect(copy) as dst:
            src.backup(dst)
        return copy
    with open_journal(project.journal) as src, open_journal(str(copy)) as dst:
        for run in src.list_runs():
            dst.append_events(run.run_id, list(src.events(run.run_id)))
    return copy


def tamper(copy: Path, run_id: str) -> StageDecided:
    """Make the first `reused` decision of `run_id` in `copy` say not_resumed."""
    return rewrite_first(
        copy,
        run_id,
        lambda event: (
            msgspec.structs.replace(event, code=ReasonCode.NOT_RESUMED, category=Category.EXECUTION)
            if isinstance(event, StageDecided) and event.code is ReasonCode.REUSED
            else None
        ),
    )


def rewrite_first(copy: Path, run_id: str, change: Any) -> Any:
    """Replace the first event of `run_id` in `copy` that `change` gives a replacement
    for (its row written again, unchained); returns the original event."""
    mapper = EventMapper()
    aggregate = run_aggregate_id(run_id)
    with sqlite3.connect(copy) as db:
        rows = db.execute(
            "SELECT originator_version, topic, state FROM stored_events "
            "WHERE originator_id = ? ORDER BY originator_version",
            (aggregate.hex,),
        ).fetchall()
        for version, topic, state in rows:
            # A packed row holds several decisions (docs/internals.md "Packed rows").
            events = mapper.to_domain_events(StoredEvent(aggregate, version, topic, state))
            for i, event in enumerate(events):
                changed = change(event)
                if changed is not None:
                    events[i] = changed
                    db.execute(
                        "DELETE FROM stored_events "
                        "WHERE originator_id = ? AND originator_version = ?",
                        (aggregate.hex, version),
                    )
                    for row in mapper.to_stored_rows(events, None)[0]:
                        db.execute(
                            "INSERT INTO stored_events VALUES (?, ?, ?, ?)",
                            (aggregate.hex, row.originator_version, row.topic, row.state),
                        )
                    return event
    raise AssertionError("nothing to tamper with")


@pytest.mark.parametrize("summary", [LaneReused, EventsReused])
def test_a_reuse_summary_that_does_not_match_its_source_fails_in_one_line(
    history: History, tmp_path: Path, summary: type
) -> None:
    """A no-op resume journals each lane as one `LaneReused` (docs/internals.md "Reuse
    summaries"), or its units as block summaries ("Block summaries"): a summary whose
    digest no longer matches the events of the run it names is refused by every reader
    of the decisions, in one line, exit 1."""
    project = history.project
    run_id = history.runs["resume" if summary is LaneReused else "blocks"]["run_id"]
    copy = sqlite_copy(project, tmp_path)
    original = rewrite_first(
        copy,
        run_id,
        lambda e: msgspec.structs.replace(e, digest="0" * 64) if type(e) is summary else None,
    )
    for args in (("journal", "audit", run_id), ("explain", run_id), ("runs", "show", run_id)):
        proc = project.console(*args, "--journal", str(copy))
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        line = one_error_line(proc.stderr)
        named = f"lane {original.lane!r}" if summary is LaneReused else "block summary of"
        assert named in line and "does not match" in line, line
    assert project("journal", "audit", run_id).returncode == 0  # the original is intact


def test_a_tampered_journal_copy_fails_the_audit_and_names_the_decision(
    history: History, tmp_path: Path
) -> None:
    project = history.project
    # a run with explicit reuse decisions: a no-op resume journals summaries instead
    run_id = history.runs["changed"]["run_id"]
    copy = sqlite_copy(project, tmp_path)
    original = tamper(copy, run_id)
    proc = project.console("journal", "audit", run_id, "--journal", str(copy))
    assert proc.returncode == 1
    assert proc.stdout.startswith(f"run {run_id}: different (")
    chunk = f" chunk {original.chunk[:12]}" if original.chunk else ""
    assert (
        f"  event {original.originator_version}: step '{original.step}' lane "
        f"'{original.lane}' {original.stage.value}{chunk}: recorded not_resumed, "
        "re-decided reused"
    ) in proc.stdout
    assert "1 difference(s)" in one_error_line(proc.stderr)
    proc = project.console("journal", "audit", run_id, "--json", "--journal", str(copy))
    doc = json.loads(proc.stdout)
    assert doc["verdict"] == "different"
    assert doc["differences"] == [
        {
            "version": original.originator_version,
            "step": original.step,
            "lane": original.lane,
            "stage": original.stage.value,
            "chunk": original.chunk or None,
            "recorded": "not_resumed",
            "redecided": "reused",
            "problem": "code",
            "detail": "recorded not_resumed, the facts decide reused",
        }
    ]
    assert project("journal", "audit", run_id).returncode == 0  # the original is intact


def test_audit_errors_are_one_line(tmp_path: Path, console: Console, invoke: InProcess) -> None:
    proc = console("journal", "audit", "latest", "--output-root", str(tmp_path / "none"))
    assert proc.returncode == 2 and "no journal at" in one_error_line(proc.stderr)
    out = tmp_path / "out"
    syn.synthetic_journal(out)
    result = invoke("journal", "audit", "nope", "--output-root", str(out))
    assert result.exit_code == 1 and "no run matches" in one_error_line(result.stderr)


# --- projections -------------------------------------------------------------------


def test_rebuilt_manifests_equal_the_live_ones(history: History) -> None:
    project = history.project
    manifests = {
        doc["run_id"]: project.out / doc["run_id"] / "manifest.json"
        for doc in history.runs.values()
    }
    live = {run_id: path.read_bytes() for run_id, path in manifests.items()}
    status = json.loads(project("projections", "status", "--json").stdout)["projections"]
    by_name = {p["name"]: p for p in status}
    assert by_name["manifest"]["stale"] is False
    assert by_name["manifest"]["views"] == len(live)
    run_id = history.runs["changed"]["run_id"]
    proc = project("projections", "rebuild", "manifest", "--run", run_id)
    assert proc.returncode == 0, proc.stderr
    assert manifests[run_id].read_bytes() == live[run_id]
    proc = project("projections", "rebuild")
    assert proc.returncode == 0, proc.stderr
    assert {run_id: path.read_bytes() for run_id, path in manifests.items()} == live
    status = json.loads(project("projections", "status", "--json").stdout)["projections"]
    assert not any(p["stale"] for p in status)
    name = f".runjournal/views/reasons.v2/{run_id}.json"
    if project.journal is None:
        reasons = json.loads((project.out / name).read_text())
    else:  # a PostgreSQL journal's views are rows of its database (issue 16)
        assert not (project.out / ".runjournal/views").exists()
        assert not (project.out / ".runjournal/projections.json").exists()
        store = open_journal(project.journal)
        try:
            table = store.views_table()
            assert table is not None
            reasons = json.loads(table.read_bytes(name))
        finally:
            store.close()
    assert reasons["view"] == json.loads(project("explain", run_id, "--json").stdout)


# --- export / import ---------------------------------------------------------------


def test_export_import_round_trip_is_byte_identical(history: History, tmp_path: Path) -> None:
    project = history.project
    run_id = history.runs["changed"]["run_id"]
    export = tmp_path / "run.rjx"
    proc = project("journal", "export", run_id, "-o", str(export), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["run_id"] == run_id and doc["file"] == str(export)
    assert export.read_bytes()[:8] == b"RJEXPORT"
    original = project("journal", "show", run_id, "--json").stdout
    with contextlib.ExitStack() as stack:
        # Into the other backend where there is one: SQLite -> PostgreSQL and back.
        target = ["--output-root", str(tmp_path / "elsewhere")]
        if syn.PG_URL and not project.journal:
            target = ["--journal", stack.enter_context(syn.backend("postgres", tmp_path))]
        proc = project.console("journal", "import", str(export), *target)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == f"imported run {run_id}: {doc['events']} events"
        shown = project.console("journal", "show", run_id, "--json", *target).stdout
        assert shown == original
        proc = project.console("journal", "import", str(export), "--json", *target)
        assert proc.returncode == 0
        assert json.loads(proc.stdout)["status"] == "already_imported"
    # Into the journal it came from: the same events, so harmless too.
    proc = project("journal", "import", str(export))
    assert proc.returncode == 0 and "already imported" in proc.stdout


# --- the committed v1 journal through the CLI --------------------------------------


def test_v1_fixture_journal_through_the_cli(console: Console, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    shutil.copyfile(FIXTURES / "journal-v1.sqlite3", out / "journal.sqlite3")
    where = ["--output-root", str(out)]
    for run_id in (COLD, RESUME):
        proc = console("journal", "audit", run_id, *where)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    shown = json.loads(console("journal", "show", RESUME, "--json", *where).stdout)["events"]
    lanes = [e for e in shown if e["type"] == "LaneResolved"]
    assert lanes and all(e["class_version"] == 2 and e["data"]["forced"] is False for e in lanes)
    expected = json.loads((FIXTURES / "journal-v1.expected.json").read_text())
    assert json.loads(console("runs", "show", RESUME, "--json", *where).stdout) == expected[RESUME]
    proc = console("projections", "rebuild", *where)
    assert proc.returncode == 0, proc.stderr  # run dirs are elsewhere: manifests skipped


# --- PostgreSQL: two runs at the same time -----------------------------------------


def test_two_runs_write_to_one_postgres_journal_at_the_same_time(
    tmp_path: Path, console: Console
) -> None:
    with syn.backend("postgres", tmp_path) as url:
        # The shared journal is set up once, as a team would before pointing runs at it.
        assert console("runs", "list", "--journal", url).returncode == 0
        first, second = (Project(tmp_path / f"p{i}", console, url) for i in range(2))
        slow = {"RJ_TEST_SLEEP": "0.25"}  # five chunks: each run executes for over a second
        # The first run's extracts wait at a gate until the second run is allocated, so the
        # two overlap however slowly the second process starts on a loaded machine.
        gate = tmp_path / "gate"
        a = console.start(*first.run_args(), env={**slow, "RJ_TEST_GATE": str(gate)})
        with open_journal(url) as store:
            deadline = time.monotonic() + 60
            while not store.list_runs():  # the first run is allocated and executing
                assert time.monotonic() < deadline and a.poll() is None
                time.sleep(0.02)
            b = console.start(*second.run_args(), env=slow)
            while len(store.list_runs()) < 2:  # the second run is allocated too
                assert time.monotonic() < deadline and a.poll() is None and b.poll() is None
                time.sleep(0.02)
            gate.touch()
            results = [p.communicate(timeout=120) for p in (a, b)]
            assert [a.returncode, b.returncode] == [0, 0], [err for _, err in results]
            ids = [json.loads(out)["run_id"] for out, _ in results]
            listed = {r.run_id: r for r in store.list_runs()}
            assert sorted(listed) == sorted(ids)
            assert all(r.status.value == "succeeded" for r in listed.values())
            # Their writing overlapped: the second was allocated before the first ended.
            first_run, second_run = listed[ids[0]], listed[ids[1]]
            assert first_run.ended is not None and second_run.started < first_run.ended
        shown = json.loads(console("runs", "list", "--json", "--journal", url).stdout)["runs"]
        assert sorted(r["run_id"] for r in shown) == sorted(ids)
        for run_id in ids:
            assert console("journal", "audit", run_id, "--journal", url).returncode == 0


def test_opening_one_postgres_journal_from_many_places_at_once(tmp_path: Path) -> None:
    """Opens are serialized by an advisory lock, so concurrent opens never collide."""
    with syn.backend("postgres", tmp_path) as url:
        open_journal(url).close()
        errors: list[str] = []

        def open_once(barrier: threading.Barrier) -> None:
            barrier.wait()
            try:
                open_journal(url).close()
            except Exception as exc:
                errors.append(str(exc))

        for _ in range(10):
            barrier = threading.Barrier(4)
            threads = [threading.Thread(target=open_once, args=(barrier,)) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            assert errors == []
