"""The layering holds itself: import-linter's `layers` contract from pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_import_linter_layers_contract_is_kept():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which(
        "lint-imports"
    )
    assert exe, "import-linter is part of the test extra"
    proc = subprocess.run(
        [exe, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 kept, 0 broken" in proc.stdout


def test_domain_and_projections_do_no_io():
    """Pure layers: no open(), no os/pathlib/socket/time I/O imports."""
    forbidden = (
        "import os\n",
        "import socket",
        "import time",
        "import Path\n",
        " Path(",
        "open(",
        "import sqlite3",
    )
    for layer in ("domain", "projections"):
        for path in (REPO / layer).glob("*.py"):
            text = path.read_text()
            for needle in forbidden:
                assert needle not in text, f"{path.name} uses {needle.strip()}"
