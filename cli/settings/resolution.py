"""Resolution, value by value: flag > env > pipeline `[runjournal]` > user config > default.

Each value remembers where it came from. Every value the user gave is checked, even one
a higher origin overrides; a bad one raises `SettingsError`. Nothing here creates a file
or directory, so a configuration error allocates nothing (docs/configuration.md and
docs/internals.md "One run, phase by phase", phase P1).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from typing import Any

import msgspec
from runjournal.cli.settings.formatting import display_value, short, where
from runjournal.cli.settings.parsing import Invalid
from runjournal.cli.settings.settings_errors import InvalidSettingValue, UnknownSettingKey
from runjournal.cli.settings.table import (
    SETTINGS,
    SETTINGS_BY_NAME,
    USER_CONFIG_RESERVED,
    DebugLevel,
    InputCheck,
    LeaseWaitMode,
    LLMModeSetting,
    Origin,
    SettingSpec,
)
from runjournal.domain.plan_keys import CacheMode


class ResolvedSetting(msgspec.Struct, frozen=True):
    name: str
    value: Any
    origin: Origin
    source: str | None = None


class EffectiveConfig(msgspec.Struct, frozen=True):
    """The resolved settings; `origins` says where each value came from."""

    output_root: str
    cache_root: str
    debug_root: str
    journal: str
    cache_mode: CacheMode
    checkpoints: bool
    jobs: int
    debug: DebugLevel
    profile: str | None
    profiles_file: str | None
    chunk_map: bool
    chunk_map_index: bool
    progress: bool
    batch_size: int
    journal_timeout: int
    resume: bool
    keep_going: bool
    executor: str
    lease_wait: LeaseWaitMode
    reuse_summary: bool
    input_check: InputCheck
    block_summary: bool
    llm_mode: LLMModeSetting
    origins: dict[str, ResolvedSetting]
    # `cache_root = "s3://..."`: the bucket URL and endpoint (the cache identity);
    # `cache_root` is then this machine's mirror directory for it (docs/operations.md
    # "Object-storage cache").
    cache_remote: str | None = None
    cache_endpoint: str | None = None

    @property
    def debug_summary(self) -> bool:
        return self.debug is not DebugLevel.OFF

    @property
    def debug_trace(self) -> bool:
        return self.debug is DebugLevel.TRACE

    def as_rows(self) -> list[dict[str, object]]:
        """JSON-safe rows in table order: name, value, origin, source (journal redacted)."""
        rows: list[dict[str, object]] = []
        for spec in SETTINGS:
            resolved = self.origins[spec.name]
            value = getattr(self, spec.name)
            if spec.name == "cache_root" and self.cache_remote:
                value = self.cache_remote  # the bucket is the cache (its identity, journaled)
            rows.append(
                {
                    "name": spec.name,
                    "value": display_value(spec.name, value),
                    "origin": resolved.origin.value,
                    "source": resolved.source,
                }
            )
        return rows


class _Layer(msgspec.Struct, frozen=True):
    origin: Origin
    label: str | None
    base_dir: str
    values: Mapping[str, object]

    def source(self, spec: SettingSpec) -> str | None:
        if self.origin is Origin.ENV:
            return spec.env_var
        return self.label


def _file_values(
    table: Mapping[str, object] | None, origin: Origin, label: str, reserved: frozenset[str]
) -> Mapping[str, object]:
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise UnknownSettingKey(
            "runjournal", origin, f"invalid {origin.value} ({label}): not a table", source=label
        )
    for key in table:
        if key in SETTINGS_BY_NAME or key in reserved:
            continue
        close = difflib.get_close_matches(str(key), list(SETTINGS_BY_NAME), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownSettingKey(
            str(key),
            origin,
            f"unknown key {str(key)!r} in {origin.value} ({label}){hint}",
            source=label,
        )
    return {k: v for k, v in table.items() if k in SETTINGS_BY_NAME}


def _parse(spec: SettingSpec, raw: object, layer: _Layer) -> object:
    source = layer.source(spec)
    try:
        return spec.parse(raw, layer.base_dir)
    except Invalid as exc:
        raise InvalidSettingValue(
            spec.name,
            layer.origin,
            f"invalid {spec.name} {short(raw)} from {where(spec, layer.origin, source)}: "
            f"expected {exc.expected}",
            source=source,
        ) from None


def resolve_settings(
    *,
    flags: Mapping[str, object],
    env: Mapping[str, str],
    pipeline_table: Mapping[str, object] | None,
    pipeline_dir: str,
    user_config: Mapping[str, object] | None,
    user_config_path: str | None,
    cwd: str,
    pipeline_file: str | None = None,
) -> EffectiveConfig:
    """Resolve every setting value by value: flag > env > pipeline > user-config > default.

    `flags` holds only flags the user gave (None = not given); an empty environment
    variable counts as not set. `pipeline_file` only labels the pipeline origin.
    """
    unknown_flags = set(flags) - set(SETTINGS_BY_NAME)
    if unknown_flags:
        raise ValueError(f"not settings: {sorted(unknown_flags)}")
    cwd = os.path.abspath(cwd)
    pipeline_label = f"{pipeline_file or 'pipeline'} [runjournal]"
    user_label = user_config_path or "user config"
    user_dir = (
        os.path.dirname(os.path.join(cwd, os.path.expanduser(user_config_path)))
        if user_config_path
        else cwd
    )
    env_values = {
        spec.name: env[spec.env_var] for spec in SETTINGS if env.get(spec.env_var, "") != ""
    }
    layers = (
        _Layer(Origin.FLAG, None, cwd, {k: v for k, v in flags.items() if v is not None}),
        _Layer(Origin.ENV, None, cwd, env_values),
        _Layer(
            Origin.PIPELINE,
            pipeline_label,
            os.path.join(cwd, pipeline_dir),
            _file_values(pipeline_table, Origin.PIPELINE, pipeline_label, frozenset()),
        ),
        _Layer(
            Origin.USER_CONFIG,
            user_config_path,
            user_dir,
            _file_values(user_config, Origin.USER_CONFIG, user_label, USER_CONFIG_RESERVED),
        ),
    )
    resolved: dict[str, ResolvedSetting] = {}
    values: dict[str, object] = {}
    for spec in SETTINGS:
        winner: ResolvedSetting | None = None
        for layer in layers:  # highest precedence first; every given value is checked
            if spec.name not in layer.values:
                continue
            value = _parse(spec, layer.values[spec.name], layer)
            if winner is None:
                winner = ResolvedSetting(spec.name, value, layer.origin, layer.source(spec))
        if winner is None:
            winner = ResolvedSetting(spec.name, spec.default(values, cwd), Origin.DEFAULT)
        resolved[spec.name] = winner
        values[spec.name] = winner.value
    index = resolved["chunk_map_index"]
    if index.value and not resolved["chunk_map"].value:
        implied = "implied by chunk_map_index" + (f" ({index.source})" if index.source else "")
        resolved["chunk_map"] = ResolvedSetting("chunk_map", True, index.origin, implied)
        values["chunk_map"] = True
    remote = str(values["cache_root"])
    if remote.startswith("s3://"):
        from runjournal.adapters.s3_store import endpoint_from_env, local_cache_root

        values["cache_remote"] = remote
        values["cache_endpoint"] = endpoint_from_env(env)
        values["cache_root"] = local_cache_root(remote, env)
    return EffectiveConfig(**values, origins=resolved)  # type: ignore[arg-type]
