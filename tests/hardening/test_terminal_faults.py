"""Terminalization under faults: each terminal write fails alone and combined (in-process).

CI runs as root, where chmod does not stop writes, so faults are injected by passing
fake roots through the composition root's `Factories` (`support.faulty_fs`) and the CLI
runs in this process through click's `CliRunner`. Asserted: exit code, stderr order (the
primary error first), `--json` fields and the journal's `TerminalPersistenceFailed` events.
"""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from runjournal.adapters.debug_bundle import INCOMPLETE_MARKER
from runjournal.adapters.fsroot import FsIOError
from runjournal.cli.compose import Factories
from runjournal.cli.main import cli
from support.faulty_fs import Fault, faulty_factories

PROBE_PLUGIN = """
from runjournal.domain.modules import Module, Normalized

class Probe(Module):
    name = "test.probe"
    fingerprint = "test.probe/1"
    artifact_kind = "probe"
    schema = "test.probe/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        ctx.trace.record("probe", {"chunk": chunk.id, "chars": len(chunk.text)})
        if "explode" in chunk.text:
            raise ValueError("the probe exploded on purpose")
        return len(chunk.text)

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged)
"""

PIPELINE = """
name = "faults"
inputs = ["docs/*.md"]

[chunking]
strategy = "paragraphs"
max_chars = 400

[[steps]]
id = "terms"
module = "builtin.terms"
params = { min_count = 1 }

[[steps]]
id = "probe"
module = "plugins/probe.py:Probe"
"""

# fault name -> (FsRoot method, predicate(root, name), journal target)
FAULTS = {
    "summary": (
        "write_bytes",
        lambda root, name: name == "run.json" and root.path.endswith("/summary"),
        "debug_summary",
    ),
    "trace": ("append_line", lambda root, name: name == "events.jsonl", "debug_trace"),
    "report": ("write_bytes", lambda root, name: name == "report.json", "report"),
    "failure_report": (
        "write_bytes",
        lambda root, name: name == "failure.json" and not root.path.endswith("/summary"),
        "failure_report",
    ),
    "error_log": ("write_bytes", lambda root, name: name == "error.log", "error_log"),
}


def make_pipeline(base: Path, *, failing: bool) -> Path:
    pipe = base / "pipe"
    (pipe / "docs").mkdir(parents=True)
    (pipe / "plugins").mkdir()
    (pipe / "plugins" / "probe.py").write_text(PROBE_PLUGIN)
    (pipe / "docs" / "a.md").write_text("# Alpha\n\nThe **event journal** records runs.\n")
    (pipe / "docs" / "b.md").write_text("# Beta\n\nA **checkpoint** is reused on resume.\n")
    if failing:
        (pipe / "docs" / "zz.md").write_text("please explode here\n")
    (pipe / "pipeline.toml").write_text(PIPELINE)
    return pipe / "pipeline.toml"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated environment: no user config, no RUNJOURNAL_* settings."""
    home = tmp_path / "home"
    home.mkdir()
    for key in list(__import__("os").environ):
        if key.startswith("RUNJOURNAL_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    return tmp_path


def invoke(
    monkeypatch: pytest.MonkeyPatch, *args: str, factories: Factories | None = None
) -> Result:
    monkeypatch.setattr(sys, "argv", ["runjournal", *args])
    return CliRunner().invoke(cli, list(args), obj=factories, catch_exceptions=False)


def _eio(name: str) -> FsIOError:
    return FsIOError(name, errno.EIO, "input/output error (injected)")


def inject(*names: str) -> Factories:
    """Factories whose roots fail the named terminal writes (and nothing else)."""
    return faulty_factories(*(Fault(FAULTS[f][0], FAULTS[f][1], _eio) for f in names))


def roots(base: Path) -> list[str]:
    return [
        "--output-root",
        str(base / "out"),
        "--cache-root",
        str(base / "cache"),
        "--debug-root",
        str(base / "dbg"),
        "--no-progress",
    ]


def journal_events(monkeypatch: pytest.MonkeyPatch, base: Path) -> list[dict]:
    shown = invoke(
        monkeypatch, "journal", "show", "latest", "--json", "--output-root", str(base / "out")
    )
    assert shown.exit_code == 0, shown.stderr
    return json.loads(shown.stdout)["events"]


def stderr_lines(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


CASES = [
    ((), False, 0),
    ((), True, 1),
    (("summary",), False, 3),
    (("trace",), False, 3),
    (("report",), False, 3),
    (("summary",), True, 1),
    (("trace",), True, 1),
    (("failure_report",), True, 1),
    (("error_log",), True, 1),
    (("summary", "trace", "report"), False, 3),
    (("summary", "trace", "failure_report", "error_log"), True, 1),
]


class TestTerminalFaults:
    @pytest.mark.parametrize(("faults", "failing", "code"), CASES)
    def test_exit_code_stderr_order_and_journal(
        self,
        env: Path,
        monkeypatch: pytest.MonkeyPatch,
        faults: tuple[str, ...],
        failing: bool,
        code: int,
    ) -> None:
        pipeline = make_pipeline(env, failing=failing)
        result = invoke(
            monkeypatch,
            "run",
            str(pipeline),
            *roots(env),
            "--debug",
            "trace",
            "--json",
            factories=inject(*faults),
        )
        assert result.exit_code == code, result.stderr
        doc = json.loads(result.stdout)
        targets = {FAULTS[f][2] for f in faults}

        # --json: the run's own status, and one persistence error per failed write.
        assert doc["status"] == ("failed" if failing else "succeeded")
        assert len(doc["persistence_errors"]) == len(faults)
        for target in targets:
            assert any(f"could not write {target}" in e for e in doc["persistence_errors"])

        # stderr: the primary error first, then one line per write that failed.
        lines = stderr_lines(result)
        persisted_lines = [ln for ln in lines if "not persisted: could not write" in ln]
        assert len(persisted_lines) == len(faults)
        if failing:
            assert "failed:" in lines[0] and "exploded on purpose" in lines[0]
            assert lines[1:] == persisted_lines
        else:
            assert lines == persisted_lines

        # journal: the terminal event, then one TerminalPersistenceFailed per failed write.
        events = journal_events(monkeypatch, env)
        types = [e["type"] for e in events]
        last_terminal = max(i for i, t in enumerate(types) if t == "RunTerminated")
        after = events[last_terminal + 1 :]
        assert {e["type"] for e in after} <= {"TerminalPersistenceFailed"}
        assert {e["data"]["target"] for e in after} == targets
        status = events[last_terminal]["data"]["status"]
        assert status == ("failed" if failing else "succeeded")

        # one attempt each: the other terminal files are still there.
        bundle = Path(doc["debug_bundle"])
        assert bundle.is_dir()
        assert (bundle / INCOMPLETE_MARKER).exists() == bool(
            targets & {"debug_summary", "debug_trace"}
        )
        run_dir = Path(doc["run_dir"])
        if failing:
            assert (doc["failure_report"] is None) == ("failure_report" in faults)
            assert (doc["error_log"] is None) == ("error_log" in faults)
            assert (run_dir / "failure.json").exists() != ("failure_report" in faults)
            assert (run_dir / "error.log").exists() != ("error_log" in faults)
            assert (run_dir / "manifest.json").exists()
            assert (bundle / "summary" / "failure.json").exists()
        else:
            assert (doc["report"] is None) == ("report" in faults)
            assert (run_dir / "manifest.json").exists()
            assert not (bundle / "summary" / "failure.json").exists()
        assert (bundle / "summary" / "run.json").exists() != ("summary" in faults)

    def test_resolution_error_with_a_failing_summary(
        self, env: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        pipeline = make_pipeline(env, failing=False)
        pipeline.write_text(pipeline.read_text().replace("docs/*.md", "nothing/*.md"))
        result = invoke(
            monkeypatch,
            "run",
            str(pipeline),
            *roots(env),
            "--debug",
            "summary",
            factories=inject("summary"),
        )
        assert result.exit_code == 2
        lines = stderr_lines(result)
        assert len(lines) == 2
        assert "inputs" in lines[0] and "not persisted" not in lines[0]
        assert "not persisted: could not write debug_summary" in lines[1]
        events = journal_events(monkeypatch, env)
        assert events[-2]["type"] == "RunTerminated"
        assert events[-2]["data"]["phase"] == "resolution"
        assert events[-1]["type"] == "TerminalPersistenceFailed"
        bundles = list((env / "dbg").iterdir())
        assert len(bundles) == 1
        summary = bundles[0] / "summary"
        assert (summary / "resolution.json").exists() and (summary / "failure.json").exists()
        assert (bundles[0] / INCOMPLETE_MARKER).exists()
        assert not [p for p in (env / "out").iterdir() if p.is_dir()]  # no run directory

    def test_allocation_failure_stops_before_anything_else(
        self, env: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        pipeline = make_pipeline(env, failing=False)
        no_space = Fault(
            "mkdir",
            lambda root, name: name == "summary",
            lambda name: FsIOError(name, errno.ENOSPC, "no space left (injected)"),
        )
        result = invoke(
            monkeypatch,
            "run",
            str(pipeline),
            *roots(env),
            "--debug",
            "trace",
            "--json",
            factories=faulty_factories(no_space),
        )
        assert result.exit_code == 3
        lines = stderr_lines(result)
        assert len(lines) == 1 and "cannot allocate debug bundle" in lines[0]
        doc = json.loads(result.stdout)  # --json: one document, the run failed, nothing kept
        assert doc["status"] == "failed" and doc["debug_bundle"] is None
        assert doc["run_dir"] is None and doc["outputs"] == [] and doc["decisions"] == {}
        assert "cannot allocate debug bundle" in doc["error"]["message"]
        assert doc["persistence_errors"] == [doc["error"]["message"]]
        events = journal_events(monkeypatch, env)
        types = [e["type"] for e in events]
        assert types == ["RunAllocated", "ConfigurationResolved", "RunTerminated"]
        assert events[0]["data"]["debug_bundle"] is not None
        assert events[0]["data"]["run_id"] == doc["run_id"]
        assert events[-1]["data"]["status"] == "failed"
        assert "cannot allocate debug bundle" in events[-1]["data"]["error"]["message"]
        assert list((env / "dbg").iterdir()) == []  # the half-made bundle was removed
        assert not [p for p in (env / "out").iterdir() if p.is_dir()]
        assert not (env / "cache" / "workspaces").exists() or not any(
            (env / "cache" / "workspaces").rglob("*.json")
        )
