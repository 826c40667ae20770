"""Ordinary resume end to end: one scenario per reason code it can produce.

Each scenario runs a small pipeline of test plugins, changes one thing, resumes, and
asserts the code in `run --json` decisions and in `explain --json`. The plugins append a
line per module call to a file, so reuse is proved by counting calls.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.cache_entries import checkpoints

WORDS = """
import os
from runjournal.domain.modules import Module, Normalized, Validator

def _count(ctx, what):
    with open(os.environ["RJ_TEST_CALLS"], "a") as fh:
        fh.write(f"{ctx.step}:{what}\\n")

class Words(Module):
    name = "test.words"
    fingerprint = "test.words/1"
    artifact_kind = "words"
    schema = "test.words/v1"
    chunk_type = list[str]
    merged_type = list[str]
    artifact_type = list[str]

    def extract(self, chunk, ctx):
        _count(ctx, "extract")
        if ctx.params.get("use_llm"):
            ctx.llm.complete(chunk.text)
        words = {w.strip(".,").lower() for w in chunk.text.split() if len(w) > 3}
        return sorted(words)

    def merge(self, parts, ctx):
        _count(ctx, "merge")
        return sorted({w for p in parts for w in p})

    def normalize(self, merged, ctx):
        _count(ctx, "normalize")
        return Normalized(merged)

class NonEmpty(Validator):
    name = "test.nonempty"
    fingerprint = "test.nonempty/1"

    def check(self, artifact, ctx):
        return [] if artifact else ["empty"]

class Count(Module):
    name = "test.count"
    fingerprint = "test.count/1"
    artifact_kind = "count"
    schema = "test.count/v1"
    chunk_type = int
    merged_type = int
    artifact_type = dict[str, int]

    def extract(self, chunk, ctx):
        _count(ctx, "extract")
        return 1

    def merge(self, parts, ctx):
        _count(ctx, "merge")
        return sum(parts)

    def normalize(self, merged, ctx):
        _count(ctx, "normalize")
        return Normalized({lane: len(v) for lane, v in sorted(ctx.consumed["words"].items())})
"""

PIPELINE = """
name = "reasons"
inputs = ["docs/*.md"]
references = ["style.md"]
[chunking]
strategy = "paragraphs"
max_chars = 60
[[steps]]
id = "words"
module = "plugins/words.py:Words"
params = {{ {params} }}
validators = [{validators}]
{profile}
[[steps]]
id = "count"
module = "plugins/words.py:Count"
scope = "corpus"
consumes = ["words"]
"""

DOCS = {
    "a.md": "Alpha beta gamma delta.\n\nEpsilon zeta theta iota.\n\nKappa lambda mu.\n",
    "b.md": "Omega sigma tau.\n\nRho upsilon phi chi psi.\n",
}


class Project:
    def __init__(self, root: Path, cli) -> None:
        self.root = root
        self.cli = cli
        (root / "docs").mkdir(parents=True)
        (root / "plugins").mkdir()
        for name, text in DOCS.items():
            (root / "docs" / name).write_text(text)
        (root / "style.md").write_text("Use plain words.\n")
        (root / "plugins" / "words.py").write_text(WORDS)
        self.calls = root / "calls.txt"
        self.out = root / "out"
        self.cache = root / "cache"
        self.write_pipeline()

    def write_pipeline(self, params: str = "", validators: str = "", profile: str = "") -> None:
        (self.root / "pipeline.toml").write_text(
            PIPELINE.format(params=params, validators=validators, profile=profile)
        )

    def run(self, *extra: str, expect: int = 0) -> dict:
        if self.calls.exists():
            self.calls.unlink()
        proc, doc = self.cli.json(
            "run",
            str(self.root / "pipeline.toml"),
            "--output-root",
            str(self.out),
            "--cache-root",
            str(self.cache),
            *extra,
            env={"RJ_TEST_CALLS": str(self.calls)},
        )
        assert proc.returncode == expect, proc.stderr
        return doc

    def call_count(self, prefix: str = "") -> int:
        if not self.calls.exists():
            return 0
        return sum(1 for line in self.calls.read_text().splitlines() if line.startswith(prefix))

    def explain(self, run_id: str) -> dict:
        proc, doc = self.cli.json("explain", run_id, "--output-root", str(self.out))
        assert proc.returncode == 0, proc.stderr
        return doc

    def workspace(self) -> Path:
        return self.cache / "workspaces" / "reasons"


@pytest.fixture
def project(tmp_path, cli) -> Project:
    return Project(tmp_path / "proj", cli)


def _codes_in_explain(view: dict, step: str | None = None) -> set[str]:
    codes = set()
    for s in view["steps"]:
        if step is None or s["step"] == step:
            for lane in s["lanes"]:
                codes.update(d["code"] for d in lane["decisions"])
    return codes


def assert_code(project: Project, doc: dict, code: str, step: str | None = None) -> None:
    assert code in doc["decisions"], doc["decisions"]
    view = project.explain(doc["run_id"])
    assert code in _codes_in_explain(view, step)
    assert view["totals"] == doc["decisions"]


class TestResume:
    def test_not_resumed_then_reused_with_zero_calls_and_identical_bytes(self, project):
        first = project.run()
        assert set(first["decisions"]) == {"not_resumed"}
        assert project.call_count() > 0
        second = project.run("--resume")
        assert set(second["decisions"]) == {"reused"}
        assert project.call_count() == 0
        assert_code(project, second, "reused")
        a = {o["name"]: o["sha256"] for o in first["outputs"]}
        b = {o["name"]: o["sha256"] for o in second["outputs"]}
        assert a == b

    def test_checkpoint_missing_on_first_resume(self, project):
        doc = project.run("--resume")
        assert set(doc["decisions"]) == {"checkpoint_missing"}
        assert_code(project, doc, "checkpoint_missing")

    def test_no_checkpoints_writes_nothing_under_workspaces(self, project):
        project.run("--no-checkpoints")
        assert not (project.cache / "workspaces").exists()
        doc = project.run("--resume")
        assert set(doc["decisions"]) == {"checkpoint_missing"}

    def test_editing_one_document_reextracts_only_its_changed_chunk(self, project):
        project.run()
        path = project.root / "docs" / "a.md"
        path.write_text(path.read_text().replace("Kappa lambda mu.", "Kappa lambda mu novel."))
        doc = project.run("--resume")
        # words: the changed chunk of a.md is new; its lane merges again; b.md is reused.
        assert project.call_count("words:extract") == 1
        assert project.call_count("words:merge") == 1
        assert_code(project, doc, "input_changed", "words")
        assert_code(project, doc, "stage_input_changed", "words")
        # count (corpus) sees the new chunk, then the changed producer artifact.
        assert_code(project, doc, "dependency_invalidated", "count")
        assert project.call_count("count:extract") >= 1
        text = project.cli("explain", doc["run_id"], "--output-root", str(project.out)).stdout
        assert "dependency_invalidated" in text and "(differs: dependencies" in text

    def test_early_cutoff_when_a_change_yields_the_same_result(self, project):
        project.run()
        path = project.root / "docs" / "b.md"
        path.write_text(path.read_text().replace("Omega sigma tau.", "Omega, sigma tau."))
        doc = project.run("--resume")
        assert project.call_count("words:extract") == 1
        assert project.call_count("words:merge") == 0  # same extract result: merge reused
        assert project.call_count("count:normalize") == 0
        assert "input_changed" in doc["decisions"]

    @pytest.mark.parametrize(
        ("change", "code"),
        [
            ("config", "config_changed"),
            ("module", "module_changed"),
            ("validator", "validator_changed"),
            ("references", "references_changed"),
            ("overrides", "overrides_changed"),
            ("codec", "codec_mismatch"),
        ],
    )
    def test_component_changes_are_named(self, project, change, code):
        project.run("--set", "tone=plain")
        extra = ["--set", "tone=plain"]
        plugin = project.root / "plugins" / "words.py"
        if change == "config":
            project.write_pipeline(params="min = 2")
        elif change == "module":
            plugin.write_text(WORDS.replace('"test.words/1"', '"test.words/2"'))
        elif change == "validator":
            project.write_pipeline(validators='"plugins/words.py:NonEmpty"')
        elif change == "references":
            (project.root / "style.md").write_text("Use short words.\n")
        elif change == "overrides":
            extra = ["--set", "tone=formal"]
        elif change == "codec":
            plugin.write_text(
                WORDS.replace("chunk_type = list[str]", "chunk_type = list[str] | None", 1)
            )
        doc = project.run("--resume", *extra)
        assert_code(project, doc, code, "words")
        assert (
            "reused"
            not in {
                d["code"]
                for s in project.explain(doc["run_id"])["steps"]
                if s["step"] == "words"
                for lane in s["lanes"]
                for d in lane["decisions"]
                if d["stage"] == "extract"
            }
            or change == "codec"
        )

    def test_secret_override_values_do_not_enter_identity(self, project):
        project.run("--set", "api_key=" + "first-value")
        doc = project.run("--resume", "--set", "api_key=" + "second-value")
        assert set(doc["decisions"]) == {"reused"}

    def test_profile_and_profile_source_changes(self, project):
        profiles = project.root / "profiles.toml"
        profiles.write_text('[profiles.p1]\nprovider = "offline"\nmodel = "m1"\n')
        project.write_pipeline(params="use_llm = true", profile='profile = "p1"')
        project.run("--profiles-file", str(profiles))
        profiles.write_text('[profiles.p1]\nprovider = "offline"\nmodel = "m2"\n')
        doc = project.run("--resume", "--profiles-file", str(profiles))
        assert_code(project, doc, "profile_changed", "words")
        _proc, events = project.cli.json(
            "journal", "show", doc["run_id"], "--output-root", str(project.out)
        )
        observed = [e["data"] for e in events["events"] if e["type"] == "ProfileObserved"]
        assert [(o["step"], o["profile_id"], o["model"]) for o in observed] == [
            ("words", "p1", "m2")
        ]
        # same profile id, same model; only where/how it is defined changes -> cold miss
        profiles.write_text(
            '[profiles.p1]\nprovider = "offline"\nmodel = "m2"\napi_key_env = "RJ_KEY"\n'
        )
        doc = project.run("--resume", "--profiles-file", str(profiles))
        assert_code(project, doc, "profile_source_changed", "words")
        assert "reused" not in {
            d["code"]
            for s in project.explain(doc["run_id"])["steps"]
            if s["step"] == "words"
            for lane in s["lanes"]
            for d in lane["decisions"]
        }

    def test_flipped_byte_in_any_checkpoint_is_corrupt_and_outputs_are_the_same(self, project):
        first = project.run()
        files = checkpoints(project.cache, "workspaces/reasons/*.ckpt")
        assert files
        # Header bytes too: magic, version, header length, the middle, the digest.
        for n, path in enumerate(files):
            data = bytearray(path.read_bytes())
            position = (3, 4, 5, 8, len(data) // 2, len(data) - 1)[n % 6]
            data[position] ^= 0x01
            path.write_bytes(bytes(data))
        doc = project.run("--resume")
        assert set(doc["decisions"]) == {"checkpoint_corrupt"}
        assert_code(project, doc, "checkpoint_corrupt")
        a = {o["name"]: o["sha256"] for o in first["outputs"]}
        assert a == {o["name"]: o["sha256"] for o in doc["outputs"]}
        again = project.run("--resume")
        assert set(again["decisions"]) == {"reused"}

    def test_foreign_workspace_schema_is_schema_unsupported(self, project):
        project.run()
        manifest = project.workspace() / "workspace.json"
        manifest.write_text(json.dumps({"workspace_schema_version": 2, "pipeline": "reasons"}))
        doc = project.run("--resume")
        assert set(doc["decisions"]) == {"schema_unsupported"}
        assert_code(project, doc, "schema_unsupported")

    def test_stage_failed_and_forced_recompute(self, project):
        project.run()
        doc = project.run("--recompute", "count")
        assert_code(project, doc, "forced_recompute", "count")
        assert_code(project, doc, "predecessor_reused", "words")
        plugin = project.root / "plugins" / "words.py"
        plugin.write_text(WORDS.replace("return 1\n", "raise RuntimeError('count broke')\n"))
        doc = project.run(expect=1)
        assert doc["error"]["reason_code"] == "stage_failed"
        assert "stage_failed" in doc["decisions"]

    def test_reasons_command_matches_code(self, cli):
        from runjournal.domain.reasons import CATEGORY_OF, DESCRIPTIONS, ReasonCode

        proc, doc = cli.json("reasons")
        assert proc.returncode == 0
        assert doc["reasons"] == [
            {"code": c.value, "category": CATEGORY_OF[c].value, "description": DESCRIPTIONS[c]}
            for c in ReasonCode
        ]
        text = cli("reasons").stdout
        assert all(c.value in text for c in ReasonCode)


def test_explain_step_filter_and_unknown_run(project):
    doc = project.run()
    proc, view = project.cli.json(
        "explain", doc["run_id"], "--step", "count", "--output-root", str(project.out)
    )
    assert proc.returncode == 0
    assert [s["step"] for s in view["steps"]] == ["count"]
    proc = project.cli("explain", "nope", "--output-root", str(project.out))
    assert proc.returncode != 0 and "nope" in proc.stderr
    assert os.path.exists(project.out / "journal.sqlite3")


def test_a_deleted_extract_checkpoint_of_unchanged_bytes_is_checkpoint_missing(project):
    project.run()
    victim = checkpoints(project.cache, "workspaces/reasons/steps/words/*/extract/*.ckpt")[0]
    victim.unlink()
    doc = project.run("--resume")
    assert doc["decisions"]["checkpoint_missing"] == 1
    assert "input_changed" not in doc["decisions"]
    assert project.call_count("words:extract") == 1


def test_user_config_profiles_and_moving_a_profile_is_a_source_change(project):
    config_dir = project.cli.home / ".config" / "runjournal"
    config_dir.mkdir(parents=True)
    table = '[profiles.u]\nprovider = "offline"\nmodel = "m1"\n'
    (config_dir / "config.toml").write_text(table)
    project.write_pipeline(params="use_llm = true", profile='profile = "u"')
    doc = project.run()
    _proc, events = project.cli.json(
        "journal", "show", doc["run_id"], "--output-root", str(project.out)
    )
    observed = [e["data"] for e in events["events"] if e["type"] == "ProfileObserved"]
    assert observed[0]["source_kind"] == "user-config"
    # the same profile, now defined in a profiles file: same profile, another source
    (config_dir / "config.toml").write_text("")
    profiles = project.root / "profiles.toml"
    profiles.write_text(table)
    doc = project.run("--resume", "--profiles-file", str(profiles))
    assert_code(project, doc, "profile_source_changed", "words")
