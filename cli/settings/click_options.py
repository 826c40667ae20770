"""Click options generated from the settings table, as option bundles.

`setting_options("journal", "output_root")` decorates a command with one option per
named setting (all settings when none are named), in table order, with help text, type
and choices taken from the table row; `settings_flags(params)` turns the command's
parameters back into the `flags` mapping `resolve_settings` takes (None = not given).

The option types only show the type and complete values: they do not convert. The
settings parser checks a flag's value exactly as it checks an environment or file value,
so a bad flag is one line naming the setting and its origin, exit 2
(docs/configuration.md "Errors").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click
from runjournal.cli.settings.table import (
    SETTINGS,
    SETTINGS_BY_NAME,
    CliForm,
    SettingSpec,
    ValueKind,
)

F = TypeVar("F", bound=Callable[..., Any])


class ShownPath(click.Path):
    """A path option: completes file or directory names; the settings parser checks it."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return value


class _ShownChoice(click.Choice):
    """Shows `[a|b|c]` in --help and completes the choices; the settings parser checks it."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return value


class _ShownInteger(click.ParamType):
    """Shows `INTEGER` in --help; the settings parser checks the value and its range."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return value


class _ShownText(click.ParamType):
    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return value


_METAVARS = {
    ValueKind.DIR: "DIR",
    ValueKind.FILE: "FILE",
    ValueKind.JOURNAL: "URL",
    ValueKind.PROFILE: "ID",
}


def _type(spec: SettingSpec) -> click.ParamType:
    if spec.kind is ValueKind.DIR:
        return ShownPath(file_okay=False)
    if spec.kind in (ValueKind.FILE, ValueKind.JOURNAL):
        return ShownPath(dir_okay=False)
    if spec.kind is ValueKind.CHOICE:
        return _ShownChoice(spec.choices, case_sensitive=False)
    if spec.kind is ValueKind.INTEGER:
        return _ShownInteger()
    return _ShownText()


def dest(spec: SettingSpec) -> str:
    """The click parameter name of a setting's option (`no_progress` for `--no-progress`)."""
    return "no_" + spec.name if spec.cli is CliForm.DISABLE else spec.name


def option_help(spec: SettingSpec) -> str:
    """The option's help line: the table's description, range, default and env var."""
    facts = []
    if spec.kind is ValueKind.INTEGER:
        facts.append(spec.type_name.removeprefix("integer ").strip())
    facts.append(f"default: {spec.default_text}")
    facts.append(f"env: {spec.env_var}")
    return f"{spec.flag_help or spec.description}  [{'; '.join(facts)}]"


def _complete_profiles(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    from runjournal.cli.completion import complete_profiles

    return complete_profiles(ctx, param, incomplete)


def setting_option(spec: SettingSpec) -> Callable[[F], F]:
    """One click option for one settings-table row."""
    help_text = option_help(spec)
    if spec.cli is CliForm.SWITCH:
        return click.option(spec.option, spec.name, default=None, help=help_text)
    if spec.cli in (CliForm.ENABLE, CliForm.DISABLE):
        return click.option(spec.option, dest(spec), is_flag=True, default=False, help=help_text)
    extra: dict[str, Any] = {}
    if spec.kind in _METAVARS:
        extra["metavar"] = _METAVARS[spec.kind]
    if spec.kind is ValueKind.PROFILE:
        extra["shell_complete"] = _complete_profiles
    return click.option(
        spec.option, spec.name, type=_type(spec), default=None, help=help_text, **extra
    )


def setting_options(*names: str) -> Callable[[F], F]:
    """An option bundle: the named settings' options (all when none is named)."""
    unknown = [name for name in names if name not in SETTINGS_BY_NAME]
    if unknown:
        raise ValueError(f"not settings: {unknown}")
    specs = [spec for spec in SETTINGS if not names or spec.name in names]

    def decorate(fn: F) -> F:
        for spec in reversed(specs):  # click lists options in decoration order, innermost last
            fn = setting_option(spec)(fn)
        return fn

    return decorate


def settings_flags(params: Mapping[str, Any]) -> dict[str, object]:
    """The settings flags a command was given, by setting name (None = not given).

    Only settings whose option the command has appear; `--chunk-map` means true and
    `--no-progress` false, their absence "not given".
    """
    flags: dict[str, object] = {}
    for spec in SETTINGS:
        key = dest(spec)
        if key not in params:
            continue
        value = params[key]
        if spec.cli is CliForm.ENABLE:
            value = True if value else None
        elif spec.cli is CliForm.DISABLE:
            value = False if value else None
        flags[spec.name] = value
    return flags
