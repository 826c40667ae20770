"""Directories of this checkout the tests read (never anything outside it)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
DOCS = REPO / "docs"
EXAMPLE = REPO / "examples" / "glossary"
