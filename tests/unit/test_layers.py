"""The architecture holds itself: import-linter's contracts from pyproject.toml.

- `cli > adapters > projections > domain` (layers);
- `domain and projections are pure` (forbidden): no os, time, datetime, pathlib, socket,
  random, secrets, threading, subprocess, … nor the I/O libraries.

What an import contract cannot see is checked on the syntax tree: calls of I/O builtins
(`open`, `print`, `input`, …) and of clock or randomness functions on values the domain
may hold (`datetime.now()`, `uuid4()`).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO

PURE = ("domain", "projections")
PRODUCT = ("__init__.py", "api.py", "domain", "projections", "adapters", "app", "cli")


def lint_imports(cwd: Path, *, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which(
        "lint-imports"
    )
    assert exe, "import-linter is part of the test extra"
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [exe, "--no-cache", "--config", str(cwd / "pyproject.toml")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_import_linter_contracts_are_kept():
    proc = lint_imports(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "api > cli > app > adapters > projections > domain KEPT" in proc.stdout
    assert "domain and projections are pure KEPT" in proc.stdout
    assert "2 kept, 0 broken" in proc.stdout


@pytest.fixture(scope="module")
def product_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package as `<tmp>/runjournal`, importable through PYTHONPATH."""
    top = tmp_path_factory.mktemp("copy")
    package = top / "runjournal"
    package.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in PRODUCT:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, package / name, ignore=ignore)
        else:
            shutil.copy2(source, package / name)
    shutil.copy2(REPO / "pyproject.toml", top / "pyproject.toml")
    return top


@pytest.mark.parametrize(
    ("layer", "source", "imported"),
    [
        ("domain", "import time\n", "time"),
        ("domain", "from time import monotonic\n", "time"),
        ("domain", "from os import environ\n", "os"),
        ("domain", "import os.path\n", "os"),
        ("domain", "from datetime import datetime\n", "datetime"),
        ("domain", "from pathlib import PurePosixPath\n", "pathlib"),
        ("projections", "import threading\n", "threading"),
        ("projections", "import sqlite3\n", "sqlite3"),
        ("projections", "from eventsourcing.application import Application\n", "eventsourcing"),
    ],
)
def test_the_purity_contract_fails_on_a_violating_module(
    product_copy: Path, layer: str, source: str, imported: str
) -> None:
    probe = product_copy / "runjournal" / layer / "_purity_probe.py"
    probe.write_text(f'"""A deliberate violation."""\n\n{source}')
    try:
        proc = lint_imports(product_copy, pythonpath=product_copy)
    finally:
        probe.unlink()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "domain and projections are pure BROKEN" in proc.stdout
    assert f"runjournal.{layer}._purity_probe -> {imported}" in proc.stdout
    assert "api > cli > app > adapters > projections > domain KEPT" in proc.stdout


def test_the_copy_keeps_both_contracts_without_the_probe(product_copy: Path) -> None:
    """The copy itself is clean, so the failures above come from the probe alone."""
    proc = lint_imports(product_copy, pythonpath=product_copy)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 kept, 0 broken" in proc.stdout


# Builtins that read or write the world, and clock/randomness calls an allowed value type
# (an event's `datetime`, a `UUID`) would still offer.
IO_BUILTINS = {"open", "print", "input", "breakpoint", "exec", "eval", "compile", "__import__"}
WORLD_CALLS = {
    "now",
    "utcnow",
    "today",
    "fromtimestamp",
    "utcfromtimestamp",
    "uuid1",
    "uuid4",
    "getenv",
    "urandom",
}


def world_calls(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in IO_BUILTINS | WORLD_CALLS:
            found.append((node.lineno, func.id))
        elif isinstance(func, ast.Attribute) and func.attr in WORLD_CALLS:
            found.append((node.lineno, func.attr))
    return found


def test_pure_layers_call_no_io_builtin_and_read_no_clock():
    offenders = []
    for layer in PURE:
        for path in sorted((REPO / layer).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            offenders += [
                (str(path.relative_to(REPO)), line, name) for line, name in world_calls(tree)
            ]
    assert offenders == []


@pytest.mark.parametrize(
    "source",
    [
        "from datetime import datetime\nx = datetime.now()\n",
        "import uuid\nx = uuid.uuid4()\n",
        "x = open('f').read()\n",
        "print('hello')\n",
        "def f(clock):\n    return clock.utcnow()\n",
    ],
)
def test_the_call_check_finds_each_kind(source: str) -> None:
    assert world_calls(ast.parse(source))
