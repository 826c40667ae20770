"""`cache_root = "s3://bucket/prefix"` in the settings (docs/configuration.md "Paths"):
kept as a URL, with this machine's mirror directory as the local cache root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from runjournal.cli.settings import resolve_settings
from runjournal.cli.settings.settings_errors import InvalidSettingValue


def _resolve(tmp_path: Path, value: str, env: dict[str, str]) -> object:
    return resolve_settings(
        flags={"cache_root": value},
        env={"XDG_CACHE_HOME": str(tmp_path / "xdg"), **env},
        pipeline_table=None,
        pipeline_dir=str(tmp_path),
        user_config=None,
        user_config_path=None,
        cwd=str(tmp_path),
    )


def test_an_s3_cache_root_is_a_url_with_a_mirror_per_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    one = _resolve(tmp_path, "s3://team-cache/runs//x/", {"AWS_ENDPOINT_URL": "http://a:1/"})
    assert one.cache_remote == "s3://team-cache/runs/x"
    assert one.cache_endpoint == "http://a:1"
    assert one.cache_root.startswith(str(tmp_path / "xdg" / "runjournal" / "s3") + os.sep)
    assert one.origins["cache_root"].value == "s3://team-cache/runs/x"
    row = next(r for r in one.as_rows() if r["name"] == "cache_root")
    assert row["value"] == "s3://team-cache/runs/x"
    other = _resolve(tmp_path, "s3://team-cache/runs/x", {"AWS_ENDPOINT_URL": "http://b:1"})
    assert other.cache_root != one.cache_root  # another endpoint is another cache
    plain = _resolve(tmp_path, str(tmp_path / "c"), {})
    assert plain.cache_remote is None and plain.cache_root == str(tmp_path / "c")


@pytest.mark.parametrize("value", ["s3://", "s3://k:s@bucket/p", "s3://bucket/../p"])
def test_a_bad_s3_url_names_the_setting(tmp_path: Path, value: str) -> None:
    with pytest.raises(InvalidSettingValue) as caught:
        _resolve(tmp_path, value, {})
    assert "cache_root" in str(caught.value) and "s3://bucket/prefix" in str(caught.value)
