"""`find_project` and `resolve_project_settings` (docs/configuration.md "Finding the
project"): which pipeline file a command without a PIPELINE takes its roots from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runjournal.cli.settings import (
    CEILING_ENV_VAR,
    Origin,
    ProjectAmbiguous,
    find_project,
    resolve_project_settings,
)

LOCATING = '[runjournal]\noutput_root = "out"\n'
STEPS = '[[steps]]\nid = "t"\nmodule = "builtin.terms"\n'


def pipeline(table: str = LOCATING, name: str = "p") -> str:
    return f'name = "{name}"\ninputs = []\n{table}{STEPS}'


def resolve(cwd: Path, *, home: Path | None = None, env: dict[str, str] | None = None, **flags):
    return resolve_project_settings(
        flags=flags,
        env=env or {},
        user_config=None,
        user_config_path=None,
        cwd=str(cwd),
        home=str(home) if home else None,
    )


def test_the_nearest_pipeline_directory_gives_the_pipeline_origin(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "pipeline.toml").write_text(pipeline())
    config = resolve(tmp_path / "a" / "b")
    assert config.output_root == str((tmp_path / "a" / "out").resolve())
    assert config.journal == str((tmp_path / "a" / "out" / "journal.sqlite3").resolve())
    origin = config.origins["output_root"]
    assert origin.origin is Origin.PIPELINE
    assert origin.source == os.path.join("..", "pipeline.toml") + " [runjournal]"
    assert config.origins["journal"].origin is Origin.DEFAULT


def test_flags_and_environment_win_value_by_value(tmp_path: Path) -> None:
    (tmp_path / "pipeline.toml").write_text(pipeline(LOCATING + 'debug_root = "dbg"\n'))
    config = resolve(tmp_path, env={"RUNJOURNAL_JOURNAL": "j.sqlite3"}, output_root="o")
    assert config.output_root == str((tmp_path / "o").resolve())
    assert config.origins["output_root"].origin is Origin.FLAG
    assert config.journal == str((tmp_path / "j.sqlite3").resolve())
    assert config.origins["journal"].origin is Origin.ENV
    assert config.debug_root == str((tmp_path / "dbg").resolve())
    assert config.origins["debug_root"].origin is Origin.PIPELINE


def test_what_is_not_a_project_pipeline(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (tmp_path / ".hidden.toml").write_text(pipeline())
    (tmp_path / "broken.toml").write_text("name = \n")
    (tmp_path / "pipeline.toml.bak").write_text(pipeline())
    assert find_project(str(tmp_path), home=None, env={}) is None


def test_a_bad_value_in_the_found_table_is_a_settings_error(tmp_path: Path) -> None:
    (tmp_path / "pipeline.toml").write_text(pipeline(LOCATING + "jobs = 0\n"))
    with pytest.raises(Exception, match=r"invalid jobs 0 from pipeline \(pipeline.toml"):
        resolve(tmp_path)


def test_pipelines_in_one_directory_must_agree(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(pipeline())
    (tmp_path / "b.toml").write_text(pipeline(name="other"))  # same roots: one project
    assert resolve(tmp_path).output_root == str((tmp_path / "out").resolve())
    (tmp_path / "c.toml").write_text(pipeline(LOCATING + 'journal = "j.sqlite3"\n'))
    with pytest.raises(ProjectAmbiguous) as caught:
        resolve(tmp_path)
    assert caught.value.setting == "journal"
    assert "a.toml (out/journal.sqlite3)" in str(caught.value)
    assert "c.toml (j.sqlite3)" in str(caught.value)
    assert resolve(tmp_path, journal="x.sqlite3").journal.endswith("x.sqlite3")


# --- the walk, as a property -----------------------------------------------------------

LEVELS = 5


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    project=st.none() | st.integers(0, LEVELS - 1),
    plain=st.none() | st.integers(0, LEVELS - 1),
    repo=st.none() | st.integers(0, LEVELS - 1),
    home=st.none() | st.integers(0, LEVELS - 1),
    ceiling=st.none() | st.integers(0, LEVELS - 1),
)
def test_the_walk_stops_where_the_rule_says(
    tmp_path_factory: pytest.TempPathFactory,
    project: int | None,
    plain: int | None,
    repo: int | None,
    home: int | None,
    ceiling: int | None,
) -> None:
    """Level 0 is the current directory, LEVELS-1 the top. A locating pipeline at
    `project`, one without roots at `plain`, a `.git` at `repo`; the walk looks at each
    level upward, ends after the home or repository level, never enters the ceiling, and
    the first level with any pipeline file decides."""
    top = tmp_path_factory.mktemp("walk")
    dirs = [top.joinpath(*["d"] * (LEVELS - i)) for i in range(LEVELS)]
    dirs[0].mkdir(parents=True)
    if project is not None:
        (dirs[project] / "pipeline.toml").write_text(pipeline())
    if plain is not None:
        (dirs[plain] / "plain.toml").write_text(pipeline(""))
    if repo is not None:
        (dirs[repo] / ".git").mkdir()
    env = {CEILING_ENV_VAR: str(top)}
    if ceiling is not None:
        env[CEILING_ENV_VAR] += os.pathsep + str(dirs[ceiling])
    found = find_project(str(dirs[0]), home=str(dirs[home]) if home is not None else None, env=env)
    expected = None
    for level in range(LEVELS):
        if level == ceiling:
            break
        if level in (project, plain):
            expected = dirs[level] if level == project else None
            break
        if level in (home, repo):
            break
    if expected is None:
        assert found is None
    else:
        assert found is not None and found.directory == str(expected.resolve())
        assert [os.path.basename(p.path) for p in found.pipelines] == ["pipeline.toml"]
