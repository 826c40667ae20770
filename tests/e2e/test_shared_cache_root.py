"""Several projects on one cache root (docs/operations.md "Cache retention"), end to end.

The default cache root is the user cache directory, shared by every project on the
machine: `gc --cache` or `--max-cache-size` in one project must never remove what
another project's journal references, a journal that is gone or unreadable keeps its
work, and `--resume` after any collection recomputes what is missing instead of failing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.console import CLI

PIPELINE = """
name = "{name}"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 200
[[steps]]
id = "terms"
module = "builtin.terms"
scope = "document"
params = {{ min_count = 1, max_terms = 20 }}
[[steps]]
id = "definitions"
module = "builtin.definitions"
scope = "document"
consumes = ["terms"]
params = {{ terms_step = "terms" }}
[[steps]]
id = "headings"
module = "builtin.headings"
scope = "document"
"""

DOC = """# {title}

A **journal** is an append-only record of events. The **journal** is never edited.

## Checkpoints

A **checkpoint** is a stored stage result. A **checkpoint** is reused by a resume.
"""


class Project:
    """A project directory with its own journal (under ./runs), on the shared cache root."""

    def __init__(self, cli: CLI, base: Path, name: str) -> None:
        self.cli, self.name = cli, name
        self.dir = base / name
        (self.dir / "docs").mkdir(parents=True)
        (self.dir / "docs" / "a.md").write_text(DOC.format(title=name))
        (self.dir / "docs" / "b.md").write_text(DOC.format(title=f"{name} again"))
        (self.dir / "pipeline.toml").write_text(PIPELINE.format(name=name))

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, dict]:
        proc = self.cli(*args, cwd=self.dir, env=env)
        assert "Traceback" not in proc.stderr, proc.stderr
        doc = json.loads(proc.stdout) if "--json" in args and proc.stdout.strip() else {}
        return proc.returncode, proc.stdout + proc.stderr, doc

    def run(self, *extra: str) -> dict[str, int]:
        code, out, doc = self("run", "pipeline.toml", "--json", *extra)
        assert code == 0, out
        return doc["decisions"]

    def gc(self, *args: str, env: dict[str, str] | None = None) -> dict:
        code, out, doc = self("gc", "--json", *args, env=env)
        assert code == 0, out
        return doc["cache"]

    @property
    def journal(self) -> Path:
        return self.dir / "runs" / "journal.sqlite3"


@pytest.fixture
def shared(tmp_path: Path) -> tuple[Project, Project, Path]:
    cli = CLI(tmp_path / "home")
    cache = tmp_path / "shared-cache"
    cli.env["RUNJOURNAL_CACHE_ROOT"] = str(cache)
    a, b = Project(cli, tmp_path, "alpha"), Project(cli, tmp_path, "beta")
    assert set(a.run("--resume")) == {"checkpoint_missing"}
    assert set(b.run("--resume")) == {"checkpoint_missing"}
    return a, b, cache


def checkpoints(cache: Path, pipeline: str) -> set[str]:
    return {str(p) for p in (cache / "workspaces" / pipeline).rglob("*.ckpt")}


@pytest.mark.parametrize("collect", [("--cache",), ("--max-cache-size", "0")])
def test_gc_in_one_project_leaves_the_others_resume_fully_reused(shared, collect) -> None:
    """The defect of issue #25: `gc --cache` in A removed every checkpoint of B."""
    a, b, cache = shared
    for here, other in ((a, b), (b, a)):
        other.run("--resume")  # its own earlier --max-cache-size 0 emptied its part
        before = checkpoints(cache, other.name)
        doc = here.gc(*collect)
        assert not any(f"workspaces/{other.name}/" in r["name"] for r in doc["removed"])
        assert checkpoints(cache, other.name) == before
        rows = {row["journal"]: row for row in doc["journals"]}
        assert rows[f"sqlite://{other.journal.resolve()}"]["status"] == "read"
        assert rows[f"sqlite://{here.journal.resolve()}"]["status"] == "this"
        decisions = other.run("--resume")
        assert set(decisions) == {"reused"}, (here.name, collect, decisions)
    if collect[0] == "--max-cache-size":  # its own entries are not protected
        doc = a.gc(*collect)
        assert {r["reason"] for r in doc["removed"]} == {"over_size"}
        assert checkpoints(cache, a.name) == set()
        assert set(a.run("--resume")) == {"checkpoint_missing"}


def test_a_journal_that_is_gone_keeps_its_checkpoints_until_forgotten(shared) -> None:
    a, b, cache = shared
    kept = checkpoints(cache, b.name)
    shutil.rmtree(b.dir / "runs")
    code, out, _ = a("gc", "--cache")
    assert code == 0, out
    assert f"journal sqlite://{b.journal.resolve()} is missing" in out
    assert "--forget-missing" in out
    doc = a.gc("--max-cache-size", "0")
    row = next(r for r in doc["journals"] if r["pipelines"] == [b.name])
    assert row["status"] == "missing" and "no journal" in row["error"]
    assert checkpoints(cache, b.name) == kept
    assert not any(r["kind"] == "chunk_plan" for r in doc["removed"])  # unknown: all kept
    # --dry-run forgets nothing; --forget-missing then drops it and its work goes
    dry = a.gc("--forget-missing", "--dry-run")
    assert any(r["status"] == "forgotten" for r in dry["journals"])
    assert checkpoints(cache, b.name) == kept
    doc = a.gc("--forget-missing")
    assert [r["status"] for r in doc["journals"] if r["pipelines"] == [b.name]] == ["forgotten"]
    assert checkpoints(cache, b.name) == set()
    assert all(r["pipelines"] != [b.name] for r in a.gc("--cache")["journals"])
    # the next run of B registers again and recomputes what went
    assert set(b.run("--resume")) == {"checkpoint_missing"}


def test_an_unreadable_journal_keeps_its_checkpoints_and_is_never_forgotten(shared) -> None:
    a, b, cache = shared
    kept = checkpoints(cache, b.name)
    shutil.rmtree(b.dir / "runs")
    (b.dir / "runs").mkdir()
    b.journal.write_bytes(b"this is not a SQLite database" * 100)
    for args in (("--cache",), ("--max-cache-size", "0", "--forget-missing")):
        doc = a.gc(*args)
        row = next(r for r in doc["journals"] if r["pipelines"] == [b.name])
        assert row["status"] == "unreadable", row
        assert checkpoints(cache, b.name) == kept
    assert b.journal.read_bytes().startswith(b"this is not")  # nothing written to it
    code, out, _ = a("gc", "--cache")
    assert code == 0 and "is unreadable" in out, out


def test_checkpoints_from_before_the_registry_are_kept_unless_asked(shared) -> None:
    """A cache root written by runs before the registry (simulated: its registry removed,
    then a new one started by a later run) keeps what no registered journal references."""
    a, b, cache = shared
    kept = checkpoints(cache, b.name)
    shutil.rmtree(cache / "journals")
    assert set(a.run("--resume")) == {"reused"}  # registers A alone, starts the registry
    code, out, doc = a("gc", "--cache", "--json")
    assert code == 0, out
    assert doc["cache"]["kept"]["unregistered"] >= len(kept)
    assert checkpoints(cache, b.name) == kept
    code, out, _ = a("gc", "--max-cache-size", "0")
    assert "written before the journal registry" in out and "--include-unregistered" in out
    assert checkpoints(cache, b.name) == kept
    a.gc("--include-unregistered")
    assert checkpoints(cache, b.name) == set()


@pytest.mark.parametrize("budget", [0.5, 0.2, 0.0])
def test_resume_after_a_partial_collection_recomputes_what_is_missing(shared, budget) -> None:
    """A checkpoint the journal names but the cache no longer holds is `checkpoint_missing`
    (recomputed), whichever stages of a lane went: the run never fails on it."""
    a, _b, cache = shared
    size = sum(p.stat().st_size for p in (cache / "workspaces" / a.name).rglob("*.ckpt"))
    total = sum(a.run("--resume").values())
    a.gc("--max-cache-size", str(int(size * budget)))
    decisions = a.run("--resume")
    assert set(decisions) <= {"reused", "checkpoint_missing"}, decisions
    assert sum(decisions.values()) == total
    assert decisions.get("checkpoint_missing", 0) > 0
    code, out, _ = a("journal", "audit", "latest")  # its decisions re-decided: the same
    assert code == 0, out
    assert set(a.run("--resume")) == {"reused"}


def test_a_postgresql_journal_is_registered_without_its_password_and_read_by_gc(
    shared, tmp_path: Path
) -> None:
    """Runs only when RUNJOURNAL_TEST_POSTGRES_URL is set (as .ci/run sets it)."""
    from urllib.parse import urlsplit

    from support import synthetic as syn

    a, _b, cache = shared
    with syn.backend("postgres", tmp_path) as url:
        c = Project(a.cli, tmp_path, "gamma")
        assert set(c.run("--resume", "--journal", url)) == {"checkpoint_missing"}
        password = urlsplit(url).password or ""
        assert password
        for path in (cache / "journals").iterdir():
            assert password not in path.read_text()
        kept = checkpoints(cache, c.name)
        # the password comes from libpq's own sources (PGPASSWORD here)
        doc = a.gc("--max-cache-size", "0", env={"PGPASSWORD": password})
        row = next(r for r in doc["journals"] if r["pipelines"] == [c.name])
        assert row["status"] == "read" and row["runs"] == 1, row
        assert "@" in row["journal"] and password not in row["journal"]
        assert checkpoints(cache, c.name) == kept
        assert set(c.run("--resume", "--journal", url)) == {"reused"}
        # without it the journal cannot be read: its work is kept all the same
        doc = a.gc("--max-cache-size", "0", env={"PGPASSWORD": "wrong", "PGPASSFILE": "/dev/null"})
        row = next(r for r in doc["journals"] if r["pipelines"] == [c.name])
        assert row["status"] == "unreadable" and password not in row["error"], row
        assert checkpoints(cache, c.name) == kept
