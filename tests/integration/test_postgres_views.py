"""A PostgreSQL journal keeps its materialised views in its own database (issue 16,
docs/internals.md "Where views live"): rows of `runjournal_views` in the journal's schema,
rebuilt and reported by `ProjectionStore` as the state dir of a SQLite journal is.

Runs only when RUNJOURNAL_TEST_POSTGRES_URL is set (as .ci/run sets it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.journal import JournalStore, open_journal
from runjournal.adapters.journal.views_table import VIEWS
from runjournal.adapters.projection_store import ProjectionStore
from runjournal.adapters.starter import STARTER_FILES
from runjournal.cli.output import json_bytes
from runjournal.domain.events import TerminalPersistenceFailed
from runjournal.projections.base import fold
from runjournal.projections.manifest import ManifestProjection
from runjournal.projections.reasons_report import ReasonReportProjection
from support import synthetic as syn
from support.console import CLI as Console


def rows(url: str) -> dict[str, Any]:
    """The views table of the schema a `syn.backend("postgres")` URL names."""
    import psycopg

    base, _, query = url.partition("?")
    schema = dict(p.split("=", 1) for p in query.split("&") if p)["schema"]
    with psycopg.connect(base, autocommit=True) as conn:
        found = conn.execute("SELECT to_regclass(%s)", (f"{schema}.{VIEWS}",)).fetchone()
        if found is None or found[0] is None:
            return {}
        got = conn.execute(f'SELECT name, data FROM "{schema}".{VIEWS}').fetchall()
    return {name: json.loads(data) for name, data in got}


class World:
    def __init__(self, url: str, store: JournalStore, root: Path) -> None:
        self.url, self.store, self.root = url, store, root
        table = store.views_table()
        assert table is not None
        self.views = ProjectionStore(
            store, str(root / "never"), json_bytes, open_root=FsRoot.open, views_table=table
        )
        self.runs: list[syn.SyntheticRun] = []

    def add_run(self, n: int) -> syn.SyntheticRun:
        run = syn.synthetic_run(syn.run_id_for(n), output_root=str(self.root))
        self.store.append_events(run.run_id, run.events)
        (self.root / run.run_id).mkdir()
        live = fold(ManifestProjection(), run.events).view()
        (self.root / run.run_id / "manifest.json").write_bytes(json_bytes(live))
        self.runs.append(run)
        return run

    def status(self) -> dict[str, Any]:
        return {s.name: s for s in self.views.status()}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with syn.backend("postgres", tmp_path) as url:
        store = open_journal(url)
        try:
            root = tmp_path / "out"
            root.mkdir()
            yield World(url, store, root)
        finally:
            store.close()


def test_views_are_rows_of_the_journal_database(world: World) -> None:
    first, second = world.add_run(1), world.add_run(2)
    assert world.status()["reasons"].reasons == ["not materialised"]
    assert rows(world.url) == {}  # a status (a read) never creates the table
    results = {r.name: r for r in world.views.rebuild()}
    assert results["reasons"].written == 2 and results["runs_index"].written == 1
    stored = rows(world.url)
    version = ReasonReportProjection.VERSION
    for run in (first, second):
        view = stored[f".runjournal/views/reasons.v{version}/{run.run_id}.json"]
        assert view["last_version"] == len(run.events)
        assert view["view"] == json.loads(
            json_bytes(fold(ReasonReportProjection(), run.events).view())
        )
    assert stored[".runjournal/projections.json"]["projections"]["reasons"]["version"] == version
    assert not any(s.stale for s in world.status().values())
    # nothing of the views dir is a file: neither the given dir nor the output root
    assert not (world.root / "never").exists()
    assert sorted(p.name for p in world.root.iterdir()) == [first.run_id, second.run_id]


def test_stale_until_rebuilt_and_a_version_bump_replaces_the_rows(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = world.add_run(1)
    world.views.rebuild()
    last = run.events[-1]
    world.store.append_events(
        run.run_id,
        [
            TerminalPersistenceFailed(
                originator_id=last.originator_id,
                originator_version=last.originator_version + 1,
                timestamp=last.timestamp,
                target="report",
                message="disk full",
            )
        ],
    )
    assert "1 view(s) miss newer events of their run" in world.status()["reasons"].reasons
    world.views.rebuild()
    assert not world.status()["reasons"].stale
    old = ReasonReportProjection.VERSION
    monkeypatch.setattr(ReasonReportProjection, "VERSION", old + 1)
    assert world.status()["reasons"].reasons == [f"materialised v{old}, the code is v{old + 1}"]
    results = {r.name: r for r in world.views.rebuild("reasons")}
    assert results["reasons"].replaced == old
    names = set(rows(world.url))
    assert f".runjournal/views/reasons.v{old + 1}/{run.run_id}.json" in names
    assert not any(n.startswith(f".runjournal/views/reasons.v{old}/") for n in names)
    assert not world.status()["reasons"].stale


def test_the_cli_leaves_no_file_in_a_cwd_without_project(tmp_path: Path) -> None:
    """`run` (live views), `projections rebuild/status`, `explain` and `report` with a
    PostgreSQL journal and no project nor --output-root: the current directory stays as
    it was; the views are in the database, manifests in the run directory."""
    with syn.backend("postgres", tmp_path) as url:
        project = tmp_path / "project"
        for name, text in STARTER_FILES.items():
            (project / name).parent.mkdir(parents=True, exist_ok=True)
            (project / name).write_text(text, encoding="utf-8")
        out, cwd = tmp_path / "out", tmp_path / "cwd"
        cwd.mkdir()
        console = Console(tmp_path / "home")
        journal = ["--journal", url]
        run = console(
            "run", str(project / "pipeline.toml"), "--no-progress", "--json", "--output-root",
            str(out), "--cache-root", str(tmp_path / "cache"), *journal, cwd=cwd,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        run_id = json.loads(run.stdout)["run_id"]
        manifest = out / run_id / "manifest.json"
        live = manifest.read_bytes()
        manifest.unlink()
        before = snapshot(cwd)
        for args in (
            ("projections", "rebuild"),
            ("projections", "status", "--json"),
            ("explain", "latest"),
            ("report", "latest"),
        ):
            proc = console(*args, *journal, cwd=cwd)
            assert proc.returncode == 0, (args, proc.stderr)
            if args[1:] == ("status", "--json"):
                status = {p["name"]: p for p in json.loads(proc.stdout)["projections"]}
                assert not status["reasons"]["stale"] and not status["runs_index"]["stale"]
        assert snapshot(cwd) == before == []
        assert manifest.read_bytes() == live  # restored where the journal says the run lives
        names = set(rows(url))
        assert ".runjournal/projections.json" in names
        assert any(n.endswith(f"/{run_id}.json") for n in names)


def snapshot(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))
