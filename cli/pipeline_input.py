"""Phase P1 helpers shared by `run` and `config show`: the pipeline file and settings."""

from __future__ import annotations

import os
from typing import Any

from runjournal.cli.exit_codes import CliError
from runjournal.cli.settings import (
    EffectiveConfig,
    SettingsError,
    check_roots,
    load_user_config,
    resolve_settings,
)
from runjournal.domain.pipeline_spec import PipelineSpec, PipelineSpecError, parse_pipeline_text


def load_pipeline_spec(path: str) -> tuple[PipelineSpec, str]:
    """Read and validate the pipeline file; every problem is exit 2 naming file and key."""
    shown = path
    full = os.path.realpath(path)
    try:
        with open(full, "rb") as fh:
            data = fh.read()
    except IsADirectoryError:
        raise CliError(f"{shown}: is a directory, not a pipeline file") from None
    except OSError as exc:
        raise CliError(f"{shown}: cannot read pipeline file: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CliError(f"{shown}: not valid UTF-8") from None
    try:
        return parse_pipeline_text(text, file=shown), full
    except PipelineSpecError as exc:
        raise CliError(str(exc)) from None


def resolve_config(
    spec: PipelineSpec, pipeline_path: str, flags: dict[str, Any]
) -> EffectiveConfig:
    return resolve_config_and_profiles(spec, pipeline_path, flags)[0]


def resolve_config_and_profiles(
    spec: PipelineSpec, pipeline_path: str, flags: dict[str, Any]
) -> tuple[EffectiveConfig, dict[str, Any]]:
    """The effective configuration, and the user config's `[profiles]` table (read once)."""
    try:
        user_config, user_path = load_user_config()
        config = resolve_settings(
            flags={k: v for k, v in flags.items() if v is not None},
            env=os.environ,
            pipeline_table=spec.settings,
            pipeline_dir=os.path.dirname(pipeline_path),
            user_config=user_config,
            user_config_path=user_path,
            cwd=os.getcwd(),
            pipeline_file=pipeline_path,
        )
        check_roots(config)
    except SettingsError as exc:
        raise CliError(str(exc)) from None
    return config, dict(user_config.get("profiles") or {})
