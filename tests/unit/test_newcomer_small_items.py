"""Small items of issue 32: a broken link input says so, Ctrl-C's line says what happened."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from runjournal.adapters.sources import SourceResolutionError, expand_patterns
from runjournal.cli.run_summary import failure_line
from runjournal.domain.events import RunError


def test_a_broken_symbolic_link_input_is_reported_as_one(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    os.symlink(tmp_path / "gone.md", tmp_path / "docs" / "a.md")
    with pytest.raises(SourceResolutionError) as caught:
        expand_patterns(["docs/*.md"], base_dir=str(tmp_path), key="inputs")
    message = str(caught.value)
    assert "matches no file" not in message
    assert "broken symbolic link: 'docs/a.md' points to" in message and "gone.md" in message


def test_a_glob_that_matches_nothing_still_says_so(tmp_path: Path) -> None:
    with pytest.raises(SourceResolutionError, match=r"'docs/\*\.md' matches no file"):
        expand_patterns(["docs/*.md"], base_dir=str(tmp_path), key="inputs")


def test_the_interrupted_line_does_not_repeat_itself() -> None:
    doc = {"run_id": "20261206T120000Z-1a2b3c4d", "status": "interrupted"}
    line = failure_line(doc, RunError(message="interrupted"), "my pipeline.toml")
    assert "interrupted: interrupted" not in line
    assert line == (
        "run 20261206T120000Z-1a2b3c4d interrupted by a signal; "
        "`runjournal run 'my pipeline.toml' --resume` reuses what it finished"
    )


def test_max_terms_never_cuts_a_defined_term_and_says_what_it_dropped() -> None:
    from runjournal.adapters.builtin_modules.terms import Term, TermKind, TermsModule
    from runjournal.domain.modules import StageContext

    merged = [Term(f"entry {i}", f"entry {i}", 1, TermKind.DEFINED) for i in range(5)]
    merged += [Term(f"phrase {i}", f"phrase {i}", 9, TermKind.PHRASE) for i in range(4)]
    ctx = StageContext(step="terms", lane="docs/g.rst", params={"max_terms": 3})
    out = TermsModule().normalize(merged, ctx)
    assert {t.key for t in out.value} == {f"entry {i}" for i in range(5)}
    assert out.warnings == [
        "docs/g.rst: 4 candidate term(s) over max_terms=3 dropped "
        "(the 5 term(s) the document defines are always kept)"
    ]
    ctx = StageContext(step="terms", lane="docs/g.rst", params={"max_terms": 7})
    out = TermsModule().normalize(merged, ctx)
    assert len(out.value) == 7 and "2 candidate term(s) over max_terms=7" in out.warnings[0]


def test_the_failure_line_says_how_many_more_stages_failed() -> None:
    """Issue 32: with --keep-going and 2 failed chunks the line named only the first."""
    error = RunError(message="boom", step="terms", lane="docs/a.md")
    doc = {"run_id": "r1", "status": "failed", "failures": [{}, {}]}
    line = failure_line(doc, error, "p.toml")
    assert line.endswith(" (and 1 more failed stage(s): `runjournal explain r1`)")
    assert "more failed" not in failure_line({**doc, "failures": [{}]}, error, "p.toml")
