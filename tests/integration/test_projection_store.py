"""Materialised projection views: status, rebuild, version bumps (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import pytest
from runjournal.adapters.fsroot import FsRoot, NoSpace
from runjournal.adapters.journal import JournalStore, open_journal
from runjournal.adapters.projection_store import (
    STATE_FILE,
    ProjectionStore,
    UnknownProjection,
    available_projections,
)
from runjournal.cli.output import json_bytes
from runjournal.domain.events import RunEvent, TerminalPersistenceFailed
from runjournal.projections.base import fold
from runjournal.projections.debug_summary import DebugSummaryProjection
from runjournal.projections.html_render import render_report_html
from runjournal.projections.html_report import HtmlReportProjection
from runjournal.projections.manifest import ManifestProjection
from runjournal.projections.reasons_report import ReasonReportProjection
from runjournal.projections.report import ReportProjection
from runjournal.projections.runs_index import RunsIndexProjection
from support import synthetic as syn
from support.faulty_fs import Fault, faulty_root_class


@pytest.fixture(autouse=True)
def _versions_at_1(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about how versions are stored and bumped, not about the projections'
    current versions: every projection starts at v1 here (a test bumps one to v2)."""
    for cls in (
        ManifestProjection,
        ReportProjection,
        ReasonReportProjection,
        DebugSummaryProjection,
        HtmlReportProjection,
    ):
        monkeypatch.setattr(cls, "VERSION", 1)


class World:
    """A journal, an output root with run directories, and live manifests in them."""

    def __init__(self, store: JournalStore, root: Path) -> None:
        self.store = store
        self.root = root
        self.faults: list[Fault] = []  # of the output root's fake (`support.faulty_fs`)
        self.views = ProjectionStore(
            store, str(root), json_bytes, open_root=faulty_root_class(self.faults).open
        )
        self.runs: list[syn.SyntheticRun] = []

    def add_run(
        self, n: int, *, local: bool = True, running: bool = False, **kw: Any
    ) -> syn.SyntheticRun:
        output_root = str(self.root) if local else "/elsewhere/runs"
        run = syn.synthetic_run(syn.run_id_for(n), output_root=output_root, **kw)
        if running:  # killed before its terminal event: a run dir may exist, no manifest
            run.events.pop()
            self.store.append_events(run.run_id, run.events)
            (self.root / run.run_id).mkdir()
            self.runs.append(run)
            return run
        self.store.append_events(run.run_id, run.events)
        if local:  # what terminalization writes live
            (self.root / run.run_id).mkdir()
            live = fold(ManifestProjection(), run.events).view()
            (self.root / run.run_id / "manifest.json").write_bytes(json_bytes(live))
        self.runs.append(run)
        return run

    def append(self, run: syn.SyntheticRun, event_type: type[RunEvent], **fields: Any) -> None:
        last = run.events[-1]
        event = event_type(
            originator_id=last.originator_id,
            originator_version=last.originator_version + 1,
            timestamp=last.timestamp,
            **fields,
        )
        self.store.append_events(run.run_id, [event])
        run.events.append(event)

    def status(self) -> dict[str, Any]:
        return {s.name: s for s in self.views.status()}

    def manifest(self, run: syn.SyntheticRun) -> bytes:
        return (self.root / run.run_id / "manifest.json").read_bytes()


@pytest.fixture(params=["sqlite", "postgres"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    with syn.backend(request.param, tmp_path) as url:
        store = open_journal(url)
        try:
            root = tmp_path / "out"
            root.mkdir()
            yield World(store, root)
        finally:
            store.close()


class TestStatusAndRebuild:
    def test_live_manifests_are_fresh_other_views_not_materialised(self, world: World) -> None:
        world.add_run(1)
        status = world.status()
        assert list(status) == [
            "manifest",
            "report",
            "reasons",
            "debug_summary",
            "html_report",
            "runs_index",
        ]
        assert not status["manifest"].stale and status["manifest"].materialised == [1]
        assert status["reasons"].stale and status["reasons"].reasons == ["not materialised"]
        assert status["debug_summary"].reasons == ["not materialised"]
        assert status["runs_index"].stale

    def test_rebuild_equals_the_live_views(self, world: World) -> None:
        first = world.add_run(1)
        second = world.add_run(2, previous=first, changed=frozenset({(0, 1)}))
        live = {r.run_id: world.manifest(r) for r in (first, second)}
        results = {r.name: r for r in world.views.rebuild()}
        assert results["manifest"].written == 2 and results["manifest"].failures == []
        assert {r.run_id: world.manifest(r) for r in (first, second)} == live
        for run in (first, second):
            stored = json.loads(
                (world.root / ".runjournal/views/reasons.v1" / f"{run.run_id}.json").read_text()
            )
            assert stored["projection"] == {"name": "reasons", "version": 1}
            assert stored["last_version"] == len(run.events)
            assert stored["view"] == json.loads(
                json_bytes(fold(ReasonReportProjection(), run.events).view())
            )
        index = json.loads((world.root / ".runjournal/views/runs_index.v1.json").read_text())
        expected = fold(RunsIndexProjection(), first.events + second.events).view()
        assert index["view"] == json.loads(json_bytes(expected))
        assert not any(s.stale for s in world.status().values())

    def test_the_state_file_points_at_each_materialised_version(self, world: World) -> None:
        world.add_run(1)
        world.views.rebuild()
        state = json.loads((world.root / STATE_FILE).read_text())
        assert state == {
            "format": 1,
            "projections": {
                "reasons": {"storage": ".runjournal/views/reasons.v1", "version": 1},
                "debug_summary": {"storage": ".runjournal/views/debug_summary.v1", "version": 1},
                "runs_index": {"storage": ".runjournal/views/runs_index.v1.json", "version": 1},
            },
        }

    def test_new_events_make_views_stale_until_rebuilt(self, world: World) -> None:
        run = world.add_run(1)
        world.views.rebuild()
        world.append(run, TerminalPersistenceFailed, target="report", message="disk full")
        world.add_run(2)
        status = world.status()
        assert status["reasons"].stale
        assert "1 view(s) miss newer events of their run" in status["reasons"].reasons
        assert "1 run(s) have no view" in status["reasons"].reasons
        assert status["runs_index"].stale
        world.views.rebuild()
        assert not any(s.stale for s in world.status().values())
        assert json.loads(world.manifest(run))["persistence_failures"] == [
            {"target": "report", "message": "disk full"}
        ]

    def test_a_manifest_with_another_status_or_missing_is_stale(self, world: World) -> None:
        first, second = world.add_run(1), world.add_run(2)
        doc = json.loads(world.manifest(first))
        (world.root / first.run_id / "manifest.json").write_text(
            json.dumps({**doc, "status": "running"})
        )
        (world.root / second.run_id / "manifest.json").unlink()
        status = world.status()["manifest"]
        assert status.stale and status.stale_views == 2
        world.views.rebuild("manifest")
        assert not world.status()["manifest"].stale

    def test_runs_of_other_output_roots_are_left_alone(self, world: World) -> None:
        world.add_run(1, local=False)
        results = {r.name: r for r in world.views.rebuild()}
        assert results["manifest"].written == 0 and results["manifest"].skipped == 1
        assert results["reasons"].written == 1  # reasons views live under this root
        assert sorted(p.name for p in world.root.iterdir()) == [".runjournal"]

    def test_a_run_that_has_not_terminated_has_no_manifest_view(self, world: World) -> None:
        world.add_run(1)
        running = world.add_run(2, running=True)
        status = world.status()["manifest"]
        assert not status.stale and status.views == 1
        results = {r.name: r for r in world.views.rebuild()}
        assert (results["manifest"].written, results["manifest"].skipped) == (1, 1)
        assert not (world.root / running.run_id / "manifest.json").exists()
        assert results["reasons"].written == 2  # the reasons view of a running run is fine

    def test_one_run_only(self, world: World) -> None:
        world.add_run(1)
        second = world.add_run(2)
        results = {r.name: r for r in world.views.rebuild(run_id=second.run_id)}
        assert results["manifest"].written == 1 and results["reasons"].written == 1
        views = world.root / ".runjournal/views/reasons.v1"
        assert sorted(p.name for p in views.iterdir()) == [f"{second.run_id}.json"]
        assert "1 run(s) have no view" in world.status()["reasons"].reasons

    @pytest.mark.parametrize(
        "text", ["not json", '{"view": {}}', '{"last_version": "7", "view": {}}', "[1]"]
    )
    def test_a_view_without_a_readable_last_version_is_no_view(
        self, world: World, text: str
    ) -> None:
        run = world.add_run(1)
        world.views.rebuild()
        assert not world.status()["reasons"].stale
        (views,) = world.root.glob(".runjournal/views/reasons.v*")
        (views / f"{run.run_id}.json").write_text(text)
        assert world.status()["reasons"].reasons == ["1 run(s) have no view"]

    def test_unknown_names_and_misplaced_run(self, world: World) -> None:
        run = world.add_run(1)
        with pytest.raises(UnknownProjection, match="no projection named 'nope'"):
            world.views.rebuild("nope")
        with pytest.raises(UnknownProjection, match="--run does not apply"):
            world.views.rebuild("runs_index", run.run_id)

    def test_a_view_that_cannot_be_written_is_reported_and_nothing_switches(
        self, world: World, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        world.add_run(1)
        world.views.rebuild()
        monkeypatch.setattr(ReasonReportProjection, "VERSION", 2)
        world.faults.append(
            Fault("write_bytes", lambda r, name: "reasons.v2/" in name, lambda n: NoSpace(n, 28))
        )
        results = {r.name: r for r in world.views.rebuild("reasons")}
        assert results["reasons"].written == 0
        assert results["reasons"].failures and "no space" in results["reasons"].failures[0]
        state = json.loads((world.root / STATE_FILE).read_text())
        assert state["projections"]["reasons"]["version"] == 1
        assert (world.root / ".runjournal/views/reasons.v1").is_dir()


class TestVersionBumps:
    def test_manifest_bump_is_stale_until_rebuilt(
        self, world: World, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        run = world.add_run(1)
        monkeypatch.setattr(ManifestProjection, "VERSION", 2)
        status = world.status()["manifest"]
        assert status.stale and status.version == 2 and status.materialised == [1]
        assert status.reasons == ["1 manifest(s) built with another version than v2"]
        world.views.rebuild("manifest")
        assert json.loads(world.manifest(run))["projection"] == {"name": "manifest", "version": 2}
        status = world.status()["manifest"]
        assert not status.stale and status.materialised == [2]

    def test_v2_is_built_beside_v1_then_replaces_it(
        self, world: World, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        first, second = world.add_run(1), world.add_run(2)
        world.views.rebuild()
        views = world.root / ".runjournal/views"
        monkeypatch.setattr(ReasonReportProjection, "VERSION", 2)
        monkeypatch.setattr(RunsIndexProjection, "VERSION", 2)
        status = world.status()
        assert status["reasons"].stale and status["reasons"].materialised == [1]
        assert status["reasons"].reasons == ["materialised v1, the code is v2"]
        assert status["runs_index"].stale
        # A one-run rebuild writes v2 beside v1 but does not switch the whole view.
        world.views.rebuild("reasons", first.run_id)
        assert (views / "reasons.v1").is_dir() and (views / "reasons.v2").is_dir()
        assert world.status()["reasons"].stale
        results = {r.name: r for r in world.views.rebuild()}
        assert results["reasons"].replaced == 1 and results["runs_index"].replaced == 1
        assert sorted(p.name for p in views.iterdir()) == [
            "debug_summary.v1",  # not bumped: stays
            "reasons.v2",
            "runs_index.v2.json",
        ]
        assert sorted(p.name for p in (views / "reasons.v2").iterdir()) == [
            f"{first.run_id}.json",
            f"{second.run_id}.json",
        ]
        state = json.loads((world.root / STATE_FILE).read_text())
        assert {k: v["version"] for k, v in state["projections"].items()} == {
            "reasons": 2,
            "debug_summary": 1,
            "runs_index": 2,
        }
        assert not any(s.stale for s in world.status().values())


class TestHtmlReport:
    """`report.html` is rewritten where a run directory has one, never added."""

    @staticmethod
    def plant(world: World, run: syn.SyntheticRun) -> bytes:
        page = render_report_html(fold(HtmlReportProjection(), run.events).view()).encode()
        (world.root / run.run_id / "report.html").write_bytes(page)
        return page

    def test_rebuild_rewrites_existing_pages_byte_for_byte_and_adds_none(
        self, world: World
    ) -> None:
        first, second = world.add_run(1), world.add_run(2)
        live = self.plant(world, first)
        status = world.status()["html_report"]
        assert (status.views, status.stale, status.materialised) == (1, False, [1])
        assert status.storage == "<run dir>/report.html"
        (world.root / first.run_id / "report.html").write_bytes(b"<html>damaged</html>")
        status = world.status()["html_report"]
        assert status.stale
        assert status.reasons == ["1 terminated run(s) have no readable report.html"]
        results = {r.name: r for r in world.views.rebuild()}
        assert (results["html_report"].written, results["html_report"].skipped) == (1, 1)
        assert (world.root / first.run_id / "report.html").read_bytes() == live
        assert not (world.root / second.run_id / "report.html").exists()
        assert "html_report" not in json.loads((world.root / STATE_FILE).read_text())["projections"]
        assert not world.status()["html_report"].stale

    def test_a_page_older_than_the_journal_is_stale_until_rebuilt(self, world: World) -> None:
        run = world.add_run(1)
        self.plant(world, run)
        world.append(run, TerminalPersistenceFailed, target="report", message="disk full")
        status = world.status()["html_report"]
        assert status.stale and status.reasons == [
            "1 report.html(s) miss newer events of their run"
        ]
        world.views.rebuild("html_report", run.run_id)
        page = (world.root / run.run_id / "report.html").read_text()
        assert "not persisted: report: disk full" in page
        assert not world.status()["html_report"].stale

    def test_a_version_bump_is_stale_until_rebuilt(
        self, world: World, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        run = world.add_run(1)
        self.plant(world, run)
        monkeypatch.setattr(HtmlReportProjection, "VERSION", 2)
        status = world.status()["html_report"]
        assert status.reasons == ["1 report.html(s) built with another version than v2"]
        world.views.rebuild("html_report")
        page = (world.root / run.run_id / "report.html").read_bytes()
        assert b'content="html_report.v2"' in page
        assert not world.status()["html_report"].stale


class DebugSummary:
    NAME: ClassVar[str] = "debug_summary"
    VERSION: ClassVar[int] = 3

    def __init__(self) -> None:
        self.count = 0

    def apply(self, event: RunEvent) -> None:
        self.count += 1

    def view(self) -> dict[str, Any]:
        return {"events": self.count}


def test_a_debug_summary_projection_is_found_when_it_exists(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = types.ModuleType("runjournal.projections.debug_summary")
    DebugSummary.__module__ = module.__name__
    module.DebugSummary = DebugSummary  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert [s.name for s in available_projections()] == [
        "manifest",
        "report",
        "reasons",
        "debug_summary",
        "html_report",
        "runs_index",
    ]
    run = world.add_run(1)
    world.views.rebuild("debug_summary")
    stored = msgspec.json.decode(
        (world.root / f".runjournal/views/debug_summary.v3/{run.run_id}.json").read_bytes()
    )
    assert stored["view"] == {"events": len(run.events)}
    assert not world.status()["debug_summary"].stale


def test_status_of_an_output_root_that_does_not_exist(tmp_path: Path) -> None:
    with open_journal(str(tmp_path / "j.sqlite3")) as store:
        views = ProjectionStore(store, str(tmp_path / "missing"), json_bytes, open_root=FsRoot.open)
        status = {s.name: s for s in views.status()}
    assert not status["manifest"].stale and status["manifest"].views == 0
    assert not (tmp_path / "missing").exists()


def test_views_live_beside_the_journal_and_manifests_where_each_run_lives(
    tmp_path: Path,
) -> None:
    """A journal `state/j.sqlite3` whose runs live in two other directories: the state
    dir is `state/.runjournal.j.sqlite3`, each manifest goes into its recorded run dir,
    and a run whose record does not pin a directory (a `..` path) gets nothing."""
    from runjournal.adapters.projection_store import state_dir_for

    state = tmp_path / "state"
    state.mkdir()
    journal = state / "j.sqlite3"
    homes = [tmp_path / "out-a", tmp_path / "out-b", tmp_path / "out-b" / "x" / ".."]
    with open_journal(str(journal)) as store:
        runs = []
        for n, home in enumerate(homes, 1):
            run = syn.synthetic_run(syn.run_id_for(n), output_root=str(home))
            store.append_events(run.run_id, run.events)
            (home / run.run_id).mkdir(parents=True, exist_ok=True)
            runs.append(run)
        views = ProjectionStore(
            store,
            str(state),
            json_bytes,
            open_root=FsRoot.open,
            state_dir=state_dir_for(str(journal)),
        )
        results = {r.name: r for r in views.rebuild()}
    assert state_dir_for(str(journal)) == ".runjournal.j.sqlite3"
    assert state_dir_for(str(state / "journal.sqlite3")) == ".runjournal"
    assert (results["manifest"].written, results["manifest"].skipped) == (2, 1)
    for run, home in zip(runs[:2], homes[:2], strict=True):
        built = json.loads((home / run.run_id / "manifest.json").read_text())
        assert built["run_id"] == run.run_id
    assert not (homes[2] / runs[2].run_id / "manifest.json").exists()
    assert (state / ".runjournal.j.sqlite3" / "projections.json").is_file()
    assert results["reasons"].storage == ".runjournal.j.sqlite3/views/reasons.v1"
    assert sorted(p.name for p in state.iterdir()) == [".runjournal.j.sqlite3", "j.sqlite3"]
    assert not (tmp_path / "out-a" / ".runjournal").exists()
