"""`gc --older-than AGE`: the age syntax, light enough for the command group to import."""

from __future__ import annotations

from datetime import timedelta

from runjournal.cli.exit_codes import CliError
from runjournal.domain.lazy_pattern import LazyPattern

_AGE = LazyPattern(r"^(\d+)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
AGE_UNITS = tuple(_UNITS)  # for --help: s, m, h, d, w


def parse_age(text: str) -> timedelta:
    """A number and one unit (30d, 12h) as a timedelta; anything else is a usage error."""
    match = _AGE.match(text.strip())
    if not match:
        raise CliError(
            f"--older-than expects a number and a unit ({', '.join(AGE_UNITS)}), "
            f"e.g. 30d or 12h; got '{text}'"
        )
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])
