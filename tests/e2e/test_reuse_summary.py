"""Reuse summaries (docs/internals.md "Reuse summaries"): a no-op resume journals each fully
reused lane as one `LaneReused`, and every reader sees the same per-stage facts as when
each decision was its own event.

The glossary example (five steps, document and corpus lanes, a consumer step) is run
cold, then resumed twice without changing anything: once the old way
(`--no-reuse-summary`, every decision its own `StageDecided`), once the new way. The two
resumes made the same decisions, so every projection of them must agree once what
differs between any two runs (run id, times, pid, the one setting) is set aside.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from runjournal.adapters.journal.application import open_journal
from runjournal.domain.events import (
    ArtifactGenerated,
    ChunkPlanResolved,
    ConfigurationResolved,
    EventsReused,
    InputsFingerprinted,
    LaneResolved,
    LaneReused,
    LLMCallAttempted,
    LLMUsageReused,
    OutputWritten,
    RunAllocated,
    RunEvent,
    StageDecided,
)
from runjournal.projections.base import fold
from runjournal.projections.debug_summary import DebugSummaryProjection
from runjournal.projections.html_render import render_report_html
from runjournal.projections.html_report import HtmlReportProjection
from runjournal.projections.lineage import lineage_of
from runjournal.projections.llm_retries import RetryFold
from runjournal.projections.llm_usage import LLMUsageFold
from runjournal.projections.manifest import ManifestProjection
from runjournal.projections.otel_trace import trace_of
from runjournal.projections.reasons_report import ReasonReportProjection
from runjournal.projections.report import ReportProjection
from runjournal.projections.run_facts import RunFactsProjection
from support import synthetic as syn
from support.console import CLI
from support.llm_servers import ASK_PIPELINE, ASK_SCHEMA, start_fake
from support.paths import EXAMPLE

# the events of the units a block summary stands for (docs/internals.md "Block summaries")
_UNIT_EVENTS = (
    LaneResolved,
    StageDecided,
    ArtifactGenerated,
    ChunkPlanResolved,
    OutputWritten,
    InputsFingerprinted,
)
ISO = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(\+00:00|Z)?")


class Runs(msgspec.Struct):
    cli: Any
    project: Path
    out: Path
    journal: str  # the journal's URL: SQLite, or a fresh PostgreSQL schema
    cold: str
    old: str  # no-op resume, every decision its own event
    new: str  # no-op resume with reuse summaries
    again: str  # and another: its summaries name the run whose decisions are explicit
    blocks: str = ""  # no-op resume with block summaries (the default)
    blocks_again: str = ""  # and another: its blocks name the run where the units are

    def run(self, *extra: str) -> str:
        proc, doc = self.cli.json(
            "run",
            str(self.project / "pipeline.toml"),
            "--output-root",
            str(self.out),
            "--cache-root",
            str(self.project / "cache"),
            "--journal",
            self.journal,
            "--report",
            *extra,
        )
        assert proc.returncode == 0, proc.stderr
        return doc["run_id"]

    def json(self, *args: str) -> dict:
        proc, doc = self.cli.json(*args, "--output-root", str(self.out), "--journal", self.journal)
        assert proc.returncode == 0, proc.stderr
        return doc

    def raw(self, run_id: str) -> list[RunEvent]:
        with open_journal(self.journal, read_only=True) as store:
            return list(store.events(run_id))

    def projected(self, run_id: str) -> list[RunEvent]:
        with open_journal(self.journal, read_only=True) as store:
            return list(store.projected_events(run_id))


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Runs]:
    base = tmp_path_factory.mktemp(f"reuse-summary-{request.param}")
    project = base / "glossary"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    with syn.backend(request.param, base) as url:
        r = Runs(CLI(base / "home"), project, base / "out", url, "", "", "", "")
        r.cold = r.run()
        r.old = r.run("--resume", "--no-reuse-summary")
        r.new = r.run("--resume", "--no-block-summary")
        r.again = r.run("--resume", "--no-block-summary")
        r.blocks = r.run("--resume")
        r.blocks_again = r.run("--resume")
        yield r


def _same_run(events: list[RunEvent], like: list[RunEvent]) -> list[RunEvent]:
    """`events` as if recorded by the run of `like`: its id, allocation and settings, and
    one time for every event (what differs between any two runs of one pipeline)."""
    origin = like[0].originator_id
    moment = like[0].timestamp
    alloc = next(e for e in like if type(e) is RunAllocated)
    config = next(e for e in like if type(e) is ConfigurationResolved)
    out: list[RunEvent] = []
    for event in events:
        if type(event) is RunAllocated:
            event = msgspec.structs.replace(alloc, originator_version=event.originator_version)
        elif type(event) is ConfigurationResolved:
            event = msgspec.structs.replace(config, originator_version=event.originator_version)
        out.append(msgspec.structs.replace(event, originator_id=origin, timestamp=moment))
    return out


def _content(event: RunEvent) -> tuple[str, dict]:
    fields = msgspec.to_builtins(event)
    for name in ("originator_id", "originator_version", "timestamp"):
        fields.pop(name)
    return type(event).__name__, fields


def _normal(value: Any, runs: Runs) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    for run_id in (runs.old, runs.new, runs.again, runs.blocks, runs.blocks_again):
        if run_id:
            text = text.replace(run_id, "RUN")
    return ISO.sub("T", text)


# --- what is journaled ----------------------------------------------------------------


def test_a_no_op_resume_journals_one_summary_per_lane(runs: Runs) -> None:
    old, new = runs.raw(runs.old), runs.raw(runs.new)
    lanes = [e for e in new if type(e) is LaneResolved]
    summaries = [e for e in new if type(e) is LaneReused]
    assert not [e for e in new if type(e) is StageDecided]
    assert [(s.step, s.lane) for s in summaries] == [(e.step, e.lane) for e in lanes]
    decided = [e for e in old if type(e) is StageDecided]
    assert sum(s.count for s in summaries) == len(decided) > len(summaries)
    # every summary names a run whose decisions are explicit (never another summary)
    assert {s.source_run for s in summaries} == {runs.old}
    again = [e for e in runs.raw(runs.again) if type(e) is LaneReused]
    assert {s.source_run for s in again} == {runs.old}
    assert [(s.digest, s.count) for s in again] == [(s.digest, s.count) for s in summaries]


def test_the_expanded_run_is_the_run_journaled_the_old_way(runs: Runs) -> None:
    old = runs.raw(runs.old)
    new = [e for e in runs.projected(runs.new) if type(e) is not LaneReused]
    assert len(new) == len(old)
    assert [_content(e) for e in _same_run(new, old)] == [_content(e) for e in old]
    # each expanded decision carries its summary's version and time
    projected = runs.projected(runs.new)
    for i, event in enumerate(projected):
        if type(event) is LaneReused:
            for decision in projected[i + 1 : i + 1 + event.count]:
                assert type(decision) is StageDecided
                assert decision.originator_version == event.originator_version
                assert decision.timestamp == event.timestamp


# --- every projection ------------------------------------------------------------------


def _spans(events: list[RunEvent]) -> list[tuple]:
    """The trace's spans by name, attributes, parent's name and times (span ids are made
    of event versions, which a summary's decisions share)."""
    trace = trace_of(events)
    assert trace is not None
    names = {span.span_id: span.name for span in trace.spans}
    return sorted(
        (
            s.name,
            names.get(s.parent_id or b"", ""),
            json.dumps(dict(s.attributes), sort_keys=True, default=str),
            s.start_ns,
            s.end_ns,
            s.error,
        )
        for s in trace.spans
    )


PROJECTIONS = {
    "manifest": lambda ev: fold(ManifestProjection(), ev).view(),
    "report": lambda ev: fold(ReportProjection(), ev).view(),
    "reasons": lambda ev: fold(ReasonReportProjection(None), ev).view(),
    "debug_summary": lambda ev: fold(DebugSummaryProjection(), ev).view(),
    "run_facts": lambda ev: fold(RunFactsProjection(), ev).view(),
    "llm_usage": lambda ev: fold(LLMUsageFold(), ev).view(),
    "llm_retries": lambda ev: fold(
        RetryFold(), [e for e in ev if type(e) is LLMCallAttempted]
    ).view(),
    "html_report": lambda ev: _without_counts(
        render_report_html(fold(HtmlReportProjection(), ev).view())
    ),
    "otel_trace": _spans,
    "lineage": lambda ev: [msgspec.to_builtins(r) for r in lineage_of(ev)],
}


def _without_counts(page: str) -> str:
    # the page tells how many events the journal holds (its head, for staleness, and its
    # footer): fewer with summaries, and not a stage fact
    page = re.sub(r'<meta name="runjournal-events" content="\d+">', "", page)
    return re.sub(r"journal: \d+ events", "journal: N events", page)


@pytest.mark.parametrize("name", sorted(PROJECTIONS))
def test_every_projection_sees_the_same_stages(runs: Runs, name: str) -> None:
    old = runs.raw(runs.old)
    new = _same_run(runs.projected(runs.new), old)
    view = PROJECTIONS[name]
    assert _normal(view(new), runs) == _normal(view(_same_run(old, old)), runs)


# --- lanes whose checkpoints cost LLM calls -----------------------------------------------

LLM_PROFILE = """
[profiles.fake]
provider = "openai"
model = "fake-model"
base_url = "{url}"
api_key_env = "RJ_FAKE_KEY"
read_timeout = 5
prices = {{ input_per_million = 1.0, output_per_million = 2.0 }}
"""
LLM_DOCS = {
    "a.md": "Alpha paragraph one, about apples.\n\nAlpha paragraph two, about apricots.\n",
    "b.md": "Beta first paragraph, bananas.\n\nBeta second one, blueberries.\n",
}


def test_a_lane_of_llm_stages_is_summarized_with_its_reused_usage(tmp_path: Path, cli: CLI) -> None:
    """A reused checkpoint that cost LLM calls journals its usage (`LLMUsageReused`) after
    its decision. From the first no-op resume on the lane is one summary: the run that
    executed it is named, its attempts standing for the usage its checkpoints record
    (`LaneItems`; the first resume journaled each decision and usage before), and the
    usage reads back as before."""
    project = tmp_path / "ask"
    (project / "docs").mkdir(parents=True)
    for name, text in LLM_DOCS.items():
        (project / "docs" / name).write_text(text)
    (project / "pipeline.toml").write_text(ASK_PIPELINE.format(schema=ASK_SCHEMA))
    out = tmp_path / "out"
    env = {"RJ_FAKE_KEY": "sk-" + "local-" + "x" * 24}
    with start_fake() as server:
        (project / "profiles.toml").write_text(LLM_PROFILE.format(url=server.url))

        def run(*extra: str) -> dict:
            proc, doc = cli.json(
                "run", str(project / "pipeline.toml"), "--output-root", str(out),
                "--cache-root", str(tmp_path / "cache"), "--profile", "fake",
                "--profiles-file", str(project / "profiles.toml"), *extra, env=env,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            return doc

        cold = run()
        asked = len(server.requests())
        first = run("--resume")
        new = run("--resume", "--no-block-summary")
        old = run("--resume", "--no-reuse-summary")
        blocked = run("--resume")
        assert len(server.requests()) == asked  # nothing asked again
    with open_journal(str(out / "journal.sqlite3"), read_only=True) as store:
        raw_first = list(store.events(first["run_id"]))
        projected_first = list(store.projected_events(first["run_id"]))
        raw_new = list(store.events(new["run_id"]))
        raw_old = list(store.events(old["run_id"]))
        projected = list(store.projected_events(new["run_id"]))
        raw_blocked = list(store.events(blocked["run_id"]))
        projected_blocked = list(store.projected_events(blocked["run_id"]))
    # the first resume: blocks naming the run that executed the lanes and made the plans
    # (its plans `[computed, published]`, the resume's `[reused]`), nothing explicit
    assert not [e for e in raw_first if type(e) in (*_UNIT_EVENTS, LLMUsageReused)]
    lane_blocks = [e for e in raw_first if type(e) is EventsReused and e.kind == "lanes"]
    assert lane_blocks and {b.source_run for b in lane_blocks} == {cold["run_id"]}
    expanded = [e for e in projected_first if type(e) is not EventsReused]
    assert [_content(e) for e in _same_run(expanded, raw_old)] == [_content(e) for e in raw_old]
    assert first["llm"] == old["llm"] and first["decisions"] == old["decisions"]
    summaries = [e for e in raw_new if type(e) is LaneReused]
    assert len(summaries) == 2 and {s.source_run for s in summaries} == {cold["run_id"]}
    assert not [e for e in raw_new if type(e) in (StageDecided, LLMUsageReused)]
    expanded = [e for e in projected if type(e) is not LaneReused]
    assert [_content(e) for e in _same_run(expanded, raw_old)] == [_content(e) for e in raw_old]
    assert new["llm"] == old["llm"] and new["llm"]["saved"]["calls"] == 4
    assert new["decisions"] == old["decisions"]
    ids = Runs(cli, project, out, "", "", old["run_id"], new["run_id"], "")
    for name, view in PROJECTIONS.items():
        a = _normal(view(_same_run(projected, raw_old)), ids)
        b = _normal(view(_same_run(raw_old, raw_old)), ids)
        assert a == b, name
    # as a block summary: the lanes, their usage and artifacts, the plans and outputs
    assert not [e for e in raw_blocked if type(e) in (*_UNIT_EVENTS, LLMUsageReused)]
    expanded = [e for e in projected_blocked if type(e) not in (LaneReused, EventsReused)]
    assert [_content(e) for e in _same_run(expanded, raw_old)] == [_content(e) for e in raw_old]
    assert blocked["llm"] == old["llm"] and blocked["decisions"] == old["decisions"]
    ids = Runs(cli, project, out, "", "", old["run_id"], blocked["run_id"], "")
    for name, view in PROJECTIONS.items():
        a = _normal(view(_same_run(projected_blocked, raw_old)), ids)
        b = _normal(view(_same_run(raw_old, raw_old)), ids)
        assert a == b, name


def test_the_commands_give_the_same_answers(runs: Runs) -> None:
    for args in (("explain",), ("runs", "show")):
        old = runs.json(*args, runs.old)
        new = runs.json(*args, runs.new)
        assert _normal(_no_times(old), runs) == _normal(_no_times(new), runs), args
    drill = ("--step", "terms", "--lane", "docs/01-overview.md")
    assert _normal(runs.json("explain", runs.old, *drill), runs) == _normal(
        runs.json("explain", runs.new, *drill), runs
    )
    diff = runs.json("runs", "diff", runs.old, runs.new)
    assert not diff.get("decisions"), diff
    audit_old = runs.json("journal", "audit", runs.old)
    audit_new = runs.json("journal", "audit", runs.new)
    assert audit_new["verdict"] == audit_old["verdict"] == "ok"
    assert audit_new["decisions"] == audit_old["decisions"] > 0


def _no_times(doc: Any) -> Any:
    """Durations differ between any two runs."""
    if isinstance(doc, dict):
        return {
            k: _no_times(v)
            for k, v in doc.items()
            if not any(w in k for w in ("duration", "seconds", "elapsed", "pid", "argv"))
        }
    if isinstance(doc, list):
        return [_no_times(v) for v in doc]
    return doc


def test_an_imported_summary_run_needs_the_run_it_names(runs: Runs, tmp_path: Path) -> None:
    files = {}
    for run_id in (runs.new, runs.old):
        files[run_id] = tmp_path / f"{run_id}.rjx"
        runs.json("journal", "export", run_id, "-o", str(files[run_id]))
    elsewhere = ["--output-root", str(tmp_path / "elsewhere")]
    proc = runs.cli("journal", "import", str(files[runs.new]), *elsewhere)
    assert proc.returncode == 0, proc.stderr
    # the journal itself round-trips: the stored events, summaries as stored
    original = runs.cli("journal", "show", runs.new, "--json", "--output-root", str(runs.out),
                        "--journal", runs.journal).stdout  # fmt: skip
    assert runs.cli("journal", "show", runs.new, "--json", *elsewhere).stdout == original
    # its decisions need the run its summaries name: one line until it is imported too
    proc = runs.cli("explain", runs.new, *elsewhere)
    assert proc.returncode == 1 and "is not in this journal" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = runs.cli("journal", "import", str(files[runs.old]), *elsewhere)
    assert proc.returncode == 0, proc.stderr
    proc, imported = runs.cli.json("explain", runs.new, *elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert imported == runs.json("explain", runs.new)


@pytest.mark.parametrize("which", ["new", "blocks_again"])
def test_the_files_a_run_writes_agree_with_their_rebuild(runs: Runs, which: str) -> None:
    run_id = getattr(runs, which)
    live = {
        name: (runs.out / run_id / name).read_bytes()
        for name in ("manifest.json", "report.json", "report.html")
    }
    proc = runs.cli(
        "projections", "rebuild", "--output-root", str(runs.out), "--journal", runs.journal
    )
    assert proc.returncode == 0, proc.stderr
    for name, data in live.items():
        assert (runs.out / run_id / name).read_bytes() == data, name
    old = json.loads((runs.out / runs.old / "manifest.json").read_text())
    new = json.loads(live["manifest.json"])
    assert _normal(_no_times(new), runs) == _normal(_no_times(old), runs)


@pytest.mark.parametrize("summary", [LaneReused, EventsReused])
def test_gc_keeps_the_checkpoints_a_summary_reuses(
    tmp_path: Path, cli: CLI, summary: type[RunEvent]
) -> None:
    project = tmp_path / "glossary"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    roots = ("--output-root", str(tmp_path / "out"), "--cache-root", str(tmp_path / "cache"))

    def run(*extra: str) -> dict:
        proc, doc = cli.json("run", str(project / "pipeline.toml"), *roots, *extra)
        assert proc.returncode == 0, proc.stderr
        return doc

    cold = run()
    summarized = run("--resume", *(["--no-block-summary"] if summary is LaneReused else []))
    with open_journal(str(tmp_path / "out" / "journal.sqlite3"), read_only=True) as store:
        sources = {
            e.source_run  # type: ignore[attr-defined]
            for e in store.events(summarized["run_id"])
            if type(e) is summary
        }
    assert sources == {cold["run_id"]}
    # only the summarized run is kept: it references the checkpoints through the cold run
    proc = cli("gc", "--keep", "1", "--cache", *roots)
    assert proc.returncode == 0, proc.stderr
    again = run("--resume")
    with open_journal(str(tmp_path / "out" / "journal.sqlite3"), read_only=True) as store:
        codes = {
            e.code.value for e in store.projected_events(again["run_id"]) if type(e) is StageDecided
        }
    assert codes == {"reused"}


# --- what it costs ---------------------------------------------------------------------


def _run_bytes(journal: Path, run_id: str) -> int:
    """The bytes of one run's stored rows: state, topic and the row's fixed columns."""
    from runjournal.domain.run import run_aggregate_id

    with sqlite3.connect(journal) as db:
        (size,) = db.execute(
            "select sum(length(state) + length(topic) + 32 + 8) from stored_events"
            " where originator_id = ?",
            (run_aggregate_id(run_id).hex,),
        ).fetchone()
    return int(size)


def test_a_no_op_resume_adds_bytes_per_lane_not_per_decision(tmp_path: Path, cli: CLI) -> None:
    project = tmp_path / "long"
    (project / "docs").mkdir(parents=True)
    for name in ("a", "b"):  # two long documents: two lanes of about 1,500 chunks
        paragraphs = [f"Paragraph {i} of {name}: the **term {i % 7}** again." for i in range(1500)]
        (project / "docs" / f"{name}.md").write_text("\n\n".join(paragraphs) + "\n")
    (project / "pipeline.toml").write_text(
        'name = "long"\ninputs = ["docs/*.md"]\n[chunking]\nstrategy = "paragraphs"\n'
        'max_chars = 60\n[[steps]]\nid = "terms"\nmodule = "builtin.terms"\n'
    )
    out, cache = tmp_path / "out", tmp_path / "cache"

    def run(*extra: str) -> dict:
        proc, doc = cli.json(
            "run", str(project / "pipeline.toml"), "--output-root", str(out),
            "--cache-root", str(cache), *extra,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return doc

    run()
    old = run("--resume", "--no-reuse-summary")
    new = run("--resume")
    journal = out / "journal.sqlite3"
    with open_journal(str(journal), read_only=True) as store:
        decided = sum(1 for e in store.projected_events(new["run_id"]) if type(e) is StageDecided)
    assert decided > 3000
    per_1000_new = _run_bytes(journal, new["run_id"]) * 1000 / decided
    per_1000_old = _run_bytes(journal, old["run_id"]) * 1000 / decided
    # the whole resume, every fixed event included: at most 2 KiB per 1,000 decisions
    # (measured: about 1.1 KiB; the old way about 40 KiB)
    assert per_1000_new <= 2048, (per_1000_new, per_1000_old)
    # journaled the old way, the same resume cost tens of bytes per decision
    assert per_1000_old > 10 * 2048, (per_1000_new, per_1000_old)


# --- block summaries (docs/internals.md "Block summaries") ------------------------------


def test_a_no_op_resume_journals_blocks_not_lanes(runs: Runs) -> None:
    raw = runs.raw(runs.blocks)
    assert not [e for e in raw if type(e) in (*_UNIT_EVENTS, LaneReused)]
    blocks = [e for e in raw if type(e) is EventsReused]
    assert {b.kind.value for b in blocks} >= {"inputs", "plans", "lanes", "outputs"}
    # the units are those of the run before, journaled there; the next no-op resume names
    # the same run (never a run whose units are themselves a block)
    assert {b.source_run for b in blocks} == {runs.again}
    again = [e for e in runs.raw(runs.blocks_again) if type(e) is EventsReused]
    assert [_content(b) for b in again] == [_content(b) for b in blocks]


@pytest.mark.parametrize("which", ["blocks", "blocks_again"])
def test_the_expanded_blocks_are_the_run_journaled_the_old_way(runs: Runs, which: str) -> None:
    old = runs.raw(runs.old)
    projected = runs.projected(getattr(runs, which))
    new = [e for e in projected if type(e) not in (LaneReused, EventsReused)]
    assert [_content(e) for e in _same_run(new, old)] == [_content(e) for e in old]
    for i, event in enumerate(projected):
        if type(event) is EventsReused:
            for unit in projected[i + 1 : i + 1 + event.count]:
                assert unit.originator_version == event.originator_version
                assert unit.timestamp == event.timestamp


@pytest.mark.parametrize("name", sorted(PROJECTIONS))
def test_every_projection_sees_the_same_stages_through_blocks(runs: Runs, name: str) -> None:
    old = runs.raw(runs.old)
    new = _same_run(runs.projected(runs.blocks_again), old)
    view = PROJECTIONS[name]
    assert _normal(view(new), runs) == _normal(view(_same_run(old, old)), runs)


def test_the_commands_give_the_same_answers_through_blocks(runs: Runs, tmp_path: Path) -> None:
    for args in (("explain",), ("runs", "show")):
        old = runs.json(*args, runs.old)
        new = runs.json(*args, runs.blocks_again)
        assert _normal(_no_times(old), runs) == _normal(_no_times(new), runs), args
    assert not runs.json("runs", "diff", runs.old, runs.blocks_again).get("decisions")
    audit = runs.json("journal", "audit", runs.blocks_again)
    assert audit["verdict"] == "ok"
    assert audit["decisions"] == runs.json("journal", "audit", runs.old)["decisions"] > 0
    # export and import: stored as is; the run it names is needed to read it back
    files = {}
    for run_id in (runs.blocks_again, runs.again, runs.old):
        files[run_id] = tmp_path / f"{run_id}.rjx"
        runs.json("journal", "export", run_id, "-o", str(files[run_id]))
    elsewhere = ["--output-root", str(tmp_path / "elsewhere")]
    assert runs.cli("journal", "import", str(files[runs.blocks_again]), *elsewhere).returncode == 0
    original = runs.cli("journal", "show", runs.blocks_again, "--json", "--output-root",
                        str(runs.out), "--journal", runs.journal).stdout  # fmt: skip
    assert runs.cli("journal", "show", runs.blocks_again, "--json", *elsewhere).stdout == original
    proc = runs.cli("explain", runs.blocks_again, *elsewhere)
    assert proc.returncode == 1 and "is not in this journal" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    for run_id in (runs.again, runs.old):  # `again` names `old` for its lanes' decisions
        assert runs.cli("journal", "import", str(files[run_id]), *elsewhere).returncode == 0
    proc, imported = runs.cli.json("explain", runs.blocks_again, *elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert imported == runs.json("explain", runs.blocks_again)
    proc, audit = runs.cli.json("journal", "audit", runs.blocks_again, *elsewhere)
    assert proc.returncode == 0 and audit["verdict"] == "ok", proc.stdout


def _one_paragraph_corpus(project: Path, docs: int) -> None:
    (project / "docs").mkdir(parents=True)
    for d in range(docs):
        (project / "docs" / f"d{d:04d}.md").write_text(f"Document {d}: the **term {d % 5}**.\n")
    (project / "pipeline.toml").write_text(
        'name = "small"\ninputs = ["docs/*.md"]\n[[steps]]\nid = "terms"\n'
        'module = "builtin.terms"\n'
    )


def test_a_no_op_resume_grows_the_journal_by_steps_not_lanes(tmp_path: Path, cli: CLI) -> None:
    """Issue 29: a no-op resume adds at most 2 KiB per 1,000 decisions however small the
    lanes. Measured as the slope between two corpora (the run's fixed events set aside):
    one-chunk lanes of three decisions, where a `LaneReused` per lane and the lane's own
    events cost about 80 KB per 1,000 decisions."""

    def resume_bytes(docs: int, *extra: str) -> tuple[int, int]:
        project = tmp_path / f"p{docs}{''.join(extra)}"
        _one_paragraph_corpus(project, docs)
        roots = ["--output-root", str(project / "out"), "--cache-root", str(project / "cache")]
        runs = []
        for flags in ([], ["--resume", *extra], ["--resume", *extra]):
            proc, doc = cli.json("run", str(project / "pipeline.toml"), *roots, *flags)
            assert proc.returncode == 0, proc.stderr
            runs.append(doc)
        assert set(runs[-1]["decisions"]) == {"reused"}
        return _run_bytes(project / "out" / "journal.sqlite3", runs[-1]["run_id"]), sum(
            runs[-1]["decisions"].values()
        )

    for extra, within in (((), True), (("--no-block-summary",), False)):
        small, small_decisions = resume_bytes(20, *extra)
        large, large_decisions = resume_bytes(120, *extra)
        slope = (large - small) * 1000 / (large_decisions - small_decisions)
        assert (slope <= 2048) is within, (extra, slope)
