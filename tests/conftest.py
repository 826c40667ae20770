"""Shared fixtures: run the installed console script in a subprocess against temp dirs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "glossary"


def _console_script() -> list[str]:
    script = Path(sys.executable).parent / "runjournal"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "runjournal.cli.main"]


class CLI:
    """Runs `runjournal` with an isolated environment (no user config, temp roots)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.cwd = home
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RUNJOURNAL_")}
        self.env.update(
            {
                "HOME": str(home),
                "XDG_CONFIG_HOME": str(home / ".config"),
                "XDG_CACHE_HOME": str(home / ".cache"),
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )

    def __call__(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        timeout: float = 120,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        full_env = dict(self.env)
        if env:
            full_env.update(env)
        return subprocess.run(
            [*_console_script(), *args],
            cwd=cwd or self.cwd,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def json(self, *args: str, **kw: object) -> tuple[subprocess.CompletedProcess[str], dict]:
        proc = self(*args, "--json", **kw)  # type: ignore[arg-type]
        doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
        return proc, doc


@pytest.fixture
def cli(tmp_path: Path) -> CLI:
    home = tmp_path / "home"
    home.mkdir()
    return CLI(home)


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """A private copy of the glossary example, safe to edit."""
    dest = tmp_path / "glossary"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    return dest / "pipeline.toml"
