"""Every product package is in pyproject.toml's package list.

The README installs with a plain (non-editable) `pip install .`, which ships only the
packages listed there: a package missing from the list imports in an editable checkout and
fails on a user's machine (`No module named runjournal.adapters.journal`).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT_DIRS = ("domain", "projections", "adapters", "app", "cli")


def _packages_on_disk() -> set[str]:
    found = {"runjournal"}
    for top in PRODUCT_DIRS:
        for init in (REPO / top).rglob("__init__.py"):
            parts = init.parent.relative_to(REPO).parts
            found.add(".".join(("runjournal", *parts)))
    return found


def test_every_product_package_is_listed_for_installation() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    assert _packages_on_disk() - listed == set()
    assert listed - _packages_on_disk() == set()
