"""End-to-end: debug bundles through the installed console script.

The rules are docs/operations.md "Debug bundles" and docs/internals.md "Debug bundles".

Independent roots, nothing touched without `--debug`, the bundle's layout and
permissions, trace spans and LLM metadata, reference identities only, the P3 and P2
failure paths, and debug data never being a cache input.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path

import pytest
from runjournal.projections.debug_summary import DebugSummaryProjection

TRACER_PLUGIN = """
from runjournal.domain.modules import Module, Normalized

class Tracer(Module):
    name = "test.tracer"
    fingerprint = "test.tracer/1"
    artifact_kind = "tracer"
    schema = "test.tracer/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        ctx.trace.record("chunk-seen", {"chunk": chunk.id, "chars": len(chunk.text)})
        answer = ctx.llm.complete("count the words of: " + chunk.text)
        return len(answer)

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged)
"""

PIPELINE = """
name = "dbg"
inputs = ["docs/*.md"]
references = ["refs/campaign.md"]

[chunking]
strategy = "paragraphs"
max_chars = 400

[[steps]]
id = "terms"
module = "builtin.terms"
params = { min_count = 1 }

[[steps]]
id = "tracer"
module = "plugins/tracer.py:Tracer"
profile = "offline"
"""


@pytest.fixture
def pipeline(tmp_path: Path) -> Path:
    pipe = tmp_path / "pipe"
    for sub in ("docs", "plugins", "refs"):
        (pipe / sub).mkdir(parents=True)
    (pipe / "plugins" / "tracer.py").write_text(TRACER_PLUGIN)
    (pipe / "docs" / "a.md").write_text("# Alpha\n\nThe **event journal** records runs.\n")
    (pipe / "docs" / "b.md").write_text("# Beta\n\nA **checkpoint** is reused on resume.\n")
    (pipe / "refs" / "campaign.md").write_text(f"generated campaign text {secrets.token_hex(16)}\n")
    (pipe / "pipeline.toml").write_text(PIPELINE)
    return pipe / "pipeline.toml"


def run(cli, pipeline: Path, base: Path, *extra: str, cache: str = "cache"):
    return cli.json(
        "run",
        str(pipeline),
        "--output-root",
        str(base / "out"),
        "--cache-root",
        str(base / cache),
        "--no-progress",
        *extra,
    )


def events(cli, base: Path, run_id: str) -> list[dict]:
    proc = cli("journal", "show", run_id, "--json", "--output-root", str(base / "out"))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["events"]


def trace_records(bundle: Path) -> list[dict]:
    text = (bundle / "trace" / "events.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


class TestOptIn:
    def test_no_debug_touches_no_debug_root(self, cli, pipeline: Path, tmp_path: Path) -> None:
        proc, doc = run(cli, pipeline, tmp_path, "--debug-root", str(tmp_path / "dbg"))
        assert proc.returncode == 0, proc.stderr
        assert doc["debug_bundle"] is None
        assert not (tmp_path / "dbg").exists()
        proc, doc = run(cli, pipeline, tmp_path)  # the default <output root>/debug
        assert proc.returncode == 0, proc.stderr
        assert not (tmp_path / "out" / "debug").exists()
        evs = events(cli, tmp_path, doc["run_id"])
        assert evs[0]["data"]["debug_bundle"] is None
        assert "DebugBundleAllocated" not in [e["type"] for e in evs]

    def test_default_debug_root_is_under_the_output_root(
        self, cli, pipeline: Path, tmp_path: Path
    ) -> None:
        proc, doc = run(cli, pipeline, tmp_path, "--debug", "summary")
        assert proc.returncode == 0, proc.stderr
        bundle = Path(doc["debug_bundle"])
        assert bundle == (tmp_path / "out" / "debug" / doc["run_id"]).resolve()


class TestSummaryBundle:
    def test_layout_independent_roots_and_journal(
        self, cli, pipeline: Path, tmp_path: Path
    ) -> None:
        dbg = tmp_path / "elsewhere" / "dbg"
        proc, doc = run(cli, pipeline, tmp_path, "--debug", "summary", "--debug-root", str(dbg))
        assert proc.returncode == 0, proc.stderr
        run_id = doc["run_id"]
        bundle = Path(doc["debug_bundle"])
        assert bundle == (dbg / run_id).resolve()
        assert tree(bundle) == {
            "summary",
            "summary/command.json",
            "summary/resolution.json",
            "summary/run.json",
            "summary/warnings.json",
        }
        for p in [dbg, *dbg.rglob("*")]:
            assert p.stat().st_mode & 0o777 == (0o700 if p.is_dir() else 0o600), p
        # independent roots: nothing of the bundle in the output or cache root
        assert not (tmp_path / "out" / "debug").exists()
        assert all("summary" not in name for name in tree(tmp_path / "cache"))
        assert json.loads(Path(doc["report"]).read_text())["debug_bundle"] == str(bundle)

        evs = events(cli, tmp_path, run_id)
        types = [e["type"] for e in evs]
        assert types[:3] == ["RunAllocated", "ConfigurationResolved", "DebugBundleAllocated"]
        assert types.index("DebugBundleAllocated") < types.index("InputsFingerprinted")
        assert evs[0]["data"]["debug_bundle"] == str(dbg / run_id)  # planned before allocation
        assert evs[2]["data"] == {"path": str(bundle), "trace": False}

        summary = bundle / "summary"
        run_doc = json.loads((summary / "run.json").read_text())
        assert run_doc["status"] == "succeeded" and run_doc["run_id"] == run_id
        assert run_doc["decisions"] == doc["decisions"]
        assert run_doc["module_calls"] > 0
        resolution = json.loads((summary / "resolution.json").read_text())
        settings = {row["name"]: row for row in resolution["settings"]}
        assert settings["debug"]["value"] == "summary" and settings["debug"]["origin"] == "flag"
        assert [s["id"] for s in resolution["pipeline"]["steps"]] == ["terms", "tracer"]
        command = json.loads((summary / "command.json").read_text())
        assert command["run_id"] == run_id and command["debug"] == "summary"

    def test_reference_bytes_never_in_summaries_or_manifest(
        self, cli, pipeline: Path, tmp_path: Path
    ) -> None:
        ref = (pipeline.parent / "refs" / "campaign.md").read_bytes()
        proc, doc = run(cli, pipeline, tmp_path, "--debug", "trace")
        assert proc.returncode == 0, proc.stderr
        bundle = Path(doc["debug_bundle"])
        unique = ref.split()[-1]
        for path in [*bundle.rglob("*.json*"), Path(doc["manifest"]), Path(doc["report"])]:
            assert unique not in path.read_bytes(), path
        resolution = json.loads((bundle / "summary" / "resolution.json").read_text())
        assert resolution["pipeline"]["references"] == [
            {
                "name": "refs/campaign.md",
                "sha256": hashlib.sha256(ref).hexdigest(),
                "size": len(ref),
            }
        ]


class TestTraceBundle:
    def test_spans_module_material_and_llm_metadata(
        self, cli, pipeline: Path, tmp_path: Path
    ) -> None:
        proc, doc = run(cli, pipeline, tmp_path, "--debug", "trace")
        assert proc.returncode == 0, proc.stderr
        bundle = Path(doc["debug_bundle"])
        assert sorted(p.name for p in bundle.iterdir()) == ["summary", "trace"]
        recs = trace_records(bundle)
        assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1))
        kinds = {r["kind"] for r in recs}
        assert {"plan", "step", "lane", "stage", "module", "llm", "run"} <= kinds
        steps = [(r["name"], r["data"]["event"]) for r in recs if r["kind"] == "step"]
        assert steps == [
            ("terms", "begin"),
            ("terms", "end"),
            ("tracer", "begin"),
            ("tracer", "end"),
        ]
        decided = [r for r in recs if r["kind"] == "stage" and r["data"]["event"] == "decided"]
        assert len(decided) == sum(doc["decisions"].values())
        module = [r for r in recs if r["kind"] == "module"]
        assert module and all(r["name"] == "chunk-seen" for r in module)
        assert {r["data"]["step"] for r in module} == {"tracer"}
        requests = [r for r in recs if r["kind"] == "llm" and r["name"] == "request"]
        responses = [r for r in recs if r["kind"] == "llm" and r["name"] == "response"]
        assert len(requests) == len(responses) == len(module)
        prompt = "count the words of: # Alpha"
        first = requests[0]["data"]
        assert first["provider"] == "offline" and first["profile"] == "offline"
        assert len(first["prompt_sha256"]) == 64 and first["prompt_chars"] > 0
        text = (bundle / "trace" / "events.jsonl").read_text()
        assert prompt not in text and "count the words" not in text  # digests, never prompts
        assert recs[-1]["kind"] == "run" and recs[-1]["data"]["status"] == "succeeded"

    def test_failed_run_bundle(self, cli, pipeline: Path, tmp_path: Path) -> None:
        plugin = pipeline.parent / "plugins" / "tracer.py"
        plugin.write_text(
            plugin.read_text().replace(
                "        answer =",
                "        if 'Beta' in chunk.text:\n"
                "            raise ValueError('tracer failed on purpose')\n"
                "        answer =",
            )
        )
        proc, doc = run(cli, pipeline, tmp_path, "--debug", "trace")
        assert proc.returncode == 1
        bundle = Path(doc["debug_bundle"])
        failure = json.loads((bundle / "summary" / "failure.json").read_text())
        assert failure["status"] == "failed" and failure["phase"] == "execution"
        assert failure["error"]["step"] == "tracer"
        assert "tracer failed on purpose" in failure["error"]["message"]
        recs = trace_records(bundle)
        assert any(r["kind"] == "stage" and r["data"]["event"] == "failed" for r in recs)
        assert not (bundle / "INCOMPLETE").exists()


class TestFailurePaths:
    def test_resolution_error_leaves_resolution_and_failure(
        self, cli, pipeline: Path, tmp_path: Path
    ) -> None:
        pipeline.write_text(pipeline.read_text().replace("docs/*.md", "missing/*.md"))
        proc, _ = run(
            cli, pipeline, tmp_path, "--debug", "summary", "--debug-root", str(tmp_path / "d")
        )
        assert proc.returncode == 2
        assert len(proc.stderr.strip().splitlines()) == 1
        (bundle,) = list((tmp_path / "d").iterdir())
        summary = bundle / "summary"
        resolution = json.loads((summary / "resolution.json").read_text())
        assert resolution["status"] == "failed" and "missing/*.md" in resolution["error"]
        assert resolution["pipeline"] is None and resolution["settings"]
        failure = json.loads((summary / "failure.json").read_text())
        assert failure["phase"] == "resolution"
        assert not (bundle / "INCOMPLETE").exists()
        assert not [p for p in (tmp_path / "out").iterdir() if p.is_dir()]  # no run directory
        evs = events(cli, tmp_path, bundle.name)
        assert [e["type"] for e in evs] == [
            "RunAllocated",
            "ConfigurationResolved",
            "DebugBundleAllocated",
            "RunTerminated",
        ]
        assert evs[-1]["data"]["phase"] == "resolution"

    def test_unallocatable_bundle_exits_3_before_anything_else(
        self, cli, pipeline: Path, tmp_path: Path
    ) -> None:
        # P1 refuses a root under a file (exit 2); a component over NAME_MAX passes P1's
        # checks and fails only when the bundle is allocated (ENAMETOOLONG).
        too_long = tmp_path / ("x" * 300) / "d"
        proc, doc = run(cli, pipeline, tmp_path, "--debug", "trace", "--debug-root", str(too_long))
        assert proc.returncode == 3
        # --json: still one document (docs/operations.md "JSON documents"); nothing was kept.
        assert doc["status"] == "failed" and doc["debug_bundle"] is None
        assert doc["run_dir"] is None and doc["manifest"] is None and doc["report"] is None
        assert doc["outputs"] == [] and doc["decisions"] == {}
        assert doc["error"]["step"] is None and doc["error"]["reason_code"] is None
        assert "cannot allocate debug bundle" in doc["error"]["message"]
        assert doc["persistence_errors"] == [doc["error"]["message"]]
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "cannot allocate debug bundle" in lines[0]
        assert not [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
        listed, runs = cli.json("runs", "list", "--output-root", str(tmp_path / "out"))
        assert listed.returncode == 0, listed.stderr
        (only,) = runs["runs"]
        assert only["status"] == "failed" and only["run_id"] == doc["run_id"]
        evs = events(cli, tmp_path, only["run_id"])
        assert [e["type"] for e in evs] == [
            "RunAllocated",
            "ConfigurationResolved",
            "RunTerminated",
        ]


ENVELOPE = ("format_version", "document")  # added by the bundle's writer, not the fold


def live_summary(bundle: Path, name: str) -> dict | None:
    path = bundle / "summary" / name
    if not path.exists():
        return None
    return {k: v for k, v in json.loads(path.read_text()).items() if k not in ENVELOPE}


class TestRebuiltSummaryEqualsLive:
    def test_successful_and_failed_runs(self, cli, pipeline: Path, tmp_path: Path) -> None:
        plugin = pipeline.parent / "plugins" / "tracer.py"
        plugin.write_text(
            plugin.read_text().replace(
                "return Normalized(merged)",
                "return Normalized(merged, [f'{ctx.lane} counted {merged}'])",
            )
        )
        proc, ok = run(cli, pipeline, tmp_path, "--debug", "summary")
        assert proc.returncode == 0, proc.stderr
        plugin.write_text(
            plugin.read_text().replace(
                "        answer =",
                "        if 'Beta' in chunk.text:\n"
                "            raise ValueError('tracer failed on purpose')\n"
                "        answer =",
            )
        )
        proc, bad = run(cli, pipeline, tmp_path, "--recompute", "tracer", "--debug", "summary")
        assert proc.returncode == 1, proc.stderr
        out = tmp_path / "out"
        rebuilt = cli("projections", "rebuild", "debug_summary", "--output-root", str(out))
        assert rebuilt.returncode == 0, rebuilt.stderr
        views = out / ".runjournal" / "views" / f"debug_summary.v{DebugSummaryProjection.VERSION}"
        for doc in (ok, bad):
            bundle = Path(doc["debug_bundle"])
            stored = json.loads((views / f"{doc['run_id']}.json").read_text())
            assert stored["projection"] == {
                "name": "debug_summary",
                "version": DebugSummaryProjection.VERSION,
            }
            view = stored["view"]
            assert view["run"] == live_summary(bundle, "run.json")
            assert view["warnings"] == live_summary(bundle, "warnings.json")
            assert view["failure"] == live_summary(bundle, "failure.json")

        # Not vacuous: the documents carry what the runs did.
        ok_view = json.loads((views / f"{ok['run_id']}.json").read_text())["view"]
        assert ok_view["failure"] is None and ok_view["run"]["status"] == "succeeded"
        assert ok_view["run"]["decisions"] == ok["decisions"]
        assert ok_view["run"]["module_calls"] == ok["module_calls"] > 0
        assert ok_view["warnings"]["count"] == 2  # one per tracer lane
        assert {(w["step"], w["lane"]) for w in ok_view["warnings"]["warnings"]} == {
            ("tracer", "docs/a.md"),
            ("tracer", "docs/b.md"),
        }
        assert [o["name"] for o in ok_view["run"]["outputs"]] == sorted(
            o["name"] for o in ok["outputs"]
        )
        bad_view = json.loads((views / f"{bad['run_id']}.json").read_text())["view"]
        assert bad_view["run"]["forced_steps"] == ["tracer"]
        assert bad_view["run"]["restored_artifacts"] == 2  # the terms lanes
        assert bad_view["failure"]["status"] == "failed"
        assert bad_view["failure"]["error"]["step"] == "tracer"
        assert bad_view["failure"]["error"] == bad["error"]
        status = cli("projections", "status", "--output-root", str(out), "--json")
        assert status.returncode == 0, status.stderr
        rows = {r["name"]: r for r in json.loads(status.stdout)["projections"]}
        assert not rows["debug_summary"]["stale"] and rows["debug_summary"]["views"] == 2


class TestNeverACacheInput:
    @pytest.mark.parametrize(("first", "second"), [("trace", None), (None, "trace")])
    def test_with_and_without_debug_share_every_checkpoint(
        self, cli, pipeline: Path, tmp_path: Path, first: str | None, second: str | None
    ) -> None:
        def flags(level: str | None) -> list[str]:
            return ["--debug", level] if level else []

        proc, cold = run(cli, pipeline, tmp_path, *flags(first))
        assert proc.returncode == 0, proc.stderr
        proc, warm = run(cli, pipeline, tmp_path, "--resume", *flags(second))
        assert proc.returncode == 0, proc.stderr
        assert set(warm["decisions"]) == {"reused"}
        assert sum(warm["decisions"].values()) == sum(cold["decisions"].values())
        assert warm["module_calls"] == 0
        manifests = [json.loads(Path(d["manifest"]).read_text()) for d in (cold, warm)]
        assert manifests[0]["invocation_identity"] == manifests[1]["invocation_identity"]
        assert (cold["debug_bundle"] is None) == (first is None)
        assert (warm["debug_bundle"] is None) == (second is None)
