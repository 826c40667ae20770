"""End-to-end: the installed `runjournal` console script on the glossary example."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

FAILING_PLUGIN = """
import msgspec
from runjournal.domain.modules import Module, Normalized

class Boom(Module):
    name = "test.boom"
    fingerprint = "test.boom/1"
    artifact_kind = "boom"
    schema = "test.boom/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        if "explode" in chunk.text:
            raise ValueError("the module exploded on purpose")
        return len(chunk.text)

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged)
"""


def _run_dirs(root: Path) -> list[Path]:
    if not root.exists():
        return []
    return [p for p in root.iterdir() if p.is_dir() and p.name != "debug"]


class TestExample:
    def test_runs_and_outputs_match_json_and_manifest(self, cli, example, tmp_path):
        out = tmp_path / "out"
        proc, doc = cli.json(
            "run", str(example), "--output-root", str(out), "--cache-root", str(tmp_path / "c")
        )
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
        assert doc["status"] == "succeeded"
        assert doc["error"] is None
        run_dir = Path(doc["run_dir"])
        assert run_dir.is_absolute() and run_dir.parent == out.resolve()
        names = {o["name"] for o in doc["outputs"]}
        assert "glossary.md" in names
        assert any(n.startswith("artifacts/terms/") for n in names)
        manifest = json.loads(Path(doc["manifest"]).read_text())
        assert manifest["status"] == "succeeded"
        assert manifest["workspace_schema_version"] == 3
        assert manifest["run_id"] == doc["run_id"]
        by_name = {o["name"]: o for o in manifest["outputs"]}
        for o in doc["outputs"]:
            data = Path(o["path"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == o["sha256"] == by_name[o["name"]]["sha256"]
            assert len(data) == o["size"] == by_name[o["name"]]["size"]
        assert manifest["decisions"] == doc["decisions"]
        assert set(doc["decisions"]) == {"not_resumed"}
        assert "chunk-map" not in json.dumps(manifest)
        report = json.loads(Path(doc["report"]).read_text())
        assert report["run_id"] == doc["run_id"]
        glossary = (run_dir / "glossary.md").read_text()
        assert glossary.count("\n") > 10

    def test_files_are_private(self, cli, example, tmp_path):
        proc, doc = cli.json(
            "run",
            str(example),
            "--output-root",
            str(tmp_path / "o"),
            "--cache-root",
            str(tmp_path / "c"),
        )
        assert proc.returncode == 0, proc.stderr
        run_dir = Path(doc["run_dir"])
        assert run_dir.stat().st_mode & 0o777 == 0o700
        outputs = {run_dir / o["name"] for o in doc["outputs"]}
        for path in run_dir.rglob("*"):
            # outputs are read-only links to shared objects (docs/operations.md "Layout")
            expected = 0o700 if path.is_dir() else 0o400 if path in outputs else 0o600
            assert path.stat().st_mode & 0o777 == expected, path
        journal = tmp_path / "o" / "journal.sqlite3"
        assert journal.stat().st_mode & 0o077 == 0

    def test_text_output_and_runs_commands(self, cli, example, tmp_path):
        out = tmp_path / "o"
        proc = cli(
            "run", str(example), "--output-root", str(out), "--cache-root", str(tmp_path / "c")
        )
        assert proc.returncode == 0, proc.stderr
        assert "succeeded" in proc.stdout
        assert f"output {out.resolve()}" in proc.stdout and "cache " in proc.stdout
        listed, doc = cli.json("runs", "list", "--output-root", str(out))
        assert listed.returncode == 0, listed.stderr
        assert len(doc["runs"]) == 1 and doc["runs"][0]["status"] == "succeeded"
        run_id = doc["runs"][0]["run_id"]
        shown, view = cli.json("runs", "show", run_id[:12], "--output-root", str(out))
        assert shown.returncode == 0, shown.stderr
        assert view["run_id"] == run_id
        events_proc, events = cli.json("journal", "show", "latest", "--output-root", str(out))
        assert events_proc.returncode == 0, events_proc.stderr
        types = [e["type"] for e in events["events"]]
        assert types[0] == "RunAllocated"
        assert types[-1] == "RunTerminated"
        for needed in (
            "ConfigurationResolved",
            "InputsFingerprinted",
            "ChunkPlanResolved",
            "LaneResolved",
            "StageDecided",
            "StageExecuted",
            "CheckpointWritten",
            "ArtifactGenerated",
            "OutputWritten",
        ):
            assert needed in types
        again = cli("journal", "show", "latest", "--json", "--output-root", str(out))
        assert again.stdout == events_proc.stdout

    def test_version_and_help(self, cli):
        version = cli("--version")
        assert version.returncode == 0 and "runjournal" in version.stdout
        helptext = cli("--help")
        assert helptext.returncode == 0 and "run" in helptext.stdout
        assert cli("run", "--help").returncode == 0


class TestStageFailure:
    def test_module_raising_fails_the_run_cleanly(self, cli, example, tmp_path):
        (example.parent / "plugins" / "boom.py").write_text(FAILING_PLUGIN)
        (example.parent / "docs" / "zz-explode.md").write_text("please explode here\n")
        text = example.read_text()
        text += '\n[[steps]]\nid = "boom"\nmodule = "plugins/boom.py:Boom"\n'
        example.write_text(text)
        out = tmp_path / "o"
        proc, doc = cli.json(
            "run", str(example), "--output-root", str(out), "--cache-root", str(tmp_path / "c")
        )
        assert proc.returncode == 1
        assert "Traceback" not in proc.stderr
        assert "exploded on purpose" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
        assert doc["status"] == "failed"
        assert doc["report"] is None
        assert doc["error"]["step"] == "boom"
        assert doc["error"]["lane"] == "docs/zz-explode.md"
        assert doc["error"]["reason_code"] == "stage_failed"
        run_dir = Path(doc["run_dir"])
        assert sorted(p.name for p in run_dir.iterdir()) == [
            "error.log",
            "failure.json",
            "manifest.json",
        ]
        failure = json.loads((run_dir / "failure.json").read_text())
        assert failure["error"]["reason_code"] == "stage_failed"
        assert "exploded on purpose" in (run_dir / "error.log").read_text()
        assert json.loads((run_dir / "manifest.json").read_text())["status"] == "failed"
        _listed, runs = cli.json("runs", "list", "--output-root", str(out))
        assert runs["runs"][0]["status"] == "failed"


def _write_pipeline(tmp_path: Path, body: str) -> Path:
    (tmp_path / "docs").mkdir(exist_ok=True)
    (tmp_path / "docs" / "a.md").write_text("A **journal** is a log. The **journal** grows.\n")
    path = tmp_path / "pipeline.toml"
    path.write_text(body)
    return path


STEP = '[[steps]]\nid = "terms"\nmodule = "builtin.terms"\n'

P1_ERRORS = {
    "not_toml": ('name = "x"\ninputs = [', "not valid TOML"),
    "unknown_key": (f'name = "x"\ninputs = ["docs/*.md"]\ncolour = 1\n{STEP}', "colour"),
    "unknown_step_key": (
        f'name = "x"\ninputs = ["docs/*.md"]\n{STEP}modul = "y"\n',
        "unknown key 'modul' in steps[0]",
    ),
    "no_steps": ('name = "x"\ninputs = ["docs/*.md"]\n', "steps"),
    "duplicate_ids": (f'name = "x"\ninputs = ["docs/*.md"]\n{STEP}{STEP}', "duplicate step id"),
    "consumes_unknown": (
        f'name = "x"\ninputs = ["docs/*.md"]\n{STEP}consumes = ["nope"]\n',
        "steps[0].consumes",
    ),
    # Steps may be listed in any order (a later producer is fine, docs/pipeline.md), but
    # a dependency cycle is a parse error naming it.
    "consumes_cycle": (
        'name = "x"\ninputs = ["docs/*.md"]\n[[steps]]\nid = "a"\nmodule = "builtin.terms"\n'
        'consumes = ["b"]\n[[steps]]\nid = "b"\nmodule = "builtin.terms"\nconsumes = ["a"]\n',
        "steps: dependency cycle: 'a' consumes 'b' consumes 'a'",
    ),
    "bad_name": (f'name = "no spaces allowed"\ninputs = ["docs/*.md"]\n{STEP}', "name"),
    "bad_cache_mode": (
        f'name = "x"\ninputs = ["docs/*.md"]\n[runjournal]\ncache_mode = "fast"\n{STEP}',
        "cache_mode",
    ),
    # Modules are loaded when the pipeline is checked, before anything is allocated
    # (issue 32: `runjournal check` and the start of `run`).
    "module_missing": (
        'name = "x"\ninputs = ["docs/*.md"]\n[[steps]]\nid = "t"\nmodule = "plugins/none.py:X"\n',
        "steps[0].module",
    ),
    "builtin_unknown": (
        'name = "x"\ninputs = ["docs/*.md"]\n[[steps]]\nid = "t"\nmodule = "builtin.nope"\n',
        "steps[0].module",
    ),
}

P3_ERRORS = {
    "glob_matches_nothing": (f'name = "x"\ninputs = ["nothing/*.md"]\n{STEP}', "inputs"),
}


class TestConfigurationErrors:
    @pytest.mark.parametrize("case", sorted(P1_ERRORS))
    def test_parse_errors_allocate_nothing(self, cli, tmp_path, case):
        body, needle = P1_ERRORS[case]
        pipeline = _write_pipeline(tmp_path, body)
        out = tmp_path / "out"
        proc = cli(
            "run", str(pipeline), "--output-root", str(out), "--cache-root", str(tmp_path / "c")
        )
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr
        assert needle in lines[0]
        assert not out.exists(), "a parse error must allocate nothing (no journal, no run dir)"

    @pytest.mark.parametrize("case", sorted(P3_ERRORS))
    def test_resolution_errors_are_journaled_without_run_dir(self, cli, tmp_path, case):
        body, needle = P3_ERRORS[case]
        pipeline = _write_pipeline(tmp_path, body)
        out = tmp_path / "out"
        proc = cli(
            "run", str(pipeline), "--output-root", str(out), "--cache-root", str(tmp_path / "c")
        )
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr
        assert needle in lines[0] and str(pipeline) in lines[0]
        assert _run_dirs(out) == []
        _listed, runs = cli.json("runs", "list", "--output-root", str(out))
        assert [r["status"] for r in runs["runs"]] == ["failed"]
        _shown, view = cli.json("runs", "show", "latest", "--output-root", str(out))
        assert view["phase"] == "resolution"

    def test_invalid_utf8_input_names_the_file(self, cli, tmp_path):
        pipeline = _write_pipeline(tmp_path, f'name = "x"\ninputs = ["docs/*.md"]\n{STEP}')
        (tmp_path / "docs" / "bad.md").write_bytes(b"caf\xe9 latin-1\n")
        out = tmp_path / "out"
        proc = cli(
            "run", str(pipeline), "--output-root", str(out), "--cache-root", str(tmp_path / "c")
        )
        assert proc.returncode == 2
        assert "docs/bad.md" in proc.stderr and "UTF-8" in proc.stderr
        assert _run_dirs(out) == []

    def test_missing_pipeline_file(self, cli, tmp_path):
        proc = cli("run", str(tmp_path / "nope.toml"), "--output-root", str(tmp_path / "o"))
        assert proc.returncode == 2
        assert "nope.toml" in proc.stderr and "Traceback" not in proc.stderr
        assert not (tmp_path / "o").exists()

    def test_unknown_recompute_step(self, cli, example, tmp_path):
        proc = cli("run", str(example), "--recompute", "nope", "--output-root", str(tmp_path / "o"))
        assert proc.returncode == 2 and "nope" in proc.stderr
        assert not (tmp_path / "o").exists()


NAMING_PLUGIN = """
from runjournal.domain.modules import Module, Normalized, OutputFile

class Named(Module):
    name = "test.named"
    fingerprint = "test.named/1"
    artifact_kind = "named"
    schema = "test.named/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        print("a module printing to stdout must not corrupt --json")
        return 1

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged)

    def outputs(self, artifact, ctx):
        return [OutputFile(name, b"x") for name in ctx.params["names"]]
"""


class TestOutputNames:
    def _pipeline(self, tmp_path: Path, names: list[str]) -> Path:
        (tmp_path / "docs").mkdir(exist_ok=True)
        (tmp_path / "docs" / "a.md").write_text("one paragraph\n")
        (tmp_path / "plugins").mkdir(exist_ok=True)
        (tmp_path / "plugins" / "named.py").write_text(NAMING_PLUGIN)
        path = tmp_path / "pipeline.toml"
        path.write_text(
            'name = "named"\ninputs = ["docs/*.md"]\n[[steps]]\nid = "n"\n'
            'module = "plugins/named.py:Named"\nscope = "corpus"\n'
            f"params = {{ names = {json.dumps(names)} }}\n"
        )
        return path

    def test_good_names_and_print_goes_to_stderr(self, cli, tmp_path):
        pipeline = self._pipeline(tmp_path, ["notes/summary.md"])
        proc, doc = cli.json(
            "run",
            str(pipeline),
            "--output-root",
            str(tmp_path / "o"),
            "--cache-root",
            str(tmp_path / "c"),
        )
        assert proc.returncode == 0, proc.stderr
        assert "must not corrupt" in proc.stderr
        assert (Path(doc["run_dir"]) / "notes" / "summary.md").read_bytes() == b"x"

    @pytest.mark.parametrize(
        ("names", "refusal"),
        [
            (["manifest.json"], "reserved"),
            (["../escape.md"], "dot_component"),
            (["/abs.md"], "absolute"),
            (["a.md", "a.md"], "duplicate"),
            (["Notes.md", "notes.md"], "case_collision"),
            ([".hidden"], "leading_dot"),
        ],
    )
    def test_refused_names_fail_the_run_with_no_outputs(self, cli, tmp_path, names, refusal):
        pipeline = self._pipeline(tmp_path, names)
        out = tmp_path / "o"
        proc, doc = cli.json(
            "run", str(pipeline), "--output-root", str(out), "--cache-root", str(tmp_path / "c")
        )
        assert proc.returncode == 1, proc.stderr
        assert doc["status"] == "failed" and doc["outputs"] == []
        run_dir = Path(doc["run_dir"])
        assert sorted(p.name for p in run_dir.iterdir()) == [
            "error.log",
            "failure.json",
            "manifest.json",
        ]
        failure = json.loads((run_dir / "failure.json").read_text())
        assert failure["refused"][0]["refusal"] == refusal
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["validation"]["status"] == "failed"
        assert not (tmp_path / "escape.md").exists() and not Path("/abs.md").exists()


def test_input_is_named_relative_to_the_pipeline_whatever_the_working_directory(
    cli, example, tmp_path
):
    roots = ["--output-root", str(tmp_path / "o"), "--cache-root", str(tmp_path / "c")]
    doc_path = example.parent / "docs" / "01-overview.md"
    proc, first = cli.json(
        "run", str(example), "--input", str(doc_path.relative_to(tmp_path)), *roots, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    proc, second = cli.json(
        "run",
        "pipeline.toml",
        "--input",
        "docs/01-overview.md",
        "--resume",
        *roots,
        cwd=example.parent,
    )
    assert proc.returncode == 0, proc.stderr
    assert {o["name"] for o in first["outputs"]} == {o["name"] for o in second["outputs"]}
    assert any(
        o["name"].startswith("artifacts/terms/docs__01-overview.md") for o in first["outputs"]
    )
    assert set(second["decisions"]) == {"reused"}
    outside = tmp_path / "outside.md"
    outside.write_text("An **outside** note. The **outside** world.\n")
    proc, third = cli.json("run", str(example), "--input", str(outside), *roots)
    assert proc.returncode == 0, proc.stderr
    assert any("outside.md_" in o["name"] for o in third["outputs"]), third["outputs"]


def test_json_errors_are_one_document(cli, tmp_path):
    proc, doc = cli.json(
        "run", str(tmp_path / "missing.toml"), "--output-root", str(tmp_path / "o")
    )
    assert proc.returncode == 2
    assert doc["status"] == "error" and doc["run_id"] is None and doc["exit_code"] == 2
    assert "missing.toml" in doc["error"]["message"]
    pipeline = _write_pipeline(tmp_path, f'name = "x"\ninputs = ["nothing/*.md"]\n{STEP}')
    proc, doc = cli.json("run", str(pipeline), "--output-root", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert doc["status"] == "failed" and doc["run_id"] and "inputs" in doc["error"]["message"]
    proc, doc = cli.json("runs", "show", "nope", "--output-root", str(tmp_path / "o"))
    assert proc.returncode != 0 and doc["status"] == "error"
