"""Effective configuration: one table of settings, five origins, one resolver (phase P1).

Every user-visible setting is declared once in `SETTINGS` (`table.py`), so the resolver,
`config show`, the click options (`options.py`) and the docs cannot drift apart.
Resolution is value by value, flag > env > pipeline `[runjournal]` > user config >
default, and each value remembers where it came from (docs/configuration.md).

Modules: `table` (the settings, origins, enums), `parsing` (value parsers, journal
redaction), `settings_errors`, `resolution` (`resolve_settings`, `EffectiveConfig`),
`user_config` (the user config file), `discovery` (finding the project of a command
without a pipeline), `roots` (the roots rule), `formatting` (`config
show` and error wording), `click_options` (click option bundles; imported on its own).
"""

from __future__ import annotations

from runjournal.cli.settings.discovery import (
    CEILING_ENV_VAR,
    Project,
    ProjectAmbiguous,
    find_project,
    resolve_project_settings,
)
from runjournal.cli.settings.formatting import format_table
from runjournal.cli.settings.parsing import is_postgres_url, redact_journal
from runjournal.cli.settings.resolution import EffectiveConfig, ResolvedSetting, resolve_settings
from runjournal.cli.settings.roots import check_roots
from runjournal.cli.settings.settings_errors import (
    InvalidSettingValue,
    RootsConflict,
    SettingsError,
    UnknownSettingKey,
    UserConfigUnreadable,
)
from runjournal.cli.settings.table import (
    APP_NAME,
    CONFIG_ENV_VAR,
    ENV_PREFIX,
    MAX_JOBS,
    SETTINGS,
    SETTINGS_BY_NAME,
    USER_CONFIG_FILE,
    USER_CONFIG_RESERVED,
    CacheMode,
    CliForm,
    DebugLevel,
    InputCheck,
    LeaseWaitMode,
    LLMModeSetting,
    Origin,
    SettingSpec,
    ValueKind,
)
from runjournal.cli.settings.user_config import default_user_config_path, load_user_config

__all__ = [
    "APP_NAME",
    "CEILING_ENV_VAR",
    "CONFIG_ENV_VAR",
    "ENV_PREFIX",
    "MAX_JOBS",
    "SETTINGS",
    "SETTINGS_BY_NAME",
    "USER_CONFIG_FILE",
    "USER_CONFIG_RESERVED",
    "CacheMode",
    "CliForm",
    "DebugLevel",
    "EffectiveConfig",
    "InputCheck",
    "InvalidSettingValue",
    "LLMModeSetting",
    "LeaseWaitMode",
    "Origin",
    "Project",
    "ProjectAmbiguous",
    "ResolvedSetting",
    "RootsConflict",
    "SettingSpec",
    "SettingsError",
    "UnknownSettingKey",
    "UserConfigUnreadable",
    "ValueKind",
    "check_roots",
    "default_user_config_path",
    "find_project",
    "format_table",
    "is_postgres_url",
    "load_user_config",
    "redact_journal",
    "resolve_project_settings",
    "resolve_settings",
]
