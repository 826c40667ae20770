"""A plugin that declares what its stages read, through the installed console script.

A corpus step whose extract reads only the first letters of each document's words keeps
its extracts when a document gains a word whose letter was already there; `plan`
predicts that run from the checkpoints (its `reads` prints, and stdout stays one JSON
document); the audit re-decides it (docs/modules.md "Declaring what a stage reads").
"""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path

from e2e.test_plan import assert_predicted, recorded

PLUGIN = """
import msgspec
from runjournal.domain.modules import Module, Normalized


class Words(Module):
    fingerprint = "t.words/1"
    artifact_kind = "words"
    schema = "t.words/v1"
    chunk_type = list[str]
    merged_type = list[str]
    artifact_type = list[str]
    override_keys = ()

    def extract(self, chunk, ctx):
        return sorted({w.strip(".").lower() for w in chunk.text.split()})

    def merge(self, parts, ctx):
        return sorted({w for p in parts for w in p})

    def normalize(self, merged, ctx):
        return Normalized(merged)


class Letters(Module):
    fingerprint = "t.letters/1"
    artifact_kind = "letters"
    schema = "t.letters/v1"
    chunk_type = int
    merged_type = int
    artifact_type = dict[str, int]
    override_keys = ()

    def reads(self, stage, ctx):
        print("reads", stage)
        if stage == "extract":
            words = ctx.consumed["words"]
            return {"words": {lane: sorted({w[0] for w in v}) for lane, v in words.items()}}
        return {} if stage == "merge" else None

    def extract(self, chunk, ctx):
        letters = ctx.consumed["words"][chunk.source]
        return sum(1 for w in chunk.text.lower().split() if w[:1] in letters)

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized({lane: len(v) for lane, v in sorted(ctx.consumed["words"].items())})
"""

PIPELINE = """
name = "letters"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 60
[[steps]]
id = "words"
module = "plugins/letters.py:Words"
[[steps]]
id = "letters"
module = "plugins/letters.py:Letters"
scope = "corpus"
consumes = ["words"]
"""


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "plugins").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "plugins" / "letters.py").write_text(textwrap.dedent(PLUGIN), encoding="utf-8")
    (root / "pipeline.toml").write_text(PIPELINE, encoding="utf-8")
    for name, text in {
        "a.md": "Alpha beta gamma.\n\nDelta epsilon zeta.\n\nEta theta iota.\n",
        "b.md": "Omega sigma.\n\nRho upsilon phi.\n",
    }.items():
        (root / "docs" / name).write_text(text, encoding="utf-8")
    return root / "pipeline.toml"


def test_a_plugin_stage_keeps_its_checkpoints_while_its_part_is_unchanged(cli, tmp_path):
    pipeline = _project(tmp_path)
    out, cache = tmp_path / "out", tmp_path / "cache"
    roots = ("--output-root", str(out), "--cache-root", str(cache))
    proc, cold = cli.json("run", str(pipeline), *roots)
    assert proc.returncode == 0, proc.stderr
    proc, plan = cli.json("plan", str(pipeline), *roots, "--resume")
    assert proc.returncode == 0, proc.stderr
    assert "reads extract" in proc.stderr  # the module's print went to stderr
    assert plan["decisions"] == {"reused": sum(cold["decisions"].values())}

    doc = pipeline.parent / "docs" / "b.md"
    doc.write_text(doc.read_text(encoding="utf-8").replace("Omega sigma.", "Omega sigma saga."))
    proc, plan = cli.json("plan", str(pipeline), *roots, "--resume")
    assert proc.returncode == 0, proc.stderr
    proc, warm = cli.json("run", str(pipeline), *roots, "--resume")
    assert proc.returncode == 0, proc.stderr
    decided = recorded(cli, out, warm["run_id"])
    letters = Counter((d[2], d[4]) for d in decided if d[0] == "letters")
    assert ("extract", "dependency_invalidated") not in letters
    extracts = sum(n for (stage, _), n in letters.items() if stage == "extract")
    assert letters[("extract", "input_changed")] == 1  # the edited chunk only
    assert letters[("extract", "reused")] == extracts - 1 >= 1
    assert_predicted(plan, warm, decided)
    proc = cli("journal", "audit", warm["run_id"], "--output-root", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
