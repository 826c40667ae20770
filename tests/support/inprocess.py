"""The click group in this process through `CliRunner`, isolated like the console script."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner, Result
from runjournal.cli.main import cli

from support.console import CEILING


class InProcess:
    """The click group in this process (so a test can monkeypatch the product), isolated."""

    def __init__(self, home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        unset: dict[str, str | None] = {
            name: None
            for name in os.environ
            if name.startswith("RUNJOURNAL_") and name != CEILING  # the suite's walk limit
        }
        self.runner = CliRunner(
            env={
                **unset,
                "RUNJOURNAL_CONFIG": None,
                "RUNJOURNAL_OUTPUT_ROOT": None,
                "RUNJOURNAL_JOURNAL": None,
                "HOME": str(home),
                "XDG_CONFIG_HOME": str(home / ".config"),
                "XDG_CACHE_HOME": str(home / ".cache"),
            }
        )

    def __call__(self, *args: str) -> Result:
        return self.runner.invoke(cli, list(args), catch_exceptions=False)


def one_error_line(stderr: str) -> str:
    """The one `runjournal: error: …` line a failing command prints (no traceback)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert lines[0].startswith("runjournal: error: ")
    return lines[0]
