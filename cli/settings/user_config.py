"""The user config file (docs/configuration.md "The user config file")."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from typing import Any

import platformdirs
from runjournal.cli.settings.settings_errors import UserConfigUnreadable
from runjournal.cli.settings.table import APP_NAME, CONFIG_ENV_VAR, USER_CONFIG_FILE, Origin


def default_user_config_path() -> str:
    return os.path.join(platformdirs.user_config_dir(APP_NAME), USER_CONFIG_FILE)


def load_user_config(
    path: str | None = None, *, env: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], str | None]:
    """Read the user config file; `({}, None)` when there is none.

    `path` wins, then `RUNJOURNAL_CONFIG`, then the platform user config dir. A file that
    `RUNJOURNAL_CONFIG` names must exist; the default location may be absent.
    """
    env = os.environ if env is None else env
    named_by_env = False
    if path is None and env.get(CONFIG_ENV_VAR, ""):
        path, named_by_env = env[CONFIG_ENV_VAR], True
    if path is None:
        path = default_user_config_path()
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.lexists(path):
        if named_by_env:
            raise UserConfigUnreadable(
                "config",
                Origin.ENV,
                f"invalid user-config file {path!r} from env ({CONFIG_ENV_VAR}): no such file",
                source=CONFIG_ENV_VAR,
            )
        return {}, None
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UserConfigUnreadable(
            "config",
            Origin.USER_CONFIG,
            f"cannot read user-config file {path!r}: {reason}",
            source=path,
        ) from None
    return document, path
