"""Fixtures the integration tests of an `s3://` cache root share (the bucket is the
session's SeaweedFS, `tests/conftest.py`)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def s3env(seaweedfs: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The SeaweedFS endpoint and throwaway credentials as this test's `AWS_*` environment."""
    env = seaweedfs.env()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture
def url(seaweedfs: Any, s3env: dict[str, str]) -> Any:
    """A fresh bucket's `s3://<bucket>/pre/fix` cache root URL."""
    from runjournal.adapters.s3_store import S3Url

    return S3Url(seaweedfs.bucket(), "pre/fix")
