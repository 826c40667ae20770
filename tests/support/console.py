"""The installed `runjournal` console script, run in a subprocess with an isolated environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CEILING = "RUNJOURNAL_CEILING_DIRECTORIES"
"""Set by tests/conftest.py: project discovery never looks above the suite's temp dir."""


def console_script() -> list[str]:
    """The console script beside this interpreter (the venv's), else `python -m`."""
    script = Path(sys.executable).parent / "runjournal"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "runjournal.cli.main"]


def isolated_env(home: Path) -> dict[str, str]:
    """This process's environment without our own settings, with a private HOME and XDG dirs."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RUNJOURNAL_") or k == CEILING  # the suite's walk limit
    }
    env.update(
        {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    return env


class CLI:
    """Runs `runjournal` with an isolated environment (no user config, temp roots)."""

    def __init__(self, home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        self.cwd = home
        self.env = isolated_env(home)

    def __call__(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        timeout: float = 120,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*console_script(), *args],
            cwd=cwd or self.cwd,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def json(self, *args: str, **kw: Any) -> tuple[subprocess.CompletedProcess[str], dict]:
        proc = self(*args, "--json", **kw)
        doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
        return proc, doc

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Start `runjournal` without waiting (the caller communicates and reaps it)."""
        return subprocess.Popen(
            [*console_script(), *args],
            cwd=self.cwd,
            env={**self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
