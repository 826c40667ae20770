"""--help for a newcomer: groups without a command, examples, option types and choices.

Setting options are generated from the settings table, so each is checked against it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from runjournal.cli.main import PLAN_SETTINGS, cli
from runjournal.cli.settings import SETTINGS, SETTINGS_BY_NAME, CliForm, ValueKind
from runjournal.cli.settings.click_options import dest, option_help


def _walk(group: click.Group = cli, path: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _walk(command, (*path, name))


GROUPS = [(), *[path for path, c in _walk() if isinstance(c, click.Group)]]
LEAVES = [path for path, c in _walk() if not isinstance(c, click.Group)]
COMMANDS = {path: command for path, command in _walk()}


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in list(os.environ):
        if name.startswith("RUNJOURNAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    monkeypatch.chdir(tmp_path)
    return CliRunner()


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_tree_is_what_the_docs_list() -> None:
    assert set(GROUPS) == {(), ("runs",), ("journal",), ("projections",), ("config",), ("keys",)}
    # journal checkpoint, journal verify, keys init, journal otel, lineage and check added
    assert len(LEAVES) == 24


# --- 3: a group without a command ------------------------------------------------------


@pytest.mark.parametrize("path", GROUPS, ids=lambda p: " ".join(p) or "runjournal")
def test_group_without_command_prints_its_help_readably(runner: CliRunner, path) -> None:
    result = runner.invoke(cli, list(path), prog_name="runjournal")
    assert result.exit_code == 2  # click's convention: a usage error
    assert result.stdout == ""
    err = result.stderr
    assert err.startswith(f"Usage: runjournal {' '.join(path)}".rstrip() + " [OPTIONS] COMMAND")
    assert "runjournal: error" not in err and "\\x0a" not in err
    lines = err.splitlines()
    assert len(lines) > 5 and "Commands:" in lines
    group = cli if not path else COMMANDS[path]
    for name in group.commands:  # nothing cut off
        assert any(line.strip().startswith(name + " ") for line in lines), name


@pytest.mark.parametrize("path", GROUPS, ids=lambda p: " ".join(p) or "runjournal")
def test_group_help_option_is_exit_0_on_stdout(runner: CliRunner, path) -> None:
    result = runner.invoke(cli, [*path, "--help"], prog_name="runjournal")
    assert result.exit_code == 0 and "Commands:" in result.stdout


def test_group_without_command_through_main(runner: CliRunner, monkeypatch) -> None:
    from runjournal.cli import main as main_mod

    monkeypatch.setattr("sys.argv", ["runjournal", "journal"])
    with pytest.raises(SystemExit) as caught:
        main_mod.main()
    assert caught.value.code == 2


# --- 10: examples and option help -------------------------------------------------------


@pytest.mark.parametrize("path", [*GROUPS, *LEAVES], ids=lambda p: " ".join(p) or "runjournal")
def test_every_command_has_examples(runner: CliRunner, path) -> None:
    result = runner.invoke(cli, [*path, "--help"], prog_name="runjournal")
    assert result.exit_code == 0, result.output
    assert re.search(r"(?m)^\s+Examples?( \(a quick start\))?:$", result.stdout), result.stdout
    examples = [ln.strip() for ln in result.stdout.splitlines() if ln.strip().startswith("runj")]
    examples += [ln.strip() for ln in result.stdout.splitlines() if "runjournal " in ln]
    assert any(("runjournal " + " ".join(path)).strip() in line for line in examples)


@pytest.mark.parametrize("path", LEAVES, ids=" ".join)
def test_every_option_has_a_description(path) -> None:
    for param in COMMANDS[path].params:
        if isinstance(param, click.Option):
            assert param.help and param.help.strip(), (path, param.name)


@pytest.mark.parametrize("path", [("run",), ("config", "show")], ids=" ".join)
def test_all_settings_are_options_with_types_and_choices(runner: CliRunner, path) -> None:
    text = runner.invoke(cli, [*path, "--help"]).stdout
    assert "--jobs INTEGER" in text
    assert "--batch-size INTEGER" in text
    assert "--cache-mode [use|refresh|read-only|bypass]" in text
    assert "--debug [off|summary|trace]" in text
    assert "--output-root DIR" in text and "--journal URL" in text
    assert "--profiles-file FILE" in text and "--profile ID" in text
    assert "--checkpoints / --no-checkpoints" in text
    assert "TEXT" not in text
    flat = _flat(text)
    for spec in SETTINGS:
        assert _flat(option_help(spec)) in flat, spec.name


def _setting_options(command: click.Command) -> dict[str, click.Option]:
    return {
        param.name: param
        for param in command.params
        if isinstance(param, click.Option) and param.name in {dest(s) for s in SETTINGS}
    }


@pytest.mark.parametrize("path", LEAVES, ids=" ".join)
def test_setting_options_come_from_the_table(path) -> None:
    """Every option named like a setting is that table row's option, help and form."""
    by_dest = {dest(spec): spec for spec in SETTINGS}
    options = _setting_options(COMMANDS[path])
    for name, option in options.items():
        spec = by_dest[name]
        assert option.help == option_help(spec)
        declared = "/".join(option.opts + option.secondary_opts)
        assert declared == spec.option
        if spec.kind is ValueKind.CHOICE:
            assert tuple(option.type.choices) == spec.choices
        assert option.default in (None, False)
    if path in (("run",), ("config", "show")):
        assert set(options) == {dest(spec) for spec in SETTINGS}
    elif path in (("recover",),):
        assert set(options) == {"output_root", "cache_root", "debug_root", "journal"}
    elif path == ("plan",):  # the settings that change a run's decisions, and the roots
        assert set(options) == set(PLAN_SETTINGS)
        assert {"resume", "cache_mode", "profile", "cache_root"} <= set(options)
    elif path == ("check",):  # the profile settings; it opens no root
        assert set(options) == {"profile", "profiles_file"}
    elif path == ("keys", "init"):  # the key lives in the user's config dir, no root
        assert set(options) == set()
    elif path == ("gc",):  # the cache root for --cache
        assert set(options) == {"output_root", "cache_root", "debug_root", "journal"}
    else:
        assert set(options) == {"output_root", "journal"}


def test_gc_help_names_the_requirement_and_age_units(runner: CliRunner) -> None:
    text = _flat(runner.invoke(cli, ["gc", "--help"]).stdout)
    assert "One of --keep, --older-than or --cache is required" in text
    for unit in ("s (seconds)", "m (minutes)", "h (hours)", "d (days)", "w (weeks)"):
        assert unit in text
    result = runner.invoke(cli, ["gc"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "runjournal: error: gc needs --keep N and/or --older-than AGE, or --cache "
        "(AGE: a number and a unit, s, m, h, d, w; e.g. 30d)"
    )
    bad = runner.invoke(cli, ["gc", "--older-than", "3 days"])
    assert bad.exit_code == 2 and "(s, m, h, d, w)" in bad.stderr


# --- generated options still resolve like every other origin ---------------------------

PIPELINE = 'name = "p"\ninputs = ["docs/*.md"]\n[[steps]]\nid = "t"\nmodule = "builtin.terms"\n'

# For every setting: the command-line arguments, and the value `config show` reports.
FLAG_CASES = {
    "output_root": (["--output-root", "o"], lambda d: str(d / "o")),
    "cache_root": (["--cache-root", "c"], lambda d: str(d / "c")),
    "debug_root": (["--debug-root", "dbg"], lambda d: str(d / "dbg")),
    "journal": (["--journal", "sqlite:j.sqlite3"], lambda d: str(d / "j.sqlite3")),
    "cache_mode": (["--cache-mode", "READ-ONLY"], lambda d: "read-only"),
    "checkpoints": (["--no-checkpoints"], lambda d: False),
    "resume": (["--resume"], lambda d: True),
    "jobs": (["--jobs", "8"], lambda d: 8),
    "keep_going": (["--keep-going"], lambda d: True),
    "debug": (["--debug", "trace"], lambda d: "trace"),
    "profile": (["--profile", "offline"], lambda d: "offline"),
    "profiles_file": (["--profiles-file", "p.toml"], lambda d: str(d / "p.toml")),
    "chunk_map": (["--chunk-map"], lambda d: True),
    "chunk_map_index": (["--chunk-map-index"], lambda d: True),
    "progress": (["--no-progress"], lambda d: False),
    "batch_size": (["--batch-size", "+12"], lambda d: 12),
    "journal_timeout": (["--journal-timeout", "7"], lambda d: 7),
    "executor": (["--executor", "dask://127.0.0.1:8786"], lambda d: "dask://127.0.0.1:8786"),
    "lease_wait": (["--lease-wait", "fail"], lambda d: "fail"),
    "reuse_summary": (["--no-reuse-summary"], lambda d: False),
    "input_check": (["--input-check", "stat"], lambda d: "stat"),
    "block_summary": (["--no-block-summary"], lambda d: False),
    "llm_mode": (["--llm-mode", "batch"], lambda d: "batch"),
}


def test_flag_cases_cover_the_table() -> None:
    assert set(FLAG_CASES) == set(SETTINGS_BY_NAME)


@pytest.mark.parametrize("name", sorted(FLAG_CASES))
def test_each_generated_flag_reaches_the_resolver(runner: CliRunner, tmp_path, name) -> None:
    Path("pipeline.toml").write_text(PIPELINE)
    args, expected = FLAG_CASES[name]
    result = runner.invoke(cli, ["config", "show", "pipeline.toml", *args, "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)["settings"]}
    cwd = Path(os.path.realpath(tmp_path))
    assert rows[name]["value"] == expected(cwd)
    assert rows[name]["origin"] == "flag"
    from_flags = {n for n, row in rows.items() if row["origin"] == "flag"}
    implied = {"chunk_map"} if name == "chunk_map_index" else set()
    assert from_flags == {name} | implied


def test_switch_on_is_a_flag_too(runner: CliRunner) -> None:
    Path("pipeline.toml").write_text(PIPELINE)
    result = runner.invoke(
        cli,
        ["config", "show", "pipeline.toml", "--checkpoints", "--json"],
        env={"RUNJOURNAL_CHECKPOINTS": "0"},
    )
    rows = {row["name"]: row for row in json.loads(result.stdout)["settings"]}
    assert rows["checkpoints"] == {
        "name": "checkpoints",
        "value": True,
        "origin": "flag",
        "source": None,
    }


BAD_FLAGS = {
    "jobs": (
        ["--jobs", "0"],
        "invalid jobs '0' from flag (--jobs): expected an integer from 1 to 1024",
    ),
    "jobs-text": (
        ["--jobs", "many"],
        "invalid jobs 'many' from flag (--jobs): expected an integer from 1 to 1024",
    ),
    "batch_size": (
        ["--batch-size", "10001"],
        "invalid batch_size '10001' from flag (--batch-size): expected an integer from 1 to 10000",
    ),
    "cache_mode": (
        ["--cache-mode", "fast"],
        "invalid cache_mode 'fast' from flag (--cache-mode): "
        "expected one of use, refresh, read-only, bypass",
    ),
    "llm_mode": (
        ["--llm-mode", "later"],
        "invalid llm_mode 'later' from flag (--llm-mode): expected one of profile, online, batch",
    ),
    "input_check": (
        ["--input-check", "sometimes"],
        "invalid input_check 'sometimes' from flag (--input-check): expected one of verify, stat",
    ),
    "lease_wait": (
        ["--lease-wait", "never"],
        "invalid lease_wait 'never' from flag (--lease-wait): expected one of wait, fail",
    ),
    "debug": (
        ["--debug", "loud"],
        "invalid debug 'loud' from flag (--debug): expected one of off, summary, trace",
    ),
    "journal": (
        ["--journal", "ftp://h/j"],
        "invalid journal 'ftp://h/j' from flag (--journal): "
        "expected a path, sqlite:///PATH or postgresql://...",
    ),
    "executor": (
        ["--executor", "dask://h"],
        "invalid executor 'dask://h' from flag (--executor): "
        "expected threads, processes, dask or dask://HOST:PORT",
    ),
}


@pytest.mark.parametrize("command", [["run"], ["config", "show"]], ids=" ".join)
@pytest.mark.parametrize("case", sorted(BAD_FLAGS))
def test_bad_flag_values_are_one_settings_line(runner: CliRunner, command, case) -> None:
    Path("pipeline.toml").write_text(PIPELINE)
    args, message = BAD_FLAGS[case]
    result = runner.invoke(cli, [*command, "pipeline.toml", *args])
    assert result.exit_code == 2
    assert result.stderr == f"runjournal: error: {message}\n"
    assert not Path("runs").exists()
    as_json = runner.invoke(cli, [*command, "pipeline.toml", *args, "--json"])
    assert as_json.exit_code == 2
    doc = json.loads(as_json.stdout)
    assert doc["exit_code"] == 2 and doc["error"]["message"] == message


def test_switch_forms_of_the_table() -> None:
    forms = {spec.name: spec.cli for spec in SETTINGS}
    assert forms["checkpoints"] is CliForm.SWITCH
    assert forms["progress"] is CliForm.DISABLE
    assert forms["chunk_map"] is CliForm.ENABLE
