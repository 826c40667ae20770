"""The cache root's journal registry (`adapters/cache_registry.py`, docs/operations.md
"Cache retention") and the read-only opener `gc` uses for registered journals."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from runjournal.adapters.cache_gc import CacheEntry, Retention, select
from runjournal.adapters.cache_registry import (
    EPOCH,
    entry_name,
    forget,
    journal_identity,
    read_registry,
    register,
)
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.journal import JournalMissing, JournalUnavailable, open_existing_journal
from runjournal.domain.events import CacheEntryKind
from support.cache_entries import checkpoints
from support.inprocess import InProcess


def test_register_writes_one_entry_per_journal_and_pipeline_once(tmp_path: Path) -> None:
    journal = tmp_path / "p" / "runs" / "journal.sqlite3"
    with FsRoot.open(tmp_path / "cache", create=True) as root:
        register(root, str(journal), "glossary")
        epoch = (tmp_path / "cache" / EPOCH).stat().st_mtime_ns
        entries = sorted((tmp_path / "cache" / "journals").glob("*.json"))
        assert len(entries) == 1
        first = entries[0].stat()
        register(root, f"sqlite://{journal}", "glossary")  # the same journal, spelt as a URL
        assert entries[0].stat().st_mtime_ns == first.st_mtime_ns  # not rewritten
        assert (tmp_path / "cache" / EPOCH).stat().st_mtime_ns == epoch
        register(root, str(journal), "other")
        registry = read_registry(root)
    assert registry.epoch_ns == epoch and not registry.unreadable
    assert sorted(e.pipeline for e in registry.entries.values()) == ["glossary", "other"]
    host = socket.gethostname()
    assert registry.journals() == {(f"sqlite://{journal}", host): sorted(registry.entries)}
    assert json.loads(entries[0].read_text()) == {
        "journal": f"sqlite://{journal}",
        "pipeline": "glossary",
        "host": host,
        "registry_schema_version": 1,
    }
    assert oct(entries[0].stat().st_mode & 0o777) == "0o600"


def test_a_sqlite_journal_is_known_by_its_real_path(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    by_link = journal_identity(str(tmp_path / "link" / "j.sqlite3"))
    assert by_link == f"sqlite://{tmp_path / 'real' / 'j.sqlite3'}"
    assert by_link == journal_identity(f"sqlite://{tmp_path}/real/./j.sqlite3")
    odd = journal_identity(str(tmp_path / "a?b%c.sqlite3"))
    assert "?" not in odd and odd.endswith("a%3Fb%25c.sqlite3")


def test_a_postgresql_journal_is_recorded_without_its_password(tmp_path: Path) -> None:
    url = "postgresql://rj:s3cr3t-pw@db.example:6543/journal?schema=team&connect_timeout=3"
    identity = journal_identity(url)
    assert identity == "postgresql://rj@db.example:6543/journal?schema=team"
    with FsRoot.open(tmp_path / "cache", create=True) as root:
        register(root, url, "glossary")
        (entry,) = read_registry(root).entries.values()
    assert entry.journal == identity and entry.host == ""  # the same on every machine
    for path in (tmp_path / "cache").rglob("*"):
        if path.is_file():
            assert b"s3cr3t" not in path.read_bytes()
    assert entry_name(identity, "a") != entry_name(identity, "b")


def test_read_registry_skips_temp_files_and_reports_a_damaged_entry(tmp_path: Path) -> None:
    with FsRoot.open(tmp_path / "cache", create=True) as root:
        assert read_registry(root).epoch_ns is None  # no registry yet
        register(root, str(tmp_path / "j.sqlite3"), "p")
        (tmp_path / "cache" / "journals" / ".rj-tmp-0123").write_text("{")
        (tmp_path / "cache" / "journals" / "README").write_text("not ours")
        bad = tmp_path / "cache" / "journals" / ("0" * 32 + ".json")
        bad.write_text('{"journal": 1}')
        registry = read_registry(root)
        assert list(registry.unreadable) == [f"journals/{bad.name}"]
        assert len(registry.entries) == 1
        forget(root, [f"journals/{bad.name}"])
        assert not read_registry(root).unreadable


def test_open_existing_journal_creates_and_initialises_nothing(tmp_path: Path) -> None:
    with pytest.raises(JournalMissing):
        open_existing_journal(str(tmp_path / "gone" / "journal.sqlite3"))
    assert not (tmp_path / "gone").exists()
    empty = tmp_path / "empty.sqlite3"
    empty.write_bytes(b"")
    with pytest.raises(JournalUnavailable):
        open_existing_journal(str(empty))
    assert empty.read_bytes() == b"" and not os.path.exists(f"{empty}-wal")
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"not a database" * 100)
    with pytest.raises(JournalUnavailable):
        open_existing_journal(str(garbage))
    assert garbage.read_bytes() == b"not a database" * 100


def _one_run(tmp_path: Path) -> tuple[InProcess, tuple[str, ...]]:
    cli = InProcess(tmp_path / "home")
    project = tmp_path / "p"
    (project / "docs").mkdir(parents=True)
    (project / "docs" / "a.md").write_text("# A\n\nA **term** here. A **term** there.\n")
    (project / "pipeline.toml").write_text(
        'name = "p"\ninputs = ["docs/*.md"]\n'
        '[[steps]]\nid = "t"\nmodule = "builtin.terms"\nscope = "document"\n'
    )
    roots = ("--output-root", str(tmp_path / "out"), "--cache-root", str(tmp_path / "cache"))
    assert cli("run", str(project / "pipeline.toml"), *roots).exit_code == 0
    return cli, roots


def test_a_sqlite_journal_of_another_host_is_kept_and_never_forgotten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cache root shared between machines: another machine's SQLite path is not there
    here, but the journal is not gone."""
    import runjournal.adapters.cache_registry as registry_module

    real = socket.gethostname()
    monkeypatch.setattr(registry_module, "this_host", lambda: "elsewhere")
    cli, roots = _one_run(tmp_path)  # registered as a journal of host "elsewhere"
    monkeypatch.setattr(registry_module, "this_host", lambda: real)
    before = [e.rel for e in checkpoints(tmp_path / "cache")]
    assert before
    # here the same path is another journal: the one of "elsewhere" is not read
    result = cli("gc", *roots, "--max-cache-size", "0", "--forget-missing", "--json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["cache"]["journals"]
    assert row["status"] == "unreadable" and row["host"] == "elsewhere"
    assert [e.rel for e in checkpoints(tmp_path / "cache")] == before
    assert len(list((tmp_path / "cache" / "journals").glob("*.json"))) == 1


def test_gc_leaves_the_cache_alone_when_a_registry_entry_is_damaged(tmp_path: Path) -> None:
    cli, roots = _one_run(tmp_path)
    (tmp_path / "cache" / "journals" / ("f" * 32 + ".json")).write_text("{")
    before = [e.rel for e in checkpoints(tmp_path / "cache")]
    result = cli("gc", *roots, "--max-cache-size", "0", "--include-unregistered", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)["cache"]
    assert "journal registry entry journals/" in doc["skipped"]
    assert [e.rel for e in checkpoints(tmp_path / "cache")] == before


def _entry(name: str, size: int, mtime: int) -> CacheEntry:
    kind = CacheEntryKind.CHUNK_PLAN if name.startswith("chunkplans/") else None
    return CacheEntry(kind or CacheEntryKind.CHECKPOINT, name, size, mtime)


def test_select_keeps_what_no_registered_journal_can_vouch_for() -> None:
    entries = [
        _entry("workspaces/old/steps/s/l/extract/a.ckpt", 10, 5),  # before the registry
        _entry("workspaces/new/steps/s/l/extract/b.ckpt", 10, 20),  # after it
        _entry("workspaces/pinned/steps/s/l/extract/c.ckpt", 10, 20),  # journal unread
        _entry("chunkplans/ab/abcd.plan", 10, 20),
    ]
    removed = {r.name for r in select(entries, [], None, Retention(epoch_ns=10))}
    assert removed == {entries[1].name, entries[2].name, entries[3].name}
    keep = Retention(epoch_ns=10, pinned=frozenset({"pinned"}), keep_plans=True)
    assert {r.name for r in select(entries, [], 0, keep)} == {entries[1].name}
    everything = Retention(epoch_ns=10, include_unregistered=True)
    assert len(select(entries, [], None, everything)) == 4
    # no registry at all: every file predates it
    assert select(entries, [], 0, Retention(epoch_ns=None)) == []
