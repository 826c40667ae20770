"""How settings are shown: values for rows and error lines, and the `config show` table.

The journal location is always redacted where it is shown (docs/configuration.md "Paths").
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from runjournal.cli.settings.parsing import redact_journal
from runjournal.cli.settings.settings_errors import one_line
from runjournal.cli.settings.table import SETTINGS_BY_NAME, Origin, SettingSpec

if TYPE_CHECKING:
    from runjournal.cli.settings.resolution import EffectiveConfig


def display_value(name: str, value: object) -> object:
    """A JSON-safe value: enums by value, the journal redacted."""
    if isinstance(value, enum.Enum):
        return value.value
    if name == "journal" and isinstance(value, str):
        return redact_journal(value)
    return value


def short(raw: object) -> str:
    """A raw value for an error line: repr, URL passwords masked, at most 80 characters."""
    from runjournal.domain.redaction import redact_text, redact_url  # not needed to start

    text = redact_text(repr(redact_url(raw) if isinstance(raw, str) else raw))
    return text if len(text) <= 80 else text[:77] + "..."


def where(spec: SettingSpec | None, origin: Origin, source: str | None) -> str:
    """`flag (--jobs)`, `env (RUNJOURNAL_JOBS)`, `pipeline (p.toml [runjournal])`, …"""
    if origin is Origin.FLAG and spec is not None:
        return f"flag ({spec.option})"
    return f"{origin.value} ({source})" if source else origin.value


def describe(config: EffectiveConfig, name: str) -> str:
    """`jobs 8 from flag (--jobs)`: a resolved value and where it came from."""
    resolved = config.origins[name]
    origin = where(SETTINGS_BY_NAME[name], resolved.origin, resolved.source)
    return f"{name} {short(display_value(name, resolved.value))} from {origin}"


def format_table(config: EffectiveConfig) -> str:
    """The text form of `config show`: aligned SETTING VALUE ORIGIN SOURCE columns.

    Unlike `as_rows`, the SOURCE column names the option for a value set by a flag.
    """
    lines: list[tuple[str, str, str, str]] = [("SETTING", "VALUE", "ORIGIN", "SOURCE")]
    for row in config.as_rows():
        value = row["value"]
        if value is None:
            shown = "-"
        elif isinstance(value, bool):
            shown = "true" if value else "false"
        else:
            shown = one_line(str(value))
        source = row["source"]
        if source is None and row["origin"] == Origin.FLAG.value:
            source = SETTINGS_BY_NAME[str(row["name"])].option
        source = one_line(str(source)) if source else "-"
        lines.append((str(row["name"]), shown, str(row["origin"]), source))
    widths = [max(len(line[i]) for line in lines) for i in range(3)]
    text = [
        "  ".join([*(cell.ljust(w) for cell, w in zip(line, widths, strict=False)), line[3]])
        for line in lines
    ]
    return "\n".join(text) + "\n"
