"""The documentation is self-contained: every `docs/<page>.md "Section"` reference resolves.

Code comments, tests and the docs cite sections of docs/ by their heading; a renamed
heading breaks those references, so this test finds every such reference in the product,
the tests, the README and the docs, and checks that the page has a heading that is (or
starts with) the quoted text. The docs, the README and the tests never cite design files
that are not in the repository.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from support.paths import DOCS, REPO, TESTS

REFERENCE = re.compile(r'docs/([a-z_]+)\.md\s+"([^"]+)"')
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)
# The design files outside the repository, spelled in pieces so that this file does not
# itself match a repository-wide grep for them.
OUTSIDE = re.compile(
    "|".join(
        (
            "SEMAN" + "TICS",
            r"CLI\.md",
            "HARD" + "ENING",
            r"DESIGN(\.md)? §",
            "_no" + "tes",
            "run-state",
            r"\bseed[ :]+\"",
        )
    )
)
PRODUCT = ("__init__.py", "api.py", "domain", "projections", "adapters", "app", "cli")


def python_files(*tops: Path) -> list[Path]:
    files: list[Path] = []
    for top in tops:
        files += [top] if top.is_file() else sorted(top.rglob("*.py"))
    return files


def referencing_files() -> list[Path]:
    files = python_files(*(REPO / name for name in PRODUCT), TESTS)
    files = [f for f in files if f.name != Path(__file__).name]  # its own examples
    return [*files, REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def headings(page: str) -> list[str]:
    return HEADING.findall((DOCS / f"{page}.md").read_text())


def references(text: str) -> list[tuple[str, str]]:
    return [(page, " ".join(section.split())) for page, section in REFERENCE.findall(text)]


def resolves(page: str, section: str) -> bool:
    if not (DOCS / f"{page}.md").exists():
        return False
    return any(h == section or h.startswith(section + " ") for h in headings(page))


def test_every_docs_section_reference_resolves() -> None:
    broken, seen = [], 0
    for path in referencing_files():
        for page, section in references(path.read_text()):
            seen += 1
            if not resolves(page, section):
                broken.append((str(path.relative_to(REPO)), f'docs/{page}.md "{section}"'))
    assert broken == []
    assert seen >= 20  # the docs and the tests do cite sections this way


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ('see docs/operations.md "Exit codes"', True),
        ('see docs/operations.md\n   "Decision order"', True),
        ('docs/internals.md "Checkpoint store"', True),
        ('docs/operations.md "Exit code"', False),  # not a heading, and not a prefix of words
        ('docs/nowhere.md "Layout"', False),
    ],
)
def test_the_resolver_refuses_what_is_not_a_heading(text: str, ok: bool) -> None:
    [(page, section)] = references(text)
    assert resolves(page, section) is ok


def test_product_docs_readme_and_tests_cite_nothing_outside_the_repository() -> None:
    product = python_files(*(REPO / name for name in PRODUCT))
    files = [REPO / "README.md", *sorted(DOCS.glob("*.md")), *python_files(TESTS), *product]
    found = [
        (str(path.relative_to(REPO)), n, line.strip())
        for path in files
        if path.name != Path(__file__).name
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if OUTSIDE.search(line)
    ]
    assert found == []


@pytest.mark.parametrize(
    "line",
    [
        "(" + "SEMAN" + "TICS §4)",
        "see CLI" + ".md",
        "HARD" + "ENING.md's list",
        "docs/_no" + "tes/x.md",
        "(DES" + "IGN §7)",
        "(se" + 'ed "Composition")',
    ],
)
def test_the_outside_pattern_finds_each_design_file(line: str) -> None:
    assert OUTSIDE.search(line)


def only_a_docstring(path: Path) -> bool:
    body = ast.parse(path.read_text()).body
    return all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body)


def test_the_module_map_lists_every_module_and_only_those() -> None:
    """docs/internals.md "Module map" describes the code as it is: one row per module.

    A package `__init__.py` that holds only a docstring may be left out.
    """
    text = (DOCS / "internals.md").read_text()
    table = text.split("## Module map")[1].split("\n## ")[0]
    listed = set(re.findall(r"^\| `([a-z0-9_/]+\.py)` \|", table, re.MULTILINE))
    modules = python_files(*(REPO / name for name in PRODUCT))
    every = {str(path.relative_to(REPO)) for path in modules}
    required = {
        str(path.relative_to(REPO))
        for path in modules
        if not (path.name == "__init__.py" and only_a_docstring(path))
    }
    assert sorted(required - listed) == [], "modules missing from the module map"
    assert sorted(listed - every) == [], "the module map lists modules that do not exist"
