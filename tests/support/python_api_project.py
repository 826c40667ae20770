"""The glossary example as the Python API tests use it: copied into a temp dir that is the
working directory, with a temp HOME and no RUNJOURNAL_* settings from the caller; and
`runjournal ARGS --json` in a fresh process (tests/e2e/test_python_api*.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import EXAMPLE


def glossary_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("RUNJOURNAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    dest = tmp_path / "glossary"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    monkeypatch.chdir(dest)
    return dest


def cli_json(*args: str) -> dict:
    """`runjournal ARGS --json` in a fresh process: its exit code must be 0."""
    proc = subprocess.run(
        [sys.executable, "-m", "runjournal.cli.main", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
