"""A one-step project whose plugin logs every extract it starts, sleeps, and fails a
document marked FAIL: for tests of runs that are interrupted, abandoned or failed
(tests/e2e/test_explain_stopped_runs.py, tests/e2e/test_lineage.py)."""

from __future__ import annotations

from pathlib import Path

PLUGIN = """
import os
import time

from runjournal.domain.modules import Module, Normalized


class Sleepy(Module):
    fingerprint = "test.sleepy/1"
    artifact_kind = "count"
    schema = "test.count/v1"
    chunk_type = int
    merged_type = int
    artifact_type = dict[str, int]

    def extract(self, chunk, ctx):
        with open(os.environ["PROBE_LOG"], "a", encoding="utf-8") as fh:
            fh.write(f"{ctx.lane}\\t{chunk.id}\\n")
        time.sleep(float(ctx.params.get("delay", 0.0)))
        if "FAIL" in chunk.text:
            raise RuntimeError(f"refused {ctx.lane}")
        return len(chunk.text.split())

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized({"words": merged})
"""

PIPELINE = """
name = "{name}"
inputs = ["docs/*.md"]

[chunking]
strategy = "paragraphs"
max_chars = 40

[[steps]]
id = "count"
module = "plugins/sleepy.py:Sleepy"
scope = "document"
params = {{ delay = {delay} }}
"""


def write_sleepy_project(
    root: Path, *, name: str, docs: int, delay: float, failing: str = ""
) -> dict[str, str]:
    """The plugin, `docs` two-paragraph documents (the one named `failing` fails) and the
    pipeline under `root`; returns the environment the plugin logs through (its log is
    `root/calls.log`, one `lane<TAB>chunk` line per extract started)."""
    (root / "plugins").mkdir(parents=True)
    (root / "plugins" / "sleepy.py").write_text(PLUGIN)
    (root / "docs").mkdir()
    for i in range(docs):
        doc = f"d{i}.md"
        first = f"Document {i} opens here" + (" FAIL" if doc == failing else "")
        (root / "docs" / doc).write_text(f"{first}.\n\nAnd document {i} closes here.\n")
    (root / "pipeline.toml").write_text(PIPELINE.format(name=name, delay=delay))
    return {"PROBE_LOG": str(root / "calls.log")}
