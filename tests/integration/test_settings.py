"""Effective configuration: precedence, origins, path resolution, errors, roots rule."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
from runjournal.cli.settings import (
    SETTINGS,
    SETTINGS_BY_NAME,
    CacheMode,
    DebugLevel,
    EffectiveConfig,
    InputCheck,
    InvalidSettingValue,
    LeaseWaitMode,
    LLMModeSetting,
    Origin,
    RootsConflict,
    SettingsError,
    UnknownSettingKey,
    UserConfigUnreadable,
    check_roots,
    format_table,
    load_user_config,
    resolve_settings,
)
from support import paths

DOCS = paths.DOCS / "configuration.md"
GIVEN_ORIGINS = (Origin.FLAG, Origin.ENV, Origin.PIPELINE, Origin.USER_CONFIG)


class Dirs(msgspec.Struct, frozen=True):
    cwd: str
    pipeline: str
    user: str
    xdg_cache: str

    @property
    def user_config(self) -> str:
        return os.path.join(self.user, "config.toml")


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Dirs:
    root = os.path.realpath(tmp_path)
    made = Dirs(
        cwd=os.path.join(root, "cwd"),
        pipeline=os.path.join(root, "pipe"),
        user=os.path.join(root, "user"),
        xdg_cache=os.path.join(root, "xdg-cache"),
    )
    for path in (made.cwd, made.pipeline, made.user):
        os.mkdir(path)
    monkeypatch.setenv("XDG_CACHE_HOME", made.xdg_cache)
    return made


def resolve(
    d: Dirs,
    *,
    flags: dict[str, object] | None = None,
    env: dict[str, str] | None = None,
    pipeline: dict[str, object] | None = None,
    user: dict[str, object] | None = None,
) -> EffectiveConfig:
    return resolve_settings(
        flags=flags or {},
        env=env or {},
        pipeline_table=pipeline,
        pipeline_dir=d.pipeline,
        user_config=user,
        user_config_path=d.user_config,
        cwd=d.cwd,
        pipeline_file="pipeline.toml",
    )


def env_name(setting: str) -> str:
    return "RUNJOURNAL_" + setting.upper()


# --- precedence -------------------------------------------------------------------------

Expect = Callable[[Dirs], object]


def _path(attr: str, *parts: str) -> Expect:
    return lambda d: os.path.join(getattr(d, attr), *parts)


def _const(value: object) -> Expect:
    return lambda d: value


def _path_samples(stem: str) -> dict[Origin, tuple[object, Expect]]:
    return {
        Origin.FLAG: (f"f-{stem}", _path("cwd", f"f-{stem}")),
        Origin.ENV: (f"e-{stem}", _path("cwd", f"e-{stem}")),
        Origin.PIPELINE: (f"p-{stem}", _path("pipeline", f"p-{stem}")),
        Origin.USER_CONFIG: (f"sub/u-{stem}", _path("user", "sub", f"u-{stem}")),
    }


def _plain(values: list[tuple[object, object]]) -> dict[Origin, tuple[object, Expect]]:
    return {
        origin: (raw, _const(parsed))
        for origin, (raw, parsed) in zip(GIVEN_ORIGINS, values, strict=True)
    }


# For each setting: (raw value, expected typed value) per origin; env raws are strings.
SAMPLES: dict[str, dict[Origin, tuple[object, Expect]]] = {
    "output_root": _path_samples("out"),
    "cache_root": _path_samples("cache"),
    "debug_root": _path_samples("debug"),
    "journal": {
        Origin.FLAG: ("postgresql://u@db.local/rj", _const("postgresql://u@db.local/rj")),
        Origin.ENV: ("e.sqlite3", _path("cwd", "e.sqlite3")),
        Origin.PIPELINE: ("sqlite:p.sqlite3", _path("pipeline", "p.sqlite3")),
        Origin.USER_CONFIG: ("u.sqlite3", _path("user", "u.sqlite3")),
    },
    "cache_mode": _plain(
        [
            ("bypass", CacheMode.BYPASS),
            ("READ-ONLY", CacheMode.READ_ONLY),
            ("refresh", CacheMode.REFRESH),
            ("read-only", CacheMode.READ_ONLY),
        ]
    ),
    "checkpoints": _plain([(False, False), ("yes", True), (False, False), (True, True)]),
    "resume": _plain([(True, True), ("off", False), (True, True), (False, False)]),
    "keep_going": _plain([(True, True), ("off", False), (True, True), (False, False)]),
    "jobs": _plain([(8, 8), ("7", 7), (6, 6), (5, 5)]),
    "debug": _plain(
        [
            ("trace", DebugLevel.TRACE),
            ("summary", DebugLevel.SUMMARY),
            ("trace", DebugLevel.TRACE),
            ("summary", DebugLevel.SUMMARY),
        ]
    ),
    "profile": _plain([("pf", "pf"), ("pe", "pe"), ("pp", "pp"), ("pu", "pu")]),
    "profiles_file": _path_samples("profiles.toml"),
    "chunk_map": _plain([(True, True), ("0", False), (True, True), (False, False)]),
    "chunk_map_index": _plain([(True, True), ("false", False), (True, True), (False, False)]),
    "progress": _plain([(False, False), ("on", True), (False, False), (True, True)]),
    "batch_size": _plain([(10000, 10000), ("1", 1), (300, 300), (2, 2)]),
    "journal_timeout": _plain([(3600, 3600), ("5", 5), (60, 60), (1, 1)]),
    "executor": _plain(
        [
            ("dask://127.0.0.1:8786", "dask://127.0.0.1:8786"),
            ("processes", "processes"),
            (" DASK ", "dask"),
            ("threads", "threads"),
        ]
    ),
    "lease_wait": _plain(
        [
            ("fail", LeaseWaitMode.FAIL),
            (" FAIL ", LeaseWaitMode.FAIL),
            ("wait", LeaseWaitMode.WAIT),
            ("fail", LeaseWaitMode.FAIL),
        ]
    ),
    "reuse_summary": _plain([(False, False), ("on", True), (False, False), (True, True)]),
    "input_check": _plain(
        [
            ("stat", InputCheck.STAT),
            (" STAT ", InputCheck.STAT),
            ("verify", InputCheck.VERIFY),
            ("stat", InputCheck.STAT),
        ]
    ),
    "block_summary": _plain([(False, False), ("on", True), (False, False), (True, True)]),
    "llm_mode": _plain(
        [
            ("batch", LLMModeSetting.BATCH),
            (" ONLINE ", LLMModeSetting.ONLINE),
            ("profile", LLMModeSetting.PROFILE),
            ("batch", LLMModeSetting.BATCH),
        ]
    ),
}

DEFAULTS: dict[str, Expect] = {
    "output_root": _path("cwd", "runs"),
    "cache_root": _path("xdg_cache", "runjournal"),
    "debug_root": _path("cwd", "runs", "debug"),
    "journal": _path("cwd", "runs", "journal.sqlite3"),
    "cache_mode": _const(CacheMode.USE),
    "checkpoints": _const(True),
    "resume": _const(False),
    "keep_going": _const(False),
    "jobs": _const(1),
    "debug": _const(DebugLevel.OFF),
    "profile": _const(None),
    "profiles_file": _const(None),
    "chunk_map": _const(False),
    "chunk_map_index": _const(False),
    "progress": _const(True),
    "batch_size": _const(256),
    "journal_timeout": _const(30),
    "executor": _const("threads"),
    "lease_wait": _const(LeaseWaitMode.WAIT),
    "reuse_summary": _const(True),
    "input_check": _const(InputCheck.VERIFY),
    "block_summary": _const(True),
    "llm_mode": _const(LLMModeSetting.PROFILE),
}


def test_samples_cover_every_setting() -> None:
    names = [spec.name for spec in SETTINGS]
    assert sorted(SAMPLES) == sorted(names) == sorted(DEFAULTS)
    # after the settings: `origins`, then what an s3:// cache root derives (its URL and
    # endpoint: docs/operations.md "Object-storage cache")
    fields = EffectiveConfig.__struct_fields__
    assert list(fields[: len(names)]) == names
    assert fields[len(names) :] == ("origins", "cache_remote", "cache_endpoint")


def _layers(name: str, top: Origin) -> dict[str, Any]:
    """Values for `name` at `top` and every origin below it."""
    given_here = GIVEN_ORIGINS[GIVEN_ORIGINS.index(top) :] if top in GIVEN_ORIGINS else ()
    layers: dict[str, Any] = {"flags": {}, "env": {}, "pipeline": {}, "user": {}}
    for origin in given_here:
        raw = SAMPLES[name][origin][0]
        if origin is Origin.FLAG:
            layers["flags"][name] = raw
        elif origin is Origin.ENV:
            layers["env"][env_name(name)] = raw
        elif origin is Origin.PIPELINE:
            layers["pipeline"][name] = raw
        else:
            layers["user"][name] = raw
    return layers


@pytest.mark.parametrize("top", list(Origin), ids=lambda o: o.value)
@pytest.mark.parametrize("name", [spec.name for spec in SETTINGS])
def test_precedence_origin_and_source(dirs: Dirs, name: str, top: Origin) -> None:
    config = resolve(dirs, **_layers(name, top))
    expected = DEFAULTS[name] if top is Origin.DEFAULT else SAMPLES[name][top][1]
    assert getattr(config, name) == expected(dirs)
    resolved = config.origins[name]
    assert resolved.name == name
    assert resolved.value == getattr(config, name)
    assert resolved.origin is top
    assert (
        resolved.source
        == {
            Origin.FLAG: None,
            Origin.ENV: env_name(name),
            Origin.PIPELINE: "pipeline.toml [runjournal]",
            Origin.USER_CONFIG: dirs.user_config,
            Origin.DEFAULT: None,
        }[top]
    )


def test_everything_default_is_labelled_default(dirs: Dirs) -> None:
    config = resolve(dirs)
    assert {r.origin for r in config.origins.values()} == {Origin.DEFAULT}
    for name, expected in DEFAULTS.items():
        assert getattr(config, name) == expected(dirs)


def test_flag_none_means_not_given(dirs: Dirs) -> None:
    config = resolve(dirs, flags={"jobs": None}, env={"RUNJOURNAL_JOBS": "3"})
    assert config.jobs == 3
    assert config.origins["jobs"].origin is Origin.ENV


def test_empty_env_value_counts_as_unset(dirs: Dirs) -> None:
    config = resolve(dirs, env={"RUNJOURNAL_CACHE_MODE": ""}, pipeline={"cache_mode": "bypass"})
    assert config.cache_mode is CacheMode.BYPASS
    assert config.origins["cache_mode"].origin is Origin.PIPELINE


def test_unrelated_env_vars_are_ignored(dirs: Dirs) -> None:
    config = resolve(dirs, env={"RUNJOURNAL_CONFIG": "/x", "RUNJOURNAL_OTHER": "y", "HOME": "/"})
    assert {r.origin for r in config.origins.values()} == {Origin.DEFAULT}


def test_unknown_flag_name_is_a_programming_error(dirs: Dirs) -> None:
    with pytest.raises(ValueError, match="not settings"):
        resolve(dirs, flags={"output": "x"})


# --- paths ------------------------------------------------------------------------------


def test_defaults_follow_the_effective_output_root(dirs: Dirs) -> None:
    config = resolve(dirs, env={"RUNJOURNAL_OUTPUT_ROOT": "elsewhere"})
    out = os.path.join(dirs.cwd, "elsewhere")
    assert config.output_root == out
    assert config.debug_root == os.path.join(out, "debug")
    assert config.journal == os.path.join(out, "journal.sqlite3")
    assert config.origins["debug_root"].origin is Origin.DEFAULT


def test_tilde_is_expanded(dirs: Dirs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", dirs.user)
    config = resolve(dirs, pipeline={"cache_root": "~/c"}, flags={"profiles_file": "~/p.toml"})
    assert config.cache_root == os.path.join(dirs.user, "c")
    assert config.profiles_file == os.path.join(dirs.user, "p.toml")


def test_absolute_paths_are_kept_and_normalised(dirs: Dirs) -> None:
    config = resolve(dirs, user={"output_root": dirs.pipeline + "/a/../b/"})
    assert config.output_root == os.path.join(dirs.pipeline, "b")


def test_roots_are_real_paths(dirs: Dirs) -> None:
    os.mkdir(os.path.join(dirs.cwd, "target"))
    os.symlink(os.path.join(dirs.cwd, "target"), os.path.join(dirs.cwd, "link"))
    config = resolve(dirs, flags={"output_root": "link/x"})
    assert config.output_root == os.path.join(dirs.cwd, "target", "x")


def test_sqlite_url_forms(dirs: Dirs) -> None:
    absolute = os.path.join(dirs.pipeline, "j.db")
    assert resolve(dirs, flags={"journal": "sqlite://" + absolute}).journal == absolute
    assert resolve(dirs, flags={"journal": Path(absolute)}).journal == absolute
    assert resolve(dirs, pipeline={"journal": "sqlite://rel.db"}).journal == os.path.join(
        dirs.pipeline, "rel.db"
    )


# --- chunk map implication, debug levels -----------------------------------------------


def test_chunk_map_index_implies_chunk_map_with_its_origin(dirs: Dirs) -> None:
    config = resolve(dirs, pipeline={"chunk_map_index": True})
    assert config.chunk_map is True
    assert config.chunk_map_index is True
    implied = config.origins["chunk_map"]
    assert implied.origin is Origin.PIPELINE
    assert implied.value is True
    assert implied.source is not None and "implied by chunk_map_index" in implied.source


def test_chunk_map_index_overrides_an_explicit_false(dirs: Dirs) -> None:
    config = resolve(dirs, flags={"chunk_map_index": True}, env={"RUNJOURNAL_CHUNK_MAP": "0"})
    assert config.chunk_map is True
    assert config.origins["chunk_map"].origin is Origin.FLAG


def test_explicit_chunk_map_keeps_its_own_origin(dirs: Dirs) -> None:
    config = resolve(dirs, flags={"chunk_map_index": True}, env={"RUNJOURNAL_CHUNK_MAP": "1"})
    assert config.origins["chunk_map"].origin is Origin.ENV
    assert config.origins["chunk_map"].source == "RUNJOURNAL_CHUNK_MAP"


@pytest.mark.parametrize(
    ("level", "summary", "trace"),
    [("off", False, False), ("summary", True, False), ("trace", True, True)],
)
def test_trace_implies_summary(dirs: Dirs, level: str, summary: bool, trace: bool) -> None:
    config = resolve(dirs, env={"RUNJOURNAL_DEBUG": level})
    assert (config.debug_summary, config.debug_trace) == (summary, trace)


# --- invalid values ---------------------------------------------------------------------

INVALID: list[tuple[str, object]] = [
    ("output_root", 5),
    ("output_root", ""),
    ("cache_root", "a\x00b"),
    ("debug_root", ["x"]),
    ("profiles_file", " "),
    ("journal", "mysql://h/db"),
    ("journal", "sqlite:"),
    ("journal", 3),
    ("cache_mode", "fast"),
    ("cache_mode", "readonly"),
    ("checkpoints", "maybe"),
    ("checkpoints", 1),
    ("chunk_map", "2"),
    ("chunk_map_index", "tru"),
    ("progress", "nope"),
    ("jobs", "0"),
    ("jobs", "x"),
    ("jobs", "1.5"),
    ("jobs", 1.5),
    ("jobs", True),
    ("jobs", "-3"),
    ("jobs", "1_0"),
    ("batch_size", "10001"),
    ("batch_size", 0),
    ("journal_timeout", 0),
    ("journal_timeout", "3601"),
    ("debug", "verbose"),
    ("debug", True),
    ("profile", "a\nb"),
    ("profile", ""),
    ("profile", 7),
]

ORIGIN_WORDS = {
    Origin.FLAG: "from flag (--",
    Origin.ENV: "from env (RUNJOURNAL_",
    Origin.PIPELINE: "from pipeline (pipeline.toml [runjournal])",
    Origin.USER_CONFIG: "from user-config (",
}


def _invalid_cases() -> list[tuple[str, object, Origin]]:
    cases = []
    for name, raw in INVALID:
        for origin in GIVEN_ORIGINS:
            if origin is Origin.ENV and (not isinstance(raw, str) or raw == ""):
                continue  # the environment holds strings; empty means unset
            cases.append((name, raw, origin))
    return cases


@pytest.mark.parametrize(("name", "raw", "origin"), _invalid_cases())
def test_invalid_value_names_setting_and_origin(
    dirs: Dirs, name: str, raw: object, origin: Origin
) -> None:
    layers: dict[str, Any] = {"flags": {}, "env": {}, "pipeline": {}, "user": {}}
    key = {
        Origin.FLAG: "flags",
        Origin.ENV: "env",
        Origin.PIPELINE: "pipeline",
        Origin.USER_CONFIG: "user",
    }[origin]
    layers[key][env_name(name) if origin is Origin.ENV else name] = raw
    with pytest.raises(InvalidSettingValue) as caught:
        resolve(dirs, **layers)
    err = caught.value
    assert err.setting == name
    assert err.origin is origin
    text = str(err)
    assert text.startswith(f"invalid {name} ")
    assert ORIGIN_WORDS[origin] in text
    assert "expected " in text
    assert "\n" not in text


def test_error_message_shape(dirs: Dirs) -> None:
    with pytest.raises(SettingsError) as caught:
        resolve(dirs, env={"RUNJOURNAL_CACHE_MODE": "fast"})
    assert str(caught.value) == (
        "invalid cache_mode 'fast' from env (RUNJOURNAL_CACHE_MODE): "
        "expected one of use, refresh, read-only, bypass"
    )
    assert caught.value.source == "RUNJOURNAL_CACHE_MODE"


def test_overridden_values_are_still_checked(dirs: Dirs) -> None:
    with pytest.raises(InvalidSettingValue) as caught:
        resolve(dirs, flags={"jobs": 2}, user={"jobs": "many"})
    assert caught.value.origin is Origin.USER_CONFIG
    assert dirs.user_config in str(caught.value)


def test_postgres_password_never_in_error(dirs: Dirs) -> None:
    # A valid URL is fine; this one fails for another setting so the URL is only echoed
    # if redaction were missing.
    with pytest.raises(InvalidSettingValue) as caught:
        resolve(dirs, pipeline={"journal": ["postgresql://u:hunter2@h/db"]})
    assert "hunter2" not in str(caught.value)


# --- unknown keys -----------------------------------------------------------------------


def test_unknown_pipeline_key_names_key_and_file(dirs: Dirs) -> None:
    with pytest.raises(UnknownSettingKey) as caught:
        resolve(dirs, pipeline={"cache_mod": "use"})
    err = caught.value
    assert (err.setting, err.origin) == ("cache_mod", Origin.PIPELINE)
    assert "'cache_mod'" in str(err)
    assert "pipeline.toml [runjournal]" in str(err)
    assert "did you mean 'cache_mode'" in str(err)


def test_unknown_user_config_key_names_key_and_file(dirs: Dirs) -> None:
    with pytest.raises(UnknownSettingKey) as caught:
        resolve(dirs, user={"runjournal": {"jobs": 2}})
    assert caught.value.origin is Origin.USER_CONFIG
    assert "'runjournal'" in str(caught.value)
    assert dirs.user_config in str(caught.value)


def test_profiles_table_is_reserved_in_user_config_only(dirs: Dirs) -> None:
    profiles = {"profiles": {"p": {"provider": "offline", "model": "m"}}}
    assert resolve(dirs, user=profiles).profile is None
    with pytest.raises(UnknownSettingKey):
        resolve(dirs, pipeline=profiles)


def test_runjournal_table_that_is_not_a_table(dirs: Dirs) -> None:
    with pytest.raises(SettingsError) as caught:
        resolve(dirs, pipeline=3)  # type: ignore[arg-type]
    assert caught.value.origin is Origin.PIPELINE


# --- user config file -------------------------------------------------------------------


def test_missing_default_user_config_is_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "nothing"))
    assert load_user_config(env={}) == ({}, None)
    assert load_user_config(str(tmp_path / "absent.toml"), env={}) == ({}, None)


def test_default_user_config_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "runjournal").mkdir()
    (tmp_path / "runjournal" / "config.toml").write_text('cache_mode = "bypass"\n')
    document, path = load_user_config(env={})
    assert document == {"cache_mode": "bypass"}
    assert path == str(tmp_path / "runjournal" / "config.toml")


def test_config_env_var_points_elsewhere(tmp_path: Path) -> None:
    other = tmp_path / "other.toml"
    other.write_text("jobs = 4\n")
    assert load_user_config(env={"RUNJOURNAL_CONFIG": str(other)}) == ({"jobs": 4}, str(other))
    assert load_user_config(str(other), env={"RUNJOURNAL_CONFIG": "/nope"})[0] == {"jobs": 4}


def test_config_env_var_naming_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(UserConfigUnreadable) as caught:
        load_user_config(env={"RUNJOURNAL_CONFIG": str(tmp_path / "typo.toml")})
    assert caught.value.origin is Origin.ENV
    assert "RUNJOURNAL_CONFIG" in str(caught.value)


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda p: p.mkdir(), "Is a directory"),
        (lambda p: p.write_text("jobs = = 2\n"), "config.toml"),
        (lambda p: p.write_bytes(b"profile = '\xff'\n"), "config.toml"),
    ],
    ids=["directory", "invalid-toml", "invalid-utf8"],
)
def test_unreadable_user_config(
    tmp_path: Path, make: Callable[[Path], object], needle: str
) -> None:
    path = tmp_path / "config.toml"
    make(path)
    with pytest.raises(UserConfigUnreadable) as caught:
        load_user_config(str(path), env={})
    err = caught.value
    assert err.origin is Origin.USER_CONFIG
    assert str(err).startswith("cannot read user-config file")
    assert needle in str(err)
    assert "\n" not in str(err)


def test_loaded_user_config_resolves_relative_to_its_file(dirs: Dirs) -> None:
    Path(dirs.user_config).write_text('output_root = "mine"\nprofiles_file = "p.toml"\n')
    document, path = load_user_config(dirs.user_config, env={})
    config = resolve_settings(
        flags={},
        env={},
        pipeline_table=None,
        pipeline_dir=dirs.pipeline,
        user_config=document,
        user_config_path=path,
        cwd=dirs.cwd,
    )
    assert config.output_root == os.path.join(dirs.user, "mine")
    assert config.profiles_file == os.path.join(dirs.user, "p.toml")
    assert config.origins["output_root"].source == path


# --- roots rule -------------------------------------------------------------------------


def _roots(d: Dirs, **flags: object) -> EffectiveConfig:
    return resolve(d, flags=dict(flags))


def test_default_roots_pass(dirs: Dirs) -> None:
    check_roots(resolve(dirs))


@pytest.mark.parametrize(
    "flags",
    [
        {"debug_root": "runs/debug"},
        {"debug_root": "runs/deep/dbg"},
        {"debug_root": "dbg"},
        {"output_root": "runs", "cache_root": "runs2"},  # shared prefix, not nested
        {"journal": "postgresql://h/db", "cache_root": "c"},
        {"journal": "dbg/j.sqlite3", "debug_root": "dbg"},
    ],
)
def test_allowed_layouts(dirs: Dirs, flags: dict[str, object]) -> None:
    check_roots(_roots(dirs, **flags))


@pytest.mark.parametrize(
    ("flags", "blamed"),
    [
        ({"cache_root": "runs"}, "cache_root"),
        ({"cache_root": "runs/cache"}, "cache_root"),
        ({"output_root": "c/runs", "cache_root": "c"}, "cache_root"),
        ({"debug_root": "runs"}, "debug_root"),
        ({"debug_root": "c", "cache_root": "c"}, "debug_root"),
        ({"debug_root": "c/dbg", "cache_root": "c"}, "debug_root"),
        ({"debug_root": "d", "cache_root": "d/c"}, "debug_root"),
        ({"journal": "c/j.sqlite3", "cache_root": "c"}, "journal"),
        ({"journal": "runs"}, "journal"),
    ],
)
def test_refused_layouts(dirs: Dirs, flags: dict[str, object], blamed: str) -> None:
    with pytest.raises(RootsConflict) as caught:
        check_roots(_roots(dirs, **flags))
    assert caught.value.setting == blamed
    assert caught.value.origin is Origin.FLAG
    assert "\n" not in str(caught.value)


def test_conflict_blames_the_more_explicit_setting(dirs: Dirs) -> None:
    config = resolve(dirs, flags={"output_root": "x"}, env={"RUNJOURNAL_CACHE_ROOT": "x"})
    with pytest.raises(RootsConflict) as caught:
        check_roots(config)
    err = caught.value
    assert (err.setting, err.origin) == ("output_root", Origin.FLAG)
    assert "from flag (--output-root)" in str(err)
    assert "from env (RUNJOURNAL_CACHE_ROOT)" in str(err)


def test_default_cache_inside_explicit_output_blames_output(dirs: Dirs) -> None:
    config = resolve(dirs, env={"RUNJOURNAL_OUTPUT_ROOT": dirs.xdg_cache})
    with pytest.raises(RootsConflict) as caught:
        check_roots(config)
    assert (caught.value.setting, caught.value.origin) == ("output_root", Origin.ENV)


def test_root_that_is_a_file_is_refused(dirs: Dirs) -> None:
    Path(dirs.cwd, "afile").write_text("x")
    with pytest.raises(RootsConflict) as caught:
        check_roots(_roots(dirs, output_root="afile"))
    assert caught.value.setting == "output_root"


def test_journal_that_is_a_directory_is_refused(dirs: Dirs) -> None:
    with pytest.raises(RootsConflict) as caught:
        check_roots(_roots(dirs, journal=dirs.pipeline))
    assert caught.value.setting == "journal"


def test_check_roots_creates_nothing(dirs: Dirs) -> None:
    before = sorted(os.listdir(os.path.dirname(dirs.cwd)))
    check_roots(resolve(dirs))
    assert sorted(os.listdir(os.path.dirname(dirs.cwd))) == before
    assert os.listdir(dirs.cwd) == []


# --- display ----------------------------------------------------------------------------


def test_rows_are_json_safe_ordered_and_redacted(dirs: Dirs) -> None:
    config = resolve(
        dirs,
        flags={"jobs": 2},
        env={"RUNJOURNAL_JOURNAL": "postgresql://me:hunter2@db/rj?password=x2"},
    )
    rows = config.as_rows()
    assert [row["name"] for row in rows] == [spec.name for spec in SETTINGS]
    assert set(rows[0]) == {"name", "value", "origin", "source"}
    encoded = msgspec.json.encode(rows).decode()
    assert "hunter2" not in encoded and "x2" not in encoded
    by_name = {row["name"]: row for row in rows}
    assert by_name["journal"]["value"] == "postgresql://me:***@db/rj?password=***"
    assert by_name["jobs"] == {"name": "jobs", "value": 2, "origin": "flag", "source": None}
    assert by_name["cache_mode"]["value"] == "use"
    assert config.journal.endswith("password=x2")  # the adapter still gets the real URL


def test_text_table(dirs: Dirs) -> None:
    text = format_table(resolve(dirs, flags={"jobs": 2}, env={"RUNJOURNAL_DEBUG": "trace"}))
    lines = text.splitlines()
    assert lines[0].split() == ["SETTING", "VALUE", "ORIGIN", "SOURCE"]
    assert len(lines) == 1 + len(SETTINGS)
    assert lines[7].split() == ["jobs", "2", "flag", "--jobs"]
    assert lines[8].split() == ["debug", "trace", "env", "RUNJOURNAL_DEBUG"]
    assert lines[9].split() == ["profile", "-", "default", "-"]


def test_docs_cover_every_setting() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for spec in SETTINGS:
        assert f"`{spec.env_var}`" in text
        assert f"`{spec.key}`" in text
        for flag in spec.flag.split()[0].split("/"):
            assert flag in text
    for origin in Origin:
        assert f"`{origin.value}`" in text


# --- parsers never raise anything but SettingsError ------------------------------------

FIXED = {"pipeline_dir": "/nonexistent/p", "user_config_path": None, "cwd": "/nonexistent/c"}
BOOLS = ("checkpoints", "resume", "keep_going", "chunk_map", "chunk_map_index", "progress")
INTS = {"jobs": (1, 1024), "batch_size": (1, 10000), "journal_timeout": (1, 3600)}
TOML_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
INT_TEXT = st.one_of(
    st.text(max_size=30),
    st.from_regex(r"\s*[+-]?[0-9]{1,25}\s*", fullmatch=True),
    st.integers(min_value=-20000, max_value=20000).map(str),
)


def _try(origin: str, name: str, raw: object) -> EffectiveConfig | None:
    flags: dict[str, object] = {}
    env: dict[str, str] = {}
    pipeline: dict[str, object] = {}
    if origin == "flag":
        flags[name] = raw
    elif origin == "env":
        env[env_name(name)] = raw  # type: ignore[assignment]
    else:
        pipeline[name] = raw
    try:
        return resolve_settings(
            flags=flags, env=env, pipeline_table=pipeline, user_config=None, **FIXED
        )
    except SettingsError as exc:
        assert exc.setting == name
        assert "\n" not in str(exc)
        return None


@hyp_settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(BOOLS),
    origin=st.sampled_from(["flag", "pipeline"]),
    raw=TOML_VALUES,
)
def test_bool_parser_native_values(name: str, origin: str, raw: object) -> None:
    config = _try(origin, name, raw)
    if raw is None and origin == "flag":  # not given
        assert config is not None and config.origins[name].origin is Origin.DEFAULT
    elif isinstance(raw, bool):
        assert config is not None and getattr(config, name) is raw
    elif config is not None:
        assert isinstance(raw, str)
        assert isinstance(getattr(config, name), bool)


@pytest.mark.parametrize(
    ("word", "value"),
    [
        *[(w, True) for w in ("1", "true", "yes", "on", " TRUE ", "Yes", "ON")],
        *[(w, False) for w in ("0", "false", "no", "off", "False", " no", "OFF")],
        *[(w, None) for w in ("y", "n", "t", "f", "2", "-1", "truee", "enable", "none")],
    ],
)
def test_bool_words(word: str, value: bool | None) -> None:
    config = _try("env", "checkpoints", word)
    if value is None:
        assert config is None
    else:
        assert config is not None and config.checkpoints is value


@hyp_settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(BOOLS), raw=st.text(max_size=12))
def test_bool_parser_env_text(name: str, raw: str) -> None:
    config = _try("env", name, raw)
    word = raw.strip().lower()
    if raw == "":
        assert config is not None and config.origins[name].origin is Origin.DEFAULT
    elif word in {"1", "true", "yes", "on"}:
        assert config is not None and getattr(config, name) is True
    elif word in {"0", "false", "no", "off"}:
        assert config is not None and getattr(config, name) is False
    else:
        assert config is None


@hyp_settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(sorted(INTS)),
    origin=st.sampled_from(["flag", "env", "pipeline"]),
    raw=st.one_of(INT_TEXT, TOML_VALUES),
)
def test_int_parser(name: str, origin: str, raw: object) -> None:
    if origin == "env" and not isinstance(raw, str):
        raw = repr(raw)
    config = _try(origin, name, raw)
    low, high = INTS[name]
    number: int | None = None
    if isinstance(raw, int) and not isinstance(raw, bool):
        number = raw
    elif isinstance(raw, str) and raw.strip().lstrip("+-").isascii():
        try:
            number = int(raw.strip()) if raw.strip().lstrip("+-").isdigit() else None
        except ValueError:
            number = None
    if (raw == "" and origin == "env") or (raw is None and origin == "flag"):
        assert config is not None and getattr(config, name) == SETTINGS_BY_NAME[name].default(
            {}, "/"
        )
    elif number is not None and number >= low and (high is None or number <= high):
        assert config is not None and getattr(config, name) == number
    else:
        assert config is None


@hyp_settings(max_examples=200, deadline=None)
@given(name=st.sampled_from([spec.name for spec in SETTINGS]), raw=st.text(max_size=40))
def test_any_env_text_gives_a_value_or_settings_error(name: str, raw: str) -> None:
    _try("env", name, raw)


def test_a_root_under_a_file_is_refused_in_p1(tmp_path):
    from runjournal.cli.settings import RootsConflict, check_roots, resolve_settings

    blocker = tmp_path / "afile"
    blocker.write_text("x")
    config = resolve_settings(
        flags={"cache_root": str(blocker / "sub"), "output_root": str(tmp_path / "out")},
        env={},
        pipeline_table=None,
        pipeline_dir=str(tmp_path),
        user_config=None,
        user_config_path=None,
        cwd=str(tmp_path),
    )
    with pytest.raises(RootsConflict, match="cache_root") as caught:
        check_roots(config)
    assert "cannot be created" in str(caught.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("threads", "threads"),
        ("Processes", "processes"),
        ("dask", "dask"),
        ("dask://127.0.0.1:8786", "dask://127.0.0.1:8786"),
        ("DASK://sched.example.org:08786", "dask://sched.example.org:8786"),
        ("dask://[::1]:8786", "dask://[::1]:8786"),
        *[
            (bad, None)
            for bad in (
                "thread",
                "dask:",
                "dask://",
                "dask://host",
                "dask://host:",
                "dask://:8786",
                "dask://host:0",
                "dask://host:65536",
                "dask://host:port",
                "dask://user@host:8786",
                "dask://host:8786/path",
                "tcp://host:8786",
                "dask://ho st:1",
                "",
            )
        ],
    ],
)
@pytest.mark.parametrize("origin", ["flag", "env", "pipeline"])
def test_executor_values(raw: str, value: str | None, origin: str) -> None:
    config = _try(origin, "executor", raw)
    if raw == "" and origin == "env":
        assert config is not None and config.executor == "threads"  # unset
    elif value is None:
        assert config is None
    else:
        assert config is not None and config.executor == value


@pytest.mark.parametrize("raw", [True, 8786, ["dask"], {"dask": 1}])
def test_executor_must_be_text(raw: object) -> None:
    assert _try("pipeline", "executor", raw) is None
