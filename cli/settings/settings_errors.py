"""Configuration errors: one line naming the setting and its origin (exit 2).

Each error has `setting`, `origin`, `source` and a one-line `str`; control, format and
separator characters in a message are escaped so it stays on one line
(docs/configuration.md "Errors").
"""

from __future__ import annotations

import unicodedata

from runjournal.cli.settings.table import Origin


def _escape(ch: str) -> str:
    cp = ord(ch)
    if cp < 0x100:
        return f"\\x{cp:02x}"
    if cp <= 0xFFFF:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def one_line(text: str) -> str:
    """Escape control, format and separator characters so a message stays on one line."""
    return "".join(
        _escape(ch) if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") else ch
        for ch in text
    )


class SettingsError(Exception):
    """A configuration error (exit 2): one line naming the setting and its origin."""

    def __init__(
        self, setting: str, origin: Origin, message: str, *, source: str | None = None
    ) -> None:
        self.setting = setting
        self.origin = origin
        self.source = source
        self.message = one_line(message)
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


class InvalidSettingValue(SettingsError):
    """A value that does not parse or is out of range."""


class UnknownSettingKey(SettingsError):
    """A key in a `[runjournal]` table or user config file that is not a setting."""


class UserConfigUnreadable(SettingsError):
    """The user config file exists but cannot be read or is not valid TOML."""


class RootsConflict(SettingsError):
    """Roots that coincide or nest in a way a cleanup could destroy data."""
