"""`runjournal plan` against the run that follows it, for every reason-code scenario.

Each scenario is one the resume and recompute tests build (their helpers are reused):
prime, change one thing, then `plan --json` with the options of the next `run`, then that
run. The plan must list the run's decisions in the run's order, each definite code equal
to the recorded one and each `upstream_pending` one allowing the recorded code; it must
call no module and leave every byte under the output and cache roots (the journal among
them) as it was (docs/operations.md "`plan`").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e.test_llm_cli import DOCS as LLM_DOCS
from e2e.test_llm_cli import Project as LLMProject
from e2e.test_llm_cli import _env as llm_env
from e2e.test_recompute import FAILURES, Probe, _delete, _make_probe, cache_content
from e2e.test_resume_reasons import WORDS, Project
from runjournal.adapters.journal import open_journal
from runjournal.domain.chunking import ChunkingSettings, ChunkStrategy, plan_chunks
from runjournal.domain.events import StageDecided
from support.cache_entries import checkpoints
from support.llm_servers import ServerProcess, start_fake

Decision = tuple[str, str, str, str, str]


def tree_digest(*roots: Path) -> dict[str, str]:
    """sha256 of every file, and every directory, under the roots (the roots included)."""
    out: dict[str, str] = {}
    for root in roots:
        if not root.exists():
            continue
        for path in [root, *sorted(root.rglob("*"))]:
            key = str(path)
            out[key] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def recorded(cli: Any, out: Path, run_id: str) -> list[Decision]:
    """The run's decisions in journal order, as the projections read them: a no-op
    resume's reuse summaries expanded (docs/internals.md "Reuse summaries")."""
    with open_journal(str(out / "journal.sqlite3"), read_only=True) as store:
        return [
            (e.step, e.lane, e.stage.value, e.chunk, e.code.value)
            for e in store.projected_events(run_id)
            if type(e) is StageDecided
        ]


def assert_predicted(plan: dict, run: dict, decided: list[Decision], *, failed_stage=False) -> None:
    """Definite predictions equal the run's codes; pending ones allow what the run decided."""
    if failed_stage:  # the failed stage's second decision, then nothing more is decided
        assert decided[-1][4] == "stage_failed"
        decided = decided[:-1]
    stages = plan["stages"]
    if failed_stage:
        stages = stages[: len(decided)]
    assert [(s["step"], s["lane"], s["stage"], s["chunk"]) for s in stages] == [
        d[:4] for d in decided
    ]
    for stage, decision in zip(stages, decided, strict=True):
        code = decision[4]
        if stage["code"] == "upstream_pending":
            assert code in stage["possible"] and len(stage["possible"]) > 1, (stage, code)
            assert stage["waits_on"] is not None
        else:
            assert (stage["code"], stage["possible"], stage["waits_on"]) == (code, [code], None)
    assert sum(plan["decisions"].values()) == len(plan["stages"])
    calls = plan["estimate"]["module_calls"]
    if not failed_stage:
        assert calls["certain"] <= run["module_calls"] <= calls["certain"] + calls["pending"]
        if not calls["pending"]:
            assert plan["decisions"] == run["decisions"]


# --------------------------------------------------------------------------- resume


def plan_project(project: Project, *extra: str) -> dict:
    """`plan --json` with the run's roots; nothing under them changes, no module is called."""
    roots = (project.out, project.cache)
    before = tree_digest(*roots)
    if project.calls.exists():
        project.calls.unlink()
    proc, doc = project.cli.json(
        "plan",
        str(project.root / "pipeline.toml"),
        "--output-root",
        str(project.out),
        "--cache-root",
        str(project.cache),
        *extra,
        env={"RJ_TEST_CALLS": str(project.calls)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert tree_digest(*roots) == before, "plan changed a file under the roots"
    assert not project.calls.exists(), "plan called a module"
    return doc


def plan_then_run(project: Project, *extra: str, expect: int = 0, failed_stage=False) -> dict:
    plan = plan_project(project, *extra)
    doc = project.run(*extra, expect=expect)
    assert_predicted(
        plan, doc, recorded(project.cli, project.out, doc["run_id"]), failed_stage=failed_stage
    )
    return plan


@pytest.fixture
def project(tmp_path: Path, cli: Any) -> Project:
    return Project(tmp_path / "proj", cli)


class TestResumeScenarios:
    def test_not_resumed_then_reused(self, project: Project) -> None:
        plan = plan_then_run(project)
        assert set(plan["decisions"]) == {"not_resumed"}
        plan = plan_then_run(project, "--resume")
        assert set(plan["decisions"]) == {"reused"}
        assert plan["estimate"]["module_calls"] == {"certain": 0, "pending": 0}

    def test_checkpoint_missing_on_first_resume_and_no_cache_root(self, project: Project) -> None:
        plan = plan_then_run(project, "--resume")
        assert set(plan["decisions"]) == {"checkpoint_missing"}

    def test_no_checkpoints_then_resume(self, project: Project) -> None:
        plan_then_run(project, "--no-checkpoints")
        plan = plan_then_run(project, "--resume")
        assert set(plan["decisions"]) == {"checkpoint_missing"}

    def test_edited_chunk_input_changed_and_pending_consumers(self, project: Project) -> None:
        project.run()
        path = project.root / "docs" / "a.md"
        path.write_text(path.read_text().replace("Kappa lambda mu.", "Kappa lambda mu novel."))
        plan = plan_then_run(project, "--resume")
        changed = [s for s in plan["stages"] if s["code"] == "input_changed"]
        assert {s["step"] for s in changed} == {"words", "count"}  # count sees the chunk too
        assert len([s for s in changed if s["step"] == "words"]) == 1
        pending = [s for s in plan["stages"] if s["code"] == "upstream_pending"]
        assert pending
        merge = next(s for s in pending if s["step"] == "words" and s["stage"] == "merge")
        assert merge["waits_on"]["stage"] == "extract" and merge["waits_on"]["step"] == "words"
        assert "stage_input_changed" in merge["possible"] and "reused" in merge["possible"]
        # count's unchanged chunks wait on the words artifact of the edited lane
        consumer = [s for s in pending if s["step"] == "count" and s["stage"] == "extract"]
        assert consumer and {(s["waits_on"]["step"], s["waits_on"]["stage"]) for s in consumer} == {
            ("words", "normalize")
        }

    def test_early_cutoff(self, project: Project) -> None:
        project.run()
        path = project.root / "docs" / "b.md"
        path.write_text(path.read_text().replace("Omega sigma tau.", "Omega, sigma tau."))
        plan = plan_then_run(project, "--resume")
        assert "input_changed" in plan["decisions"] and "upstream_pending" in plan["decisions"]

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
    def test_component_changes(self, project: Project, change: str, code: str) -> None:
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
        plan = plan_then_run(project, "--resume", *extra)
        assert code in plan["decisions"]

    def test_secret_override_values_do_not_enter_identity(self, project: Project) -> None:
        project.run("--set", "api_key=" + "first-value")
        plan = plan_then_run(project, "--resume", "--set", "api_key=" + "second-value")
        assert set(plan["decisions"]) == {"reused"}

    def test_profile_and_profile_source_changes(self, project: Project) -> None:
        profiles = project.root / "profiles.toml"
        profiles.write_text('[profiles.p1]\nprovider = "offline"\nmodel = "m1"\n')
        project.write_pipeline(params="use_llm = true", profile='profile = "p1"')
        plan_then_run(project, "--profiles-file", str(profiles))
        profiles.write_text('[profiles.p1]\nprovider = "offline"\nmodel = "m2"\n')
        plan = plan_then_run(project, "--resume", "--profiles-file", str(profiles))
        assert "profile_changed" in plan["decisions"]
        profiles.write_text(
            '[profiles.p1]\nprovider = "offline"\nmodel = "m2"\napi_key_env = "RJ_KEY"\n'
        )
        plan = plan_then_run(project, "--resume", "--profiles-file", str(profiles))
        assert "profile_source_changed" in plan["decisions"]

    def test_flipped_bytes_are_corrupt(self, project: Project) -> None:
        project.run()
        for n, path in enumerate(checkpoints(project.cache, "workspaces/reasons/*.ckpt")):
            data = bytearray(path.read_bytes())
            data[(3, 4, 5, 8, len(data) // 2, len(data) - 1)[n % 6]] ^= 0x01
            path.write_bytes(bytes(data))
        plan = plan_then_run(project, "--resume")
        assert set(plan["decisions"]) == {"checkpoint_corrupt"}

    def test_foreign_workspace_schema(self, project: Project) -> None:
        project.run()
        manifest = project.workspace() / "workspace.json"
        manifest.write_text(json.dumps({"workspace_schema_version": 2, "pipeline": "reasons"}))
        plan = plan_then_run(project, "--resume")
        assert set(plan["decisions"]) == {"schema_unsupported"}

    def test_forced_recompute_and_predecessor_reused(self, project: Project) -> None:
        project.run()
        plan = plan_then_run(project, "--recompute", "count")
        assert set(plan["decisions"]) == {"forced_recompute", "predecessor_reused"}
        assert plan["recompute"] == {"selected": ["count"], "forced": ["count"]}

    def test_stage_failed_is_not_predicted_but_everything_before_it_is(
        self, project: Project
    ) -> None:
        project.run()
        plugin = project.root / "plugins" / "words.py"
        plugin.write_text(WORDS.replace("return 1\n", "raise RuntimeError('count broke')\n"))
        plan_then_run(project, expect=1, failed_stage=True)

    def test_deleted_extract_checkpoint(self, project: Project) -> None:
        project.run()
        victim = checkpoints(project.cache, "workspaces/reasons/steps/words/*/extract/*.ckpt")[0]
        victim.unlink()
        plan = plan_then_run(project, "--resume")
        assert plan["decisions"]["checkpoint_missing"] == 1

    def test_profile_moved_from_user_config(self, project: Project) -> None:
        config_dir = project.cli.home / ".config" / "runjournal"
        config_dir.mkdir(parents=True)
        table = '[profiles.u]\nprovider = "offline"\nmodel = "m1"\n'
        (config_dir / "config.toml").write_text(table)
        project.write_pipeline(params="use_llm = true", profile='profile = "u"')
        project.run()
        (config_dir / "config.toml").write_text("")
        profiles = project.root / "profiles.toml"
        profiles.write_text(table)
        plan = plan_then_run(project, "--resume", "--profiles-file", str(profiles))
        assert "profile_source_changed" in plan["decisions"]


# --------------------------------------------------------------------------- recompute


def plan_probe(probe: Probe, *args: str) -> dict:
    roots = (probe.out, probe.cache)
    before = tree_digest(*roots)
    proc, doc = probe.cli.json(
        "plan",
        str(probe.pipeline),
        *args,
        "--output-root",
        str(probe.out),
        "--cache-root",
        str(probe.cache),
        env={"PROBE_LOG": str(probe.log)},
    )
    assert proc.returncode == 0, proc.stderr
    assert tree_digest(*roots) == before, "plan changed a file under the roots"
    assert probe.calls() == [], "plan called a module"
    return doc


def plan_then_run_probe(probe: Probe, *args: str, expect: int = 0) -> dict:
    plan = plan_probe(probe, *args)
    proc, doc = probe.run(*args)
    assert proc.returncode == expect, proc.stderr
    probe.calls()
    decided = recorded(probe.cli, probe.out, doc["run_id"])
    assert_predicted(plan, doc, decided)
    return plan


class TestRecomputeScenarios:
    @pytest.mark.parametrize(
        "selected",
        [("rolls",), ("words",), ("summary",), ("side",), ("rolls", "side")],
        ids=["consumer", "first-step", "leaf", "independent", "several"],
    )
    def test_success(self, primed: Probe, selected: tuple[str, ...]) -> None:
        args = [a for s in selected for a in ("--recompute", s)]
        plan = plan_then_run_probe(primed, *args)
        assert plan["stopped"] is None
        assert set(plan["decisions"]) == {"forced_recompute", "predecessor_reused"}

    def test_without_checkpoints_and_after_resume(self, primed: Probe) -> None:
        plan_then_run_probe(primed, "--recompute", "summary", "--no-checkpoints")
        plan = plan_then_run_probe(primed, "--resume")
        assert set(plan["decisions"]) == {"reused"}
        plan_then_run_probe(primed, "--recompute", "summary")

    @pytest.mark.parametrize("case", sorted(FAILURES))
    def test_failed_predecessor_stops_the_plan_where_the_run_stops(
        self, primed: Probe, case: str
    ) -> None:
        step, lane, code = FAILURES[case](primed)
        plan = plan_then_run_probe(primed, "--recompute", "rolls", expect=1)
        assert plan["stopped"] == plan["stages"][-1]
        assert (plan["stopped"]["step"], plan["stopped"]["lane"], plan["stopped"]["code"]) == (
            step,
            lane,
            code,
        )

    def test_empty_cache(self, probe: Probe) -> None:
        plan_probe(probe, "--recompute", "rolls")
        assert not probe.cache.exists() or list(probe.cache.rglob("*")) == []  # plan writes nothing
        plan = plan_then_run_probe(probe, "--recompute", "rolls", expect=1)
        assert plan["stopped"]["code"] == "predecessor_missing"
        # the failed run wrote nothing but its journal's registry entry
        assert cache_content(probe.cache) == {}

    def test_ordinary_run_after_a_missing_predecessor(self, primed: Probe) -> None:
        _delete("words", "docs/a.md")(primed)
        plan = plan_then_run_probe(primed, "--resume")
        assert plan["decisions"]["checkpoint_missing"] == 1
        assert "upstream_pending" in plan["decisions"]


@pytest.fixture
def primed(cli: Any, tmp_path: Path) -> Probe:
    """A probe with one complete ordinary run in its workspace."""
    probe = _make_probe(cli, tmp_path / "probe")
    proc, _doc = probe.run()
    assert proc.returncode == 0, proc.stderr
    probe.calls()
    return probe


@pytest.fixture
def probe(cli: Any, tmp_path: Path) -> Probe:
    return _make_probe(cli, tmp_path / "probe")


# --------------------------------------------------------------------------- LLM estimates


@pytest.fixture(scope="module")
def fake() -> Iterator[ServerProcess]:
    with start_fake() as server:
        yield server


def test_llm_estimates_from_chunk_sizes_then_from_checkpoints(
    cli: Any, fake: ServerProcess, tmp_path: Path
) -> None:
    """No checkpoint: chunk sizes and the profile's prices; then what the calls cost before."""
    project = LLMProject(tmp_path, fake.url)
    env = llm_env()
    plan_args = ["plan", *project.args()[1:]]

    def plan() -> dict:
        before = tree_digest(project.out, project.cache)
        asked = len(fake.requests())
        proc, doc = cli.json(*plan_args, "--resume", env=env)
        assert proc.returncode == 0, proc.stderr
        assert len(fake.requests()) == asked, "plan called the LLM"
        assert tree_digest(project.out, project.cache) == before
        return doc

    cold = plan()
    executed = cold["estimate"]["llm"]["executed"]
    # llm.json calls the model in its extract stage only (`llm_stages`)
    # llm.json says what it would send (`planned_calls`): the prompt is the chunk
    assert executed["basis"] == {"checkpoint": 0, "chunk_size": 0, "prompt": 5, "unknown": 0}
    settings = ChunkingSettings(ChunkStrategy.PARAGRAPHS, 60)
    chunks = [
        text.encode()[span.start : span.end].decode()
        for text in LLM_DOCS.values()
        for span in plan_chunks(text.encode(), settings)
    ]
    assert len(chunks) == 5
    prompts = sum(-(-len(t) // 4) for t in chunks)
    assert executed["calls"] == 5 and executed["prompt_tokens"] == prompts
    assert executed["cost"] == pytest.approx(prompts * 1.0 / 1e6)
    proc, first = cli.json(*project.args(), env=env)
    assert proc.returncode == 0, proc.stderr
    warm = plan()
    assert set(warm["decisions"]) == {"reused"}
    assert warm["estimate"]["llm"]["saved"] == {
        k: first["llm"]["spent"][k] for k in warm["estimate"]["llm"]["saved"]
    }
    proc, resumed = cli.json(*project.args("--resume"), env=env)
    assert resumed["llm"]["saved"] == first["llm"]["spent"]
    # a changed profile invalidates every stage: its checkpoints say what it cost before
    project.profiles.write_text(project.profiles.read_text().replace("fake-model", "fake-2"))
    proc, changed = cli.json(*plan_args, "--resume", env=env)
    assert proc.returncode == 0, proc.stderr
    assert set(changed["decisions"]) == {"profile_changed"}
    executed = changed["estimate"]["llm"]["executed"]
    assert executed["basis"]["checkpoint"] == 5
    spent = first["llm"]["spent"]
    assert (executed["calls"], executed["tokens"]) == (spent["calls"], spent["tokens"])
    assert executed["cost"] == pytest.approx(spent["cost"])
    text = cli(*plan_args, "--resume", env=env).stdout
    assert "llm: estimated 5 calls" in text and "checkpoint 5" in text


def test_steps_that_never_call_a_model_are_no_llm_calls(
    cli: Any, fake: ServerProcess, tmp_path: Path
) -> None:
    """Issue 26 defect 7: `--profile` is inherited by a step that never calls a model."""
    project = LLMProject(tmp_path, fake.url)
    text = project.pipeline.read_text()
    project.pipeline.write_text(text + '\n[[steps]]\nid = "heads"\nmodule = "builtin.headings"\n')
    env = llm_env()
    plan_args = ["plan", *project.args()[1:]]
    proc, cold = cli.json(*plan_args, env=env)
    assert proc.returncode == 0, proc.stderr
    assert cold["estimate"]["llm"]["executed"]["calls"] == 5  # not 5 + headings' chunks
    proc, first = cli.json(*project.args(), env=env)
    assert proc.returncode == 0, proc.stderr
    assert first["llm"]["spent"]["calls"] == 5
    project.profiles.write_text(project.profiles.read_text().replace("fake-model", "fake-2"))
    proc, changed = cli.json(*plan_args, "--resume", env=env)
    assert proc.returncode == 0, proc.stderr
    assert changed["estimate"]["llm"]["executed"]["calls"] == 5
