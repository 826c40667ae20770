"""A resumed lane reused as a whole (docs/internals.md "Reusing a lane as a whole").

- A no-op resume decides no stage one by one and loads no checkpoint on its own: one
  `load_lane` per lane, one summary per lane, the outputs byte for byte the cold run's.
- Its journal is the walk's: two no-op resumes of one cache, one through the walk (the
  fast path turned off) and one as a whole, journal the same events and audit clean.
- Any one damaged, missing or changed thing (a record flipped or zeroed in its segment,
  a record deleted, an edited input, also under `input_check = "stat"`, a changed
  setting) makes the lane walk, and the resume decides and recomputes exactly what the
  walk alone decides on a copy of the same cache.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
from runjournal.adapters.checkpoints import CheckpointLoader
from runjournal.adapters.journal.application import open_journal
from runjournal.domain.events import ConfigurationResolved, RunAllocated, StageDecided
from runjournal.domain.runner import reused_lane
from runjournal.domain.runner.ledger import RunLedger
from support.cache_entries import checkpoints

TERMS = """name = "whole"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 80
[[steps]]
id = "terms"
module = "builtin.terms"
{params}
"""
PARAGRAPHS = [
    "**Journal entries** record each stage decision of the pipeline run.",
    "A **checkpoint** holds the payload of one stage for the next resume.",
    "The **lane walk** looks up every chunk before it decides the merge.",
    "An **envelope** carries the digests that a reuse decision compares.",
]
DOCS = 3


def _project(root: Path) -> None:
    (root / "docs").mkdir(parents=True)
    for d in range(DOCS):
        text = "\n\n".join(p.replace("stage", f"stage {d}") for p in PARAGRAPHS)
        (root / "docs" / f"d{d}.md").write_text(f"# Doc {d}\n\n{text}\n")
    (root / "pipeline.toml").write_text(TERMS.format(params=""))


def _args(root: Path, *extra: str) -> list[str]:
    return [
        "run",
        str(root / "pipeline.toml"),
        "--output-root",
        str(root / "out"),
        "--cache-root",
        str(root / "cache"),
        "--no-progress",
        "--json",
        *extra,
    ]


def _artifacts(doc: dict) -> dict[str, bytes]:
    return {
        o["name"]: Path(o["path"]).read_bytes()
        for o in doc["outputs"]
        if o["name"].startswith("artifacts/")
    }


def _spy(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Counts of per-stage decisions, per-key loads and whole-lane loads in this process."""
    counts: collections.Counter[str] = collections.Counter()
    decide, load = RunLedger.decide, CheckpointLoader.load
    load_lane = getattr(CheckpointLoader, "load_lane", None)

    def counting_decide(self, *args: Any, **kwargs: Any) -> Any:
        counts["decide"] += 1
        return decide(self, *args, **kwargs)

    def counting_load(self, *args: Any, **kwargs: Any) -> Any:
        counts["load"] += 1
        return load(self, *args, **kwargs)

    def counting_lane(self, *args: Any, **kwargs: Any) -> Any:
        counts["load_lane"] += 1
        return load_lane(self, *args, **kwargs) if load_lane else None

    monkeypatch.setattr(RunLedger, "decide", counting_decide)
    monkeypatch.setattr(CheckpointLoader, "load", counting_load)
    monkeypatch.setattr(CheckpointLoader, "load_lane", counting_lane, raising=False)
    return counts


def _walk_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reused_lane, "whole_lane_loader", lambda run: None)


def _events(out: Path, run_id: str, *, projected: bool) -> list[tuple[str, dict]]:
    """The run's events without what differs between any two runs (id, times, pid)."""
    with open_journal(str(out / "journal.sqlite3"), read_only=True) as store:
        events = list(store.projected_events(run_id) if projected else store.events(run_id))
    out_: list[tuple[str, dict]] = []
    for event in events:
        if type(event) in (RunAllocated, ConfigurationResolved):
            continue
        fields = msgspec.to_builtins(event)
        for name in ("originator_id", "originator_version", "timestamp"):
            fields.pop(name)
        out_.append((type(event).__name__, fields))
    return out_


def _decided(out: Path, run_id: str) -> list[tuple]:
    with open_journal(str(out / "journal.sqlite3"), read_only=True) as store:
        return [
            (e.step, e.lane, e.stage, e.chunk, e.code, e.checkpoint, tuple(sorted(e.recorded)))
            for e in store.projected_events(run_id)
            if type(e) is StageDecided
        ]


def test_a_no_op_resume_decides_no_stage_one_by_one(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(tmp_path)
    cold = invoke(*_args(tmp_path))
    assert cold.exit_code == 0, cold.output
    counts = _spy(monkeypatch)
    again = invoke(*_args(tmp_path, "--resume"))
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    assert set(doc["decisions"]) == {"reused"}
    assert sum(doc["decisions"].values()) == sum(json.loads(cold.stdout)["decisions"].values())
    # no decision object, no per-key load: one whole-lane load per lane
    assert counts == {"load_lane": DOCS}, counts
    assert _artifacts(doc) == _artifacts(json.loads(cold.stdout))
    audit = invoke("journal", "audit", doc["run_id"], "--output-root", str(tmp_path / "out"))
    assert audit.exit_code == 0, audit.output


@pytest.mark.parametrize("blocks", [True, False])
def test_a_lane_reused_as_a_whole_journals_what_the_walk_journals(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, blocks: bool
) -> None:
    _project(tmp_path)
    extra = () if blocks else ("--no-block-summary",)
    assert invoke(*_args(tmp_path)).exit_code == 0
    with monkeypatch.context() as patch:
        _walk_only(patch)
        walked = invoke(*_args(tmp_path, "--resume", *extra))
    assert walked.exit_code == 0, walked.output
    whole = invoke(*_args(tmp_path, "--resume", *extra))
    assert whole.exit_code == 0, whole.output
    a, b = json.loads(walked.stdout), json.loads(whole.stdout)
    assert a["decisions"] == b["decisions"]
    assert _artifacts(a) == _artifacts(b)
    out = tmp_path / "out"
    assert _events(out, a["run_id"], projected=True) == _events(out, b["run_id"], projected=True)
    if not blocks:  # both summaries name the cold run: the stored events are equal too
        assert _events(out, a["run_id"], projected=False) == _events(
            out, b["run_id"], projected=False
        )
    for run_id in (a["run_id"], b["run_id"]):
        audit = invoke("journal", "audit", run_id, "--output-root", str(out))
        assert audit.exit_code == 0, audit.output
    explained = [
        invoke("explain", run_id, "--output-root", str(out)).output.replace(run_id, "RUN")
        for run_id in (a["run_id"], b["run_id"])
    ]
    assert explained[0] == explained[1]


def _flip(cache: Path) -> None:
    [entry, *_] = checkpoints(cache, "workspaces/whole/steps/terms/*d1.md*/extract/*.ckpt")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0x01
    entry.write_bytes(bytes(data))


def _zero(cache: Path) -> None:
    entries = checkpoints(cache, "workspaces/whole/steps/terms/*d1.md*/extract/*.ckpt")
    entries[len(entries) // 2].zero_in_place()


def _delete(cache: Path) -> None:
    [entry] = checkpoints(cache, "workspaces/whole/steps/terms/*d2.md*/normalize.ckpt")
    entry.unlink()


def _edit(root: Path) -> None:
    path = root / "docs" / "d0.md"
    path.write_text(path.read_text().replace("holds the payload", "holds the bytes"))


def _touch(root: Path) -> None:  # same bytes, another mtime: stat mode reads it again
    path = root / "docs" / "d2.md"
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def _grow(root: Path) -> None:  # another size and mtime
    path = root / "docs" / "d1.md"
    path.write_text(path.read_text() + "\nA new **paragraph** at the end.\n")


def _setting(root: Path) -> None:  # the step's config: S differs for every stage
    (root / "pipeline.toml").write_text(TERMS.format(params="[steps.params]\nmax_terms = 7"))


CHANGES = {
    "flipped": ("cache", _flip),
    "zeroed": ("cache", _zero),
    "deleted": ("cache", _delete),
    "edited": ("root", _edit),
    "edited-stat": ("root", _edit),
    "touched-stat": ("root", _touch),
    "grown-stat": ("root", _grow),
    "setting": ("root", _setting),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_any_change_walks_and_recomputes_what_the_walk_would(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    extra = ("--input-check", "stat") if change.endswith("-stat") else ()
    one = tmp_path / "one"
    _project(one)
    cold = invoke(*_args(one, *extra))
    assert cold.exit_code == 0, cold.output
    two = tmp_path / "two"
    shutil.copytree(one, two, copy_function=shutil.copy2)
    where, apply = CHANGES[change]
    for root in (one, two):
        apply(root / "cache" if where == "cache" else root)
    whole = invoke(*_args(one, "--resume", *extra))
    assert whole.exit_code == 0, whole.output
    with monkeypatch.context() as patch:
        _walk_only(patch)
        walked = invoke(*_args(two, "--resume", *extra))
    assert walked.exit_code == 0, walked.output
    a, b = json.loads(whole.stdout), json.loads(walked.stdout)
    assert a["decisions"] == b["decisions"]
    if change != "touched-stat":  # same bytes: read again, found the same, reused
        assert set(a["decisions"]) != {"reused"}, a["decisions"]
    assert _decided(one / "out", a["run_id"]) == _decided(two / "out", b["run_id"])
    assert _artifacts(a) == _artifacts(b)
    audit = invoke("journal", "audit", a["run_id"], "--output-root", str(one / "out"))
    assert audit.exit_code == 0, audit.output
