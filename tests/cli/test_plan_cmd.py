"""`runjournal plan`: its text and `--json` output, its options, its configuration errors."""

from __future__ import annotations

import json
from pathlib import Path

import click
from runjournal.cli.main import cli as cli_group
from support.inprocess import InProcess, one_error_line


def _roots(tmp_path: Path) -> list[str]:
    return ["--output-root", str(tmp_path / "out"), "--cache-root", str(tmp_path / "cache")]


def test_text_output_is_a_table_per_step_with_totals(
    invoke: InProcess, example: Path, tmp_path: Path
) -> None:
    roots = _roots(tmp_path)
    cold = invoke("plan", str(example), *roots)
    assert cold.exit_code == 0, cold.output
    lines = cold.stdout.splitlines()
    assert lines[0] == "plan of 'glossary': predicted, nothing executed or written"
    assert "terms: 24 stages in 6 lanes: 24 executed" in lines
    assert "  not_resumed      24  executed" in lines
    assert "total: 110 stages: 110 executed" in lines
    assert lines[-1] == "module calls: 110"
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()

    ran = invoke("run", str(example), *roots, "--no-progress", "-q")
    assert ran.exit_code == 0, ran.output
    docs = example.parent / "docs"
    first = sorted(docs.glob("*.md"))[0]
    first.write_text(first.read_text() + "\nA new closing paragraph.\n")
    warm = invoke("plan", str(example), *roots, "--resume")
    assert warm.exit_code == 0, warm.output
    text = warm.stdout
    assert "input_changed" in text and "reused" in text
    assert "upstream_pending" in text and "pending: waits on terms normalize" in text
    total = next(line for line in text.splitlines() if line.startswith("total: "))
    assert "reused" in total and "executed" in total and "pending" in total
    assert "if every pending stage executes" in text.splitlines()[-1]


def test_json_lists_stages_in_decision_order_and_counts_them(
    invoke: InProcess, example: Path, tmp_path: Path
) -> None:
    result = invoke("plan", str(example), *_roots(tmp_path), "--recompute", "glossary", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    # a required step is restored before any forced step: nothing is cached, so it stops
    assert doc["stopped"] == doc["stages"][-1] == doc["stages"][0]
    assert doc["stopped"]["code"] == "predecessor_missing"
    assert doc["decisions"] == {"predecessor_missing": 1}
    assert doc["recompute"] == {"selected": ["glossary"], "forced": ["glossary"]}
    text = invoke("plan", str(example), *_roots(tmp_path), "--recompute", "glossary").stdout
    assert "stops: required predecessor step 'terms'" in text and "(exit 1)" in text


def test_configuration_errors_are_one_line_exit_2_and_write_nothing(
    invoke: InProcess, example: Path, tmp_path: Path
) -> None:
    roots = _roots(tmp_path)
    cases = [
        ["plan", str(tmp_path / "missing.toml"), *roots],
        ["plan", str(example), *roots, "--cache-mode", "fast"],
        ["plan", str(example), *roots, "--recompute", "nope"],
        ["plan", str(example), *roots, "--set", "novalue"],
        ["plan", str(example), *roots, "--input", str(tmp_path / "none-*.md")],
        ["plan", str(example), *roots, "--profile", "nobody"],
    ]
    for argv in cases:
        result = invoke(*argv)
        assert result.exit_code == 2, (argv, result.output)
        one_error_line(result.stderr)
        assert result.stdout == ""
        doc = json.loads(invoke(*argv, "--json").stdout)
        assert doc["exit_code"] == 2 and doc["run_id"] is None
    # unlike `run`, a resolution error allocates no run: there is no journal at all
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_the_options_shared_with_run_have_the_same_names_and_help() -> None:
    commands: dict[str, click.Command] = cli_group.commands  # type: ignore[attr-defined]
    run = {p.name: p for p in commands["run"].params}
    plan = {p.name: p for p in commands["plan"].params}
    assert set(plan) <= set(run)
    for name in ("inputs", "recompute", "overrides", "resume", "cache_mode", "profile"):
        assert name in plan
    for name, param in plan.items():
        other = run[name]
        assert param.opts == other.opts, name
        assert getattr(param, "help", None) == getattr(other, "help", None), name
