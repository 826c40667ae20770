"""The inputs' stat cache (docs/configuration.md `input_check`,
docs/internals.md "Input stat cache"): an unchanged file's recorded digest is trusted
without hashing it; a changed one, one changed too close to its recording, or any with
`--verify` is read and hashed again."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from pathlib import Path

import pytest
from runjournal.adapters import sources
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.input_stats import INPUT_STATS, RACY_NS, InputStats
from runjournal.adapters.sources import load_sources

LATER = 10 * RACY_NS  # a recording clock this far ahead: the files look long unchanged


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    base = tmp_path / "project"
    (base / "docs").mkdir(parents=True)
    for i in range(3):
        (base / "docs" / f"d{i}.md").write_text(f"Document {i}: alpha beta gamma.\n")
    return base


@pytest.fixture
def cache(tmp_path: Path):
    with FsRoot.open(tmp_path / "cache", create=True) as root:
        yield root


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times an input was hashed and UTF-8 checked (each entry is one input)."""
    calls: list[int] = []
    real_digest, real_check = sources.digest, sources.check_utf8

    def digest(data: bytes) -> str:
        calls.append(len(data))
        return real_digest(data)

    def check(data: bytes) -> None:
        calls.append(-len(data))
        real_check(data)

    monkeypatch.setattr(sources, "digest", digest)
    monkeypatch.setattr(sources, "check_utf8", check)
    return calls


def load(docs: Path, stats: InputStats | None) -> dict[str, str]:
    found = load_sources(["docs/*.md"], base_dir=str(docs), key="inputs", stats=stats)
    if stats is not None:
        stats.flush()
    return {s.name: s.sha256 for s in found}


def truth(docs: Path) -> dict[str, str]:
    return {
        f"docs/{p.name}": hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((docs / "docs").iterdir())
    }


def ahead(cache: FsRoot, **kw) -> InputStats:
    return InputStats(cache, clock=lambda: time.time_ns() + LATER, **kw)


def test_an_unchanged_input_is_neither_hashed_nor_checked_again(docs, cache, hashed) -> None:
    first = ahead(cache)
    assert load(docs, first) == truth(docs)
    assert len(hashed) == 6 and first.recorded == 3  # each hashed and checked once
    hashed.clear()
    second = ahead(cache)
    assert load(docs, second) == truth(docs)
    assert hashed == [] and second.trusted == 3
    first.close()
    second.close()


def test_the_default_reads_and_hashes_every_input(docs, hashed) -> None:
    assert load(docs, None) == truth(docs)
    assert load(docs, None) == truth(docs)
    assert len(hashed) == 12


def test_an_edit_of_the_same_size_with_its_mtime_restored_is_caught(docs, cache, hashed) -> None:
    """Stat mode sees the ctime the edit and the restored mtime gave it; the default and
    `--verify` read the bytes."""
    load(docs, ahead(cache))
    path = docs / "docs" / "d1.md"
    before = path.stat()
    text = path.read_text()
    path.write_text(text.replace("alpha", "ALPHA"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    expected = truth(docs)
    hashed.clear()
    stats = ahead(cache)
    assert load(docs, stats) == expected
    assert stats.trusted == 2 and len(hashed) == 2  # only the edited file read again
    assert load(docs, None) == expected
    assert load(docs, ahead(cache, trust=False)) == expected


def test_a_record_whose_stat_facts_all_match_is_trusted_and_verify_reads(docs, cache) -> None:
    """What `--verify` is for: a change the stat facts do not show (here a stale digest
    planted in the cache) is trusted by the fast path and caught by a full read."""
    load(docs, ahead(cache))
    with sqlite3.connect(Path(cache.path) / INPUT_STATS) as db:
        db.execute("UPDATE inputs SET sha256 = ? WHERE path LIKE '%d2.md'", ("0" * 64,))
    assert load(docs, ahead(cache))["docs/d2.md"] == "0" * 64
    verified = ahead(cache, trust=False)
    assert load(docs, verified) == truth(docs)
    assert verified.trusted == 0 and verified.recorded == 3
    assert load(docs, ahead(cache)) == truth(docs)  # the records are refreshed


def test_a_file_changed_within_the_racy_window_is_not_trusted(docs, cache, hashed) -> None:
    """git's racy-clean rule: recorded within the timestamp granularity of the file's last
    change, a later write could keep every stat fact, so the record is not trusted."""
    now = time.time_ns()
    stats = InputStats(cache, clock=lambda: now)  # recorded as the files were written
    load(docs, stats)
    hashed.clear()
    again = InputStats(cache, clock=lambda: now + LATER)
    assert load(docs, again) == truth(docs)
    assert again.trusted == 0 and len(hashed) == 6  # all hashed and checked again
    third = InputStats(cache)
    assert load(docs, third) == truth(docs)
    assert third.trusted == 3  # recorded long after their last change: trusted now


def test_the_racy_window_is_measured_from_the_later_of_mtime_and_ctime(docs, cache) -> None:
    stats = InputStats(cache, racy_ns=RACY_NS, clock=lambda: time.time_ns() + LATER)
    load(docs, stats)
    path = docs / "docs" / "d0.md"
    st = path.stat()
    recorded = st.st_ctime_ns + RACY_NS  # exactly at the edge: not trusted
    with sqlite3.connect(Path(cache.path) / INPUT_STATS) as db:
        db.execute("UPDATE inputs SET recorded_ns = ? WHERE path LIKE '%d0.md'", (recorded,))
    fresh = InputStats(cache)
    assert fresh.lookup(os.path.realpath(path), st) is None
    with sqlite3.connect(Path(cache.path) / INPUT_STATS) as db:
        db.execute("UPDATE inputs SET recorded_ns = ? WHERE path LIKE '%d0.md'", (recorded + 1,))
    assert fresh.lookup(os.path.realpath(path), st) == truth(docs)["docs/d0.md"]


def test_a_damaged_stat_cache_is_a_miss_never_an_error(docs, cache, hashed) -> None:
    (Path(cache.path) / INPUT_STATS).write_bytes(b"not a database" * 100)
    stats = ahead(cache)
    assert load(docs, stats) == truth(docs)
    assert stats.trusted == 0 and len(hashed) == 6
    stats.close()


def test_the_cache_file_is_private(docs, cache) -> None:
    stats = ahead(cache)
    load(docs, stats)
    stats.close()
    assert (Path(cache.path) / INPUT_STATS).stat().st_mode & 0o777 == 0o600


def test_the_rows_read_ahead_are_let_go_once_looked_up(docs, cache) -> None:
    """`prefetch` reads every input's row; a run held them all to its end (issue 29:
    peak RSS). Each goes once its input is looked up; a second lookup asks the file."""
    load(docs, ahead(cache))
    stats = ahead(cache, defer_reads=True)
    assert load(docs, stats) == truth(docs)
    assert stats.trusted == 3 and stats._rows == {}
    path = next(iter(stats.paths.values()))
    assert stats.lookup(path, os.stat(path)) == truth(docs)[next(iter(stats.paths))]


def test_a_runs_inputs_read_here_are_kept_by_path_not_bytes(docs, cache) -> None:
    """A run with the stat cache held the bytes of every input the cache did not vouch
    for (a first `stat` run, `--verify`, one after many edits): at 10,000 documents of
    `bench/bench_million.py` its first `stat` resume peaked 80 MiB above a `verify` one
    (issue 29: peak RSS). Such an input is kept as its path, size and digest, read again
    when needed, and bytes changed since it was hashed are `SourceChanged`."""
    for trust in (True, False):
        stats = ahead(cache, defer_reads=True, trust=trust)
        found = load_sources(["docs/*.md"], base_dir=str(docs), key="inputs", stats=stats)
        assert {s.name: s.sha256 for s in found} == truth(docs)
        assert stats.trusted == 0 and stats.recorded == 0  # flushed by `close`
        for source in found:
            assert source.data == b""
            assert source.unread_size == (docs / source.name).stat().st_size
            assert stats.read(source) == (docs / source.name).read_bytes()
        assert stats.chunks(found[0].name, "any plan key") is None
        (docs / "docs" / "d0.md").write_text("Document 0, edited while the run was going.\n")
        with pytest.raises(sources.SourceChanged):
            stats.read(found[0])
        stats.close()
        assert stats.recorded == 3
        (docs / "docs" / "d0.md").write_text("Document 0: alpha beta gamma.\n")


def test_references_keep_their_bytes_with_the_stat_cache(docs, cache) -> None:
    """Every stage's context holds a reference's text: it is not kept by path."""
    stats = ahead(cache, defer_reads=True)
    found = load_sources(["docs/*.md"], base_dir=str(docs), key="references", stats=stats)
    assert [s.data for s in found] == [(docs / s.name).read_bytes() for s in found]
    stats.close()
