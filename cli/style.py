"""Terminal capabilities and colour for text output (docs/operations.md "Progress and colour").

Colour is used on a terminal only, never with `NO_COLOR` set (to anything but the empty
string, https://no-color.org) or `TERM=dumb`, and never in `--json` output. Run statuses
and reason categories (and the reason codes of each category) have one colour each.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TextIO

import click
from runjournal.domain.events import RunStatus
from runjournal.domain.reasons import Category, ReasonCode, category_of

STATUS_COLOURS: dict[RunStatus, str] = {
    RunStatus.SUCCEEDED: "green",
    RunStatus.FAILED: "red",
    RunStatus.INTERRUPTED: "yellow",
    RunStatus.ABANDONED: "magenta",
    RunStatus.RUNNING: "cyan",
}

CATEGORY_COLOURS: dict[Category, str] = {
    Category.REUSE: "green",
    Category.EXECUTION: "blue",
    Category.MISS: "cyan",
    Category.INVALID: "yellow",
    Category.CORRUPT: "magenta",
    Category.FORCED: "bright_blue",
    Category.PREDECESSOR_FAILURE: "red",
    Category.FAILURE: "red",
}


def is_terminal(stream: TextIO) -> bool:
    """Whether `stream` is a terminal (a closed or odd stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def dumb_terminal(env: Mapping[str, str] | None = None) -> bool:
    """`TERM=dumb`: no cursor movement and no escape sequences."""
    env = os.environ if env is None else env
    return env.get("TERM", "") == "dumb"


def colour_enabled(stream: TextIO, env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return is_terminal(stream) and env.get("NO_COLOR", "") == "" and not dumb_terminal(env)


class Styler:
    """Colours words by what they mean; the identity when colour is off."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def _paint(self, text: str, colour: str | None, bold: bool = False) -> str:
        if not self.enabled or colour is None:
            return text
        return click.style(text, fg=colour, bold=True if bold else None)

    def status(self, text: str, status: str) -> str:
        """`text` (a status, maybe padded) in the colour of run status `status`."""
        try:
            colour = STATUS_COLOURS.get(RunStatus(status))
        except ValueError:
            colour = None
        return self._paint(text, colour, bold=True)

    def category(self, text: str, category: str) -> str:
        try:
            colour = CATEGORY_COLOURS.get(Category(category))
        except ValueError:
            colour = None
        return self._paint(text, colour)

    def code(self, text: str, code: str) -> str:
        """`text` (a reason code, maybe padded) in its category's colour."""
        try:
            category = category_of(ReasonCode(code))
        except ValueError:
            return text
        return self.category(text, category.value)


def stdout_styler() -> Styler:
    """The styler for what a command prints on stdout."""
    return Styler(colour_enabled(sys.stdout))
