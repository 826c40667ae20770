"""End-to-end: the built-in glossary pipeline through the installed console script.

- On real documentation (examples/real-docs: 37 reStructuredText pages of the Sphinx
  documentation): the quality rules of docs/modules.md hold on the artifacts and on
  `glossary.md`, and known definitions are found.
- Early cutoff keeps the corpus glossary: after a one-space edit (or a paragraph with
  no term in it) in one document of a multi-document corpus, `--resume` reuses every
  glossary stage but the edited chunk's extract; nothing is `dependency_invalidated`.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from e2e.test_plan import assert_predicted, recorded

REPO = Path(__file__).resolve().parents[2]
REAL_DOCS = REPO / "examples" / "real-docs"

STOPWORDS_SAMPLE = {"a", "an", "and", "or", "with", "the", "of", "to", "in", "is", "s", "c"}


def _markup_only_role_names(docs: list[Path]) -> set[str]:
    """Role names used as `:name:` markup and never written as a word elsewhere."""
    texts = " ".join(p.read_text(encoding="utf-8") for p in docs)
    used = {n.rsplit(":", 1)[-1] for n in re.findall(r":((?:[\w-]+:)?[\w-]+):`", texts)}
    rest = re.sub(r":(?:[\w-]+:)?[\w-]+:`", " ", texts)
    return {n for n in used if not re.search(rf"(?<![\w:-]){re.escape(n)}(?![\w:-])", rest)}


def _has_role(markdown: str) -> bool:
    """A reST/MyST role left in markdown, outside code spans (`` `:numbered:` `` is code)."""
    prose = re.sub(r"(`+)(.+?)\1", " ", markdown)
    return bool(re.search(r"(?<![\w:]):[a-z][\w:-]*:(?=[\s.,;)]|$)|\{[a-z][\w:-]*\}", prose))


def _artifacts(run_dir: Path, step: str) -> dict[str, list]:
    return {
        p.name: json.loads(p.read_text(encoding="utf-8"))
        for p in sorted((run_dir / "artifacts" / step).glob("*.json"))
    }


@pytest.fixture
def real_docs(tmp_path: Path) -> Path:
    dest = tmp_path / "real-docs"
    shutil.copytree(REAL_DOCS, dest, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    return dest / "pipeline.toml"


def test_real_docs_glossary_follows_the_quality_rules(cli, real_docs, tmp_path):
    docs = sorted((real_docs.parent / "docs").rglob("*.rst"))
    assert 20 <= len(docs) <= 60
    assert sum(p.stat().st_size for p in docs) < 2_000_000
    assert (real_docs.parent / "LICENSE.rst").is_file()
    assert (real_docs.parent / "SOURCE.md").is_file()
    proc, doc = cli.json(
        "run",
        str(real_docs),
        "--output-root",
        str(tmp_path / "out"),
        "--cache-root",
        str(tmp_path / "cache"),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert doc["status"] == "succeeded" and "Traceback" not in proc.stderr
    run_dir = Path(doc["run_dir"])
    markup_roles = _markup_only_role_names(docs)
    assert {"dudir", "duref", "confval"} <= markup_roles  # the check can bite

    terms = _artifacts(run_dir, "terms")
    assert len(terms) == len(docs)
    all_terms = [t for lane in terms.values() for t in lane]
    assert len(all_terms) > 300
    for term in all_terms:
        key = term["key"]
        assert key not in STOPWORDS_SAMPLE and key not in markup_roles, term
        assert sum(c.isalnum() for c in key) >= 2, term
        assert not re.search(r":[\w-]+:`|`|^\.\.|::", term["text"]), term
        assert set(term) == {"text", "key", "count", "kind"}  # no chunk ids, no offsets

    definitions = [d for lane in _artifacts(run_dir, "definitions").values() for d in lane]
    by_key = {}
    for definition in definitions:
        assert not definition["markdown"].startswith(".."), definition
        assert not _has_role(definition["markdown"]), definition
        assert not definition["markdown"].lstrip().startswith("::"), definition
        assert "start" not in definition and "end" not in definition
        by_key.setdefault(definition["key"], []).append(definition)
    # Entries of the `.. glossary::` block; those in a chunk without the directive line
    # read as a definition list (docs/modules.md "Limits").
    glossary_keys = (
        "builder",
        "directive",
        "role",
        "domain",
        "source directory",
        "configuration directory",
        "master document",
        "root document",
        "restructuredtext",
    )
    patterns = Counter()
    for key in glossary_keys:
        (entry,) = [d for d in by_key[key] if d["source"] == "docs/glossary.rst"]
        assert entry["pattern"] in ("glossary", "definition_list"), entry
        patterns[entry["pattern"]] += 1
    assert patterns["glossary"] >= 3, patterns
    builder = next(d for d in by_key["builder"] if d["source"] == "docs/glossary.rst")
    assert builder["markdown"].startswith("A class (inheriting from `Builder`) that takes")
    assert builder["section"] == "Glossary"
    assert any(d["pattern"] == "definition_list" for d in by_key["alabaster"])
    assert any(d["pattern"] == "dfn" for d in by_key["signature"])

    glossary = (run_dir / "glossary.md").read_text(encoding="utf-8")
    headings = re.findall(r"(?m)^### (.+)$", glossary)
    assert len(headings) >= 60
    assert "builder" in headings and "source directory" in headings
    assert not _has_role(glossary) and not re.search(r"(?m)^\.\. ", glossary)
    assert "> A class (inheriting from `Builder`) that takes parsed documents" in glossary
    assert "- **Defined in:** `docs/glossary.rst` \u00a7 Glossary" in glossary
    for heading in headings:
        plain = heading.strip("`").replace("\\", "")
        assert plain.casefold() not in STOPWORDS_SAMPLE and plain not in markup_roles, heading


def _decisions(cli, out: Path, step: str) -> Counter:
    proc, doc = cli.json("explain", "latest", "--output-root", str(out), "--step", step)
    assert proc.returncode == 0, proc.stderr
    return Counter(
        (d["stage"], d["code"])
        for s in doc["steps"]
        for lane in s["lanes"]
        for d in lane["decisions"]
    )


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda t: t.replace(" the ", " the  ", 1), id="one-space"),
        pytest.param(
            lambda t: t.replace("\n\n", "\n\nNothing here changes what anything means.\n\n", 1),
            id="new-paragraph",
        ),
    ],
)
def test_an_edit_in_one_document_keeps_the_corpus_glossary(cli, example, tmp_path, edit):
    out, cache = tmp_path / "out", tmp_path / "cache"
    roots = ("--output-root", str(out), "--cache-root", str(cache))
    proc, cold = cli.json("run", str(example), *roots)
    assert proc.returncode == 0, proc.stderr
    docs = sorted((example.parent / "docs").glob("*.md"))
    assert len(docs) >= 5
    target = docs[2]
    before = target.read_text(encoding="utf-8")
    target.write_text(edit(before), encoding="utf-8")
    assert target.read_text(encoding="utf-8") != before
    proc, warm = cli.json("run", str(example), *roots, "--resume")
    assert proc.returncode == 0, proc.stderr
    assert "dependency_invalidated" not in warm["decisions"]

    glossary = _decisions(cli, out, "glossary")
    extracts = sum(n for (stage, _), n in glossary.items() if stage == "extract")
    assert extracts >= 10
    assert glossary[("merge", "reused")] == 1 and glossary[("normalize", "reused")] == 1
    assert glossary[("extract", "reused")] >= extracts - 2  # only the edited chunk(s) ran
    assert sum(n for (_, code), n in glossary.items() if code != "reused") <= 2
    for step in ("terms", "definitions"):
        decided = _decisions(cli, out, step)
        assert decided[("normalize", "reused")] == len(docs), (step, decided)
    total = sum(warm["decisions"].values())
    assert warm["module_calls"] <= 0.1 * total, warm["decisions"]
    old = Path(cold["run_dir"]) / "glossary.md"
    new = Path(warm["run_dir"]) / "glossary.md"
    assert old.read_bytes() == new.read_bytes()


def test_a_new_mention_of_a_term_keeps_the_glossary_extracts(cli, example, tmp_path):
    """A term count changes in one document, its term keys do not: the glossary extract
    reads only the keys (docs/modules.md "Declaring what a stage reads"), so every
    extract of an unedited chunk is reused; `plan` predicts the run, the audit holds."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    roots = ("--output-root", str(out), "--cache-root", str(cache))
    proc, cold = cli.json("run", str(example), *roots)
    assert proc.returncode == 0, proc.stderr
    # an unchanged resume: the planner takes the same parts as the run, so it is definite
    proc, plan = cli.json("plan", str(example), *roots, "--resume")
    assert proc.returncode == 0, proc.stderr
    assert plan["decisions"] == {"reused": sum(cold["decisions"].values())}

    target = sorted((example.parent / "docs").glob("*.md"))[2]
    name = f"docs__{target.name}-"
    [before_terms] = [v for k, v in _artifacts(Path(cold["run_dir"]), "terms").items() if name in k]
    term = before_terms[0]
    target.write_text(
        target.read_text(encoding="utf-8") + f"\nOne more {term['text']} here.\n", "utf-8"
    )
    proc, plan = cli.json("plan", str(example), *roots, "--resume")
    assert proc.returncode == 0, proc.stderr
    proc, warm = cli.json("run", str(example), *roots, "--resume")
    assert proc.returncode == 0, proc.stderr
    [after_terms] = [v for k, v in _artifacts(Path(warm["run_dir"]), "terms").items() if name in k]
    assert after_terms != before_terms  # the document's terms artifact changed ...
    assert [t["key"] for t in after_terms] == [t["key"] for t in before_terms]  # ... not its keys

    glossary = _decisions(cli, out, "glossary")
    extracts = sum(n for (stage, _), n in glossary.items() if stage == "extract")
    assert extracts >= 10
    assert ("extract", "dependency_invalidated") not in glossary
    assert glossary[("extract", "reused")] >= extracts - 2, glossary
    assert glossary[("normalize", "reused")] == 0  # normalize reads the counts: it runs
    glossary_md = (Path(warm["run_dir"]) / "glossary.md").read_text(encoding="utf-8")
    assert glossary_md != (Path(cold["run_dir"]) / "glossary.md").read_text(encoding="utf-8")

    assert_predicted(plan, warm, recorded(cli, out, warm["run_id"]))
    proc = cli("journal", "audit", warm["run_id"], "--output-root", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
