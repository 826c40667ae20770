"""Issue 32: a glossary page longer than `max_terms` keeps every defined term, with its
definition, and what the cut drops is said.

The corpus is built like `examples/real-docs` (reStructuredText, a `.. glossary::`
directive, the example's pipeline and params): 120 entries, each defined by its own
paragraph, against `max_terms = 50`. Before, the terms step cut the page to 50 terms
silently, so 70 defined entries had no definition in the glossary. Also the real-docs
glossary page itself: every entry of it is defined.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from support.paths import REPO

REAL_DOCS = REPO / "examples" / "real-docs"
WORDS = [
    "amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "harbor", "indigo",
    "jasper", "kelp", "lagoon", "meadow", "nectar", "onyx", "prairie", "quartz", "reef",
    "sierra", "tundra", "umber", "vale", "willow", "xenon",
]  # fmt: skip


def _entries(n: int) -> list[str]:
    return [f"{WORDS[i % 24]} {WORDS[(i // 24 + 3 * i) % 24]} {i}" for i in range(n)]


def _glossary_page(entries: list[str]) -> str:
    body = "".join(
        f"   {term}\n      The {term} is a unit of the handbook numbered {k}, kept apart from "
        f"every other unit.\n\n"
        for k, term in enumerate(entries)
    )
    return f".. _glossary:\n\nGlossary\n========\n\n.. glossary::\n\n{body}"


def _run(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from runjournal.cli.entry import main; main()", "run",
         str(project / "pipeline.toml"), "--output-root", str(project / "out"),
         "--cache-root", str(project / "cache"), "--json", "--no-progress"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=project,
    )  # fmt: skip


def _artifact(run_dir: Path, step: str, stem: str) -> list[dict]:
    [path] = (run_dir / "artifacts" / step).glob(f"{stem}*.json")
    return json.loads(path.read_text())


def test_a_glossary_longer_than_max_terms_keeps_every_defined_term(tmp_path: Path) -> None:
    project = tmp_path / "p"
    (project / "docs").mkdir(parents=True)
    shutil.copy(REAL_DOCS / "pipeline.toml", project / "pipeline.toml")
    entries = _entries(120)
    (project / "docs" / "glossary.rst").write_text(_glossary_page(entries))
    result = _run(project)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    run_dir = Path(doc["run_dir"])
    terms = {t["key"] for t in _artifact(run_dir, "terms", "docs__glossary.rst")}
    defined = {d["term"] for d in _artifact(run_dir, "definitions", "docs__glossary.rst")}
    missing = [e for e in entries if e.lower() not in {t.lower() for t in defined}]
    assert missing == [], f"{len(missing)} of {len(entries)} entries without a definition"
    assert len(terms) >= len(entries)
    glossary = (run_dir / "glossary.md").read_text()
    assert all(re.search(rf"(?i)\b{re.escape(e)}\b", glossary) for e in entries)


def test_the_real_docs_glossary_page_defines_every_entry(tmp_path: Path) -> None:
    project = tmp_path / "real-docs"
    shutil.copytree(REAL_DOCS, project, ignore=shutil.ignore_patterns("runs"))
    page = (project / "docs" / "glossary.rst").read_text()
    entries = re.findall(r"(?m)^   (\S[^\n]*)\n      \S", page)
    assert len(entries) >= 10
    result = _run(project)
    assert result.returncode == 0, result.stderr
    run_dir = Path(json.loads(result.stdout)["run_dir"])
    defined = {d["term"].lower() for d in _artifact(run_dir, "definitions", "docs__glossary.rst")}
    assert [e for e in entries if e.lower() not in defined] == []
