"""The tarballs of `tests/fixtures/` (caches an older runjournal wrote), unpacked."""

from __future__ import annotations

import tarfile
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def unpack_fixture(name: str, into: Path) -> None:
    """Extract `tests/fixtures/<name>` beneath `into`."""
    with tarfile.open(FIXTURES / name) as tar:
        # `filter` came with Python 3.11.4 (Debian's 3.11.2 has none): the fixture is ours
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)
