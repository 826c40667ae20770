"""End-to-end: a `merge_streams` module's merge is handed its parts one at a time
(docs/modules.md "Streaming merge"; issue 29: a 25 MB document's merge took all 25,000
extract values at once, 1.6 GiB peak RSS).

A spy module counts, with weak references, how many of its decoded parts are alive while
it merges: with a list every part is (the code before streaming merges), with the iterator
at most the one it is on. The built-in `builtin.terms` streams: its outputs, its merge's
digest and its checkpoints are those of the list merge (a resume across the two reuses
every stage).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from runjournal.adapters.builtin_modules.terms import TermsModule
from support.inprocess import InProcess

SCRIPT = Path(sys.executable).parent / "runjournal"
CHUNKS = 40
PARAGRAPHS = [f"Paragraph number {i} of the spy.\n" for i in range(CHUNKS)]
DOCUMENT = "\n".join(PARAGRAPHS)
CHARS = len(DOCUMENT)  # the chunks cover the document

SPY = """
import weakref

import msgspec
from runjournal.domain.modules import Module, Normalized, OutputFile


class Part(msgspec.Struct, frozen=True, weakref=True):
    n: int
    text: str


class Spy(Module):
    name = "test.spy"
    fingerprint = "test.spy/1"
    artifact_kind = "spy"
    schema = "test.spy/v1"
    chunk_type = Part
    merged_type = dict[str, int]
    artifact_type = dict[str, int]
    merge_streams = True

    def extract(self, chunk, ctx):
        return Part(len(chunk.text), chunk.text * 20)

    def merge(self, parts, ctx):
        refs, most, count, chars = [], 0, 0, 0
        for part in parts:
            refs.append(weakref.ref(part))
            most = max(most, sum(1 for r in refs if r() is not None))
            count += 1
            chars += part.n
        return {"most_alive": most, "parts": count, "chars": chars}

    def normalize(self, merged, ctx):
        return Normalized(merged)

    def outputs(self, artifact, ctx):
        return [OutputFile("spy.json", msgspec.json.encode(artifact))]
"""

SPY_PIPELINE = """name = "spy"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 40
[[steps]]
id = "spy"
module = "plugins/spy.py:Spy"
"""

TERMS_PIPELINE = """name = "terms"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 200
[[steps]]
id = "terms"
module = "builtin.terms"
"""

WORDS = [
    "checkpoint",
    "journal",
    "decision",
    "lane",
    "merge",
    "resume",
    "digest",
    "chunk",
    "ledger",
    "store",
]


def _document(paragraphs: int) -> str:
    out = ["# Streaming merges\n"]
    for i in range(paragraphs):
        words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(6)]
        out.append(f"The `{words[0]}` {words[1]} keeps every {words[2]} {words[3]} number {i}.\n")
    return "\n".join(out)


@pytest.fixture
def spy_project(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "spy.py").write_text(SPY)
    (tmp_path / "pipeline.toml").write_text(SPY_PIPELINE)
    (tmp_path / "docs" / "one.md").write_text(DOCUMENT)
    return tmp_path


def _run(root: Path, out: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [str(SCRIPT), "run", str(root / "pipeline.toml"), "--output-root", str(root / out)]
    argv += ["--cache-root", str(root / f"cache-{out}"), "--no-progress", "-q", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNJOURNAL_")}
    env["HOME"] = str(root / "home")
    return subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=600)


def _spy_outputs(root: Path, out: str) -> list[dict[str, int]]:
    """Every run's spy.json under `out`, oldest first (not the `latest-ok` link)."""
    found = sorted(p for p in (root / out).glob("*/spy.json") if not p.parent.is_symlink())
    return [json.loads(p.read_text()) for p in found]


def _spy_output(root: Path, out: str) -> dict[str, int]:
    [seen] = _spy_outputs(root, out)
    return seen


@pytest.mark.parametrize(
    "args",
    [(), ("--no-checkpoints",), ("--jobs", "2")],
    ids=["parts-read-back", "no-checkpoints", "jobs-2"],
)
def test_a_streaming_merge_holds_one_part_at_a_time(spy_project: Path, args: tuple) -> None:
    run = _run(spy_project, "out", *args)
    assert run.returncode == 0, run.stderr
    seen = _spy_output(spy_project, "out")
    assert seen["parts"] == CHUNKS
    assert seen["chars"] == CHARS
    # the list merge had all 40 alive at once
    assert seen["most_alive"] <= 2, seen


def test_a_streaming_merge_after_a_resume_with_an_edit(spy_project: Path) -> None:
    """Reused parts (kept encoded) and re-extracted ones (read back) in one merge."""
    assert _run(spy_project, "out").returncode == 0
    doc = spy_project / "docs" / "one.md"
    doc.write_text(doc.read_text().replace("number 7 ", "number seven "))
    run = _run(spy_project, "out", "--resume")
    assert run.returncode == 0, run.stderr
    seen = _spy_outputs(spy_project, "out")[-1]
    assert seen["parts"] == CHUNKS
    assert seen["most_alive"] <= 2, seen


@pytest.mark.parametrize("args", [(), ("--no-checkpoints",)], ids=["read-back", "in-memory"])
def test_a_streaming_merge_under_the_processes_executor(spy_project: Path, args: tuple) -> None:
    """Parts left in the store: the merge runs in the coordinator; all in memory: it is
    shipped, and the worker hands the module a list. The same value either way."""
    run = _run(spy_project, "out", "--executor", "processes", "--jobs", "2", *args)
    assert run.returncode == 0, run.stderr
    seen = _spy_output(spy_project, "out")
    assert seen["parts"] == CHUNKS
    assert seen["chars"] == CHARS


def _outputs(root: Path) -> dict[str, bytes]:
    [run_dir] = [
        p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and p.name[0] != "."
    ]
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.name not in {"manifest.json", "report.json", "report.html"}
    }


def _executed(cli: InProcess, out: Path) -> list[tuple[str, str, str]]:
    shown = cli("journal", "show", "latest", "--output-root", str(out), "--jsonl")
    assert shown.exit_code == 0, shown.output
    events = [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]
    return [
        (e["data"]["stage"], e["data"]["chunk"], e["data"]["sha256"])
        for e in events
        if e["type"] == "StageExecuted"
    ]


def test_builtin_terms_streams_to_the_same_merge_outputs_and_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(_document(120))
    (tmp_path / "pipeline.toml").write_text(TERMS_PIPELINE)
    monkeypatch.chdir(tmp_path)
    cli = InProcess(tmp_path / "home")
    executed = {}
    outputs = {}
    for streams in (True, False):
        monkeypatch.setattr(TermsModule, "merge_streams", streams)
        out, cache = tmp_path / f"out-{streams}", tmp_path / f"cache-{streams}"
        result = cli("run", "pipeline.toml", "--output-root", str(out), "--cache-root", str(cache))
        assert result.exit_code == 0, result.output
        executed[streams] = _executed(cli, out)
        outputs[streams] = _outputs(out)
    assert outputs[True] == outputs[False]
    assert executed[True] == executed[False]  # every stage's digest, the merge's too
    assert any(stage == "merge" for stage, _, _ in executed[True])
    # a resume of the list merge's cache, streaming: every stage reused, none executed
    monkeypatch.setattr(TermsModule, "merge_streams", True)
    out, cache = tmp_path / "out-False", tmp_path / "cache-False"
    args = ("--output-root", str(out), "--cache-root", str(cache), "--resume")
    result = cli("run", "pipeline.toml", *args)
    assert result.exit_code == 0, result.output
    assert _executed(cli, out) == []
