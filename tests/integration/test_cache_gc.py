"""Cache retention over random run histories (docs/operations.md "Retention and cleanup").

Each history is a few `run --resume` invocations of a small built-in pipeline, each with
a random parameter and document variant, run in this process with the checkpoint store
and the plan store spied on: what a run wrote, and what it found by its own scope (and so
reused), is what it uses. After `gc --keep K --cache` the cache holds exactly the files
the K kept runs used, and a `--resume` of each kept run's inputs reuses every stage.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from runjournal.adapters.checkpoints import (
    CheckpointLoader,
    CheckpointRecorder,
    Workspace,
    scope_of,
)
from runjournal.adapters.chunkplans import ChunkPlanFileStore
from runjournal.domain.decisions import CheckpointState, Stage
from runjournal.domain.events import PlanOutcome
from support.cache_entries import cache_entries
from support.inprocess import InProcess

PIPELINE = """
name = "retention"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 200
[[steps]]
id = "terms"
module = "builtin.terms"
scope = "document"
params = {{ min_count = {min_count}, max_terms = 20 }}
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

DOC_A = """# Journals

A **journal** is an append-only record of events. The **journal** is never edited.

## Checkpoints

A **checkpoint** is a stored stage result. A **checkpoint** is reused by a resume.
"""

DOC_B = [
    """# Lanes

A **lane** is the unit of work of one step. Every **lane** has three stages.
""",
    """# Lanes

A **lane** is the unit of work of one step. Every **lane** has three stages.

A **stage** is extract, merge or normalize. Each **stage** is decided once.
""",
]

WORKSPACE = "workspaces/retention/"


class Spy:
    """The cache files (relative to the cache root) the current run used."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.used: set[str] = set()
        spy = self
        write, load = CheckpointRecorder.write, CheckpointLoader.load
        get, publish = ChunkPlanFileStore.get, ChunkPlanFileStore.publish

        def recorded(self, key, record):
            spy.used.add(WORKSPACE + Workspace.checkpoint_name(key))
            return write(self, key, record)

        load_lane = CheckpointLoader.load_lane

        def use(key, record) -> None:
            own = scope_of(record)
            # extract: its own D is its scope's; merge and normalize: their scope's D
            # also covers the stages before them, the lane identity names their input
            same = own.step_identity == key.scope.step_identity
            if key.stage is Stage.EXTRACT:
                own_scope = same and own.dependencies == key.scope.dependencies
            else:
                own_scope = same and own.lane_identity == key.scope.lane_identity
            if own_scope:  # found by what it is, not the lane's latest of another scope
                spy.used.add(WORKSPACE + Workspace.checkpoint_name(key))

        def loaded(self, key, codec_id, **kwargs):  # payload=False: a header-only read
            found = load(self, key, codec_id, **kwargs)
            record = found.record
            if found.state is CheckpointState.PRESENT and record is not None:
                use(key, record)
            return found

        def lane_loaded(self, keys, codecs, payloads):  # a lane reused as a whole
            records = load_lane(self, keys, codecs, payloads)
            for key, record in zip(keys, records or [], strict=False):
                use(key, record)
            return records

        def got(self, key):
            lookup = get(self, key)
            if lookup.outcome is PlanOutcome.REUSED:
                spy.used.add(f"chunkplans/{key[:2]}/{key}.plan")
            return lookup

        def published(self, key, spans, facts=None, *, durable=True):
            done = publish(self, key, spans, facts, durable=durable)
            if done:
                spy.used.add(f"chunkplans/{key[:2]}/{key}.plan")
            return done

        monkeypatch.setattr(CheckpointRecorder, "write", recorded)
        monkeypatch.setattr(CheckpointLoader, "load", loaded)
        monkeypatch.setattr(CheckpointLoader, "load_lane", lane_loaded)
        monkeypatch.setattr(ChunkPlanFileStore, "get", got)
        monkeypatch.setattr(ChunkPlanFileStore, "publish", published)

    def take(self) -> set[str]:
        used, self.used = self.used, set()
        return used


def cache_files(cache: Path) -> set[str]:
    """The checkpoints and chunk plans the cache holds (packed or files), by name."""
    return {e.rel for e in cache_entries(cache) if e.rel.endswith((".ckpt", ".plan"))}


class History:
    def __init__(self, root: Path, cache: Path | None = None) -> None:
        self.root = root
        self.cli = InProcess(root / "home")
        self.project = root / "project"
        (self.project / "docs").mkdir(parents=True)
        (self.project / "docs" / "a.md").write_text(DOC_A)
        cache = cache or root / "cache"
        self.roots = ("--output-root", str(root / "out"), "--cache-root", str(cache))

    def prepare(self, min_count: int, variant: int) -> None:
        (self.project / "pipeline.toml").write_text(PIPELINE.format(min_count=min_count))
        (self.project / "docs" / "b.md").write_text(DOC_B[variant])

    def run(self, min_count: int, variant: int) -> dict:
        self.prepare(min_count, variant)
        result = self.cli(
            "run", str(self.project / "pipeline.toml"), *self.roots, "--resume", "--json"
        )
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    def gc(self, *extra: str) -> dict:
        result = self.cli("gc", *self.roots, "--json", *extra)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)


runs = st.lists(
    st.tuples(st.sampled_from([1, 2, 3]), st.sampled_from([0, 1])), min_size=1, max_size=4
)
# (project, min_count, variant): runs of two journals on one cache root, interleaved;
# the first is the one `gc` runs in, so it has a journal
two_journals = st.tuples(st.sampled_from([1, 2, 3]), st.sampled_from([0, 1])).flatmap(
    lambda first: st.lists(
        st.tuples(st.sampled_from("ab"), st.sampled_from([1, 2, 3]), st.sampled_from([0, 1])),
        min_size=1,
        max_size=4,
    ).map(lambda rest: [("a", *first), *rest])
)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=runs, keep=st.integers(min_value=0, max_value=4))
# a resume whose block summary named a run with more lanes of the step than the block's
# units: gc kept every lane of the step (found by the full suite, once)
@example(history=[(1, 0), (1, 1)], keep=1)
@example(history=[(1, 0), (1, 0), (1, 1), (1, 1)], keep=1)
def test_gc_keeps_exactly_what_kept_runs_use_and_a_resume_reuses_it_all(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, history, keep
) -> None:
    with monkeypatch.context() as patch:
        spy = Spy(patch)
        h = History(tmp_path_factory.mktemp("history"))
        used: list[set[str]] = []
        for min_count, variant in history:
            h.run(min_count, variant)
            used.append(spy.take())
        doc = h.gc("--keep", str(keep), "--cache")
    kept = history[::-1][:keep]
    expected = set().union(*used[::-1][:keep])
    cache = h.root / "cache"
    assert cache_files(cache) == expected
    freed = sum(r["size"] for r in doc["cache"]["removed"])
    assert doc["cache"]["freed"] == freed
    assert doc["cache"]["size_after"] == doc["cache"]["size_before"] - freed
    # the removal is a journal event, outside every run
    show = h.cli("runs", "list", *h.roots[:2], "--json")
    assert len(json.loads(show.stdout)["runs"]) == len(history)
    for min_count, variant in kept:
        again = h.run(min_count, variant)
        assert set(again["decisions"]) == {"reused"}, (history, keep, again["decisions"])
        assert again["plans"]["reused"] == 2, again["plans"]


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=two_journals, keep=st.integers(min_value=0, max_value=3))
def test_gc_in_one_journal_keeps_exactly_what_it_and_every_other_journal_use(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, history, keep
) -> None:
    """Two journals (projects) of the same pipeline on one cache root, runs interleaved:
    `gc --keep K --cache` in the first keeps what its K newest runs used and everything
    any run of the second used (docs/operations.md "Cache retention"), and every run of
    the second resumes fully reused."""
    with monkeypatch.context() as patch:
        spy = Spy(patch)
        base = tmp_path_factory.mktemp("two-journals")
        projects = {"a": History(base / "a"), "b": History(base / "b", cache=base / "a" / "cache")}
        used: dict[str, list[set[str]]] = {"a": [], "b": []}
        for which, min_count, variant in history:
            projects[which].run(min_count, variant)
            used[which].append(spy.take())
        doc = projects["a"].gc("--keep", str(keep), "--cache")
    expected = set().union(*used["a"][::-1][:keep], *used["b"])
    assert cache_files(base / "a" / "cache") == expected
    statuses = {row["status"] for row in doc["cache"]["journals"]}
    assert statuses == ({"this", "read"} if used["b"] else {"this"})
    for which, min_count, variant in history:
        if which == "b":
            again = projects["b"].run(min_count, variant)
            assert set(again["decisions"]) == {"reused"}, (history, keep, again["decisions"])
            assert again["plans"]["reused"] == 2, again["plans"]


def test_dry_run_frees_nothing_and_says_how_much_it_would(tmp_path: Path) -> None:
    h = History(tmp_path)
    h.run(2, 0)
    h.run(3, 1)
    before = cache_files(tmp_path / "cache")
    doc = h.gc("--keep", "1", "--cache", "--dry-run")
    assert cache_files(tmp_path / "cache") == before
    assert doc["cache"]["dry_run"] and doc["cache"]["freed"] > 0
    assert "collection" not in doc["cache"]
    done = h.gc("--keep", "1", "--cache")
    assert done["cache"]["freed"] == doc["cache"]["freed"]
    assert {r["name"] for r in done["cache"]["removed"]} == {
        r["name"] for r in doc["cache"]["removed"]
    }


def test_max_cache_size_removes_least_recently_used_first(tmp_path: Path) -> None:
    h = History(tmp_path)
    h.run(1, 0)
    spy_free = cache_files(tmp_path / "cache")
    h.run(3, 0)
    newest = cache_files(tmp_path / "cache") - spy_free
    sizes = {e.rel: e.size for e in cache_entries(tmp_path / "cache")}
    budget = sum(sizes[n] for n in newest) + 1
    doc = h.gc("--max-cache-size", str(budget))
    left = cache_files(tmp_path / "cache")
    assert sum(sizes[n] for n in left) <= budget
    # only files of the older run went: the newest run's own files are all kept
    assert newest <= left
    assert {r["reason"] for r in doc["cache"]["removed"]} == {"over_size"}


def test_a_bad_size_is_one_error_line(tmp_path: Path) -> None:
    h = History(tmp_path)
    h.run(2, 0)
    result = h.cli("gc", *h.roots, "--max-cache-size", "lots")
    assert result.exit_code == 2
    assert "--max-cache-size 'lots'" in result.output and "Traceback" not in result.output


def test_gc_leaves_the_cache_alone_while_a_run_holds_it(tmp_path: Path) -> None:
    h = History(tmp_path)
    h.run(2, 0)
    h.run(3, 0)
    before = cache_files(tmp_path / "cache")
    from runjournal.adapters.cache_lock import CacheLock
    from runjournal.adapters.fsroot import FsRoot

    with FsRoot.open(tmp_path / "cache") as root, CacheLock.shared(root, wait=1):
        doc = h.gc("--keep", "1", "--cache")
    assert doc["cache"]["skipped"] and doc["cache"]["removed"] == []
    assert cache_files(tmp_path / "cache") == before
    assert h.gc("--keep", "1", "--cache")["cache"]["removed"]
