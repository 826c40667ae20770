"""`expand_patterns` resolves each matched file as `os.path.realpath` did, with one `lstat`
a file (issue 29: a resume's input resolution, docs/performance.md "A corpus at scale: the
packed store and what a no-op resume costs (issue 29)")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from runjournal.adapters.sources import SourceResolutionError, _real_files, expand_patterns


def _tree(root: Path) -> None:
    (root / "real" / "sub").mkdir(parents=True)
    (root / "real" / "a.md").write_text("a")
    (root / "real" / "sub" / "b.md").write_text("b")
    (root / "real" / "dir.md").mkdir()
    os.symlink(root / "real", root / "linked")  # a directory reached through a link
    os.symlink(root / "real" / "a.md", root / "real" / "to-a.md")
    os.symlink("sub/b.md", root / "real" / "rel-to-b.md")
    os.symlink(root / "real" / "sub", root / "real" / "to-sub.md")  # a link to a directory
    os.symlink(root / "missing", root / "real" / "dangling.md")
    os.mkfifo(root / "real" / "fifo.md")


def test_real_files_are_what_realpath_of_each_file_gives(tmp_path: Path) -> None:
    _tree(tmp_path)
    cases = [
        str(tmp_path / "real" / "a.md"),
        str(tmp_path / "linked" / "a.md"),
        str(tmp_path / "linked" / "sub" / ".." / "a.md"),
        str(tmp_path / "real" / "to-a.md"),
        str(tmp_path / "linked" / "rel-to-b.md"),
        str(tmp_path / "real" / "to-sub.md"),
        str(tmp_path / "real" / "dangling.md"),
        str(tmp_path / "real" / "fifo.md"),
        str(tmp_path / "real" / "dir.md"),
        str(tmp_path / "real" / "gone.md"),
        str(tmp_path / "real" / "a.md") + "/",
    ]
    expected = [os.path.realpath(p) for p in cases if os.path.isfile(p)]
    assert _real_files(cases) == expected
    assert len(expected) == 5


def test_relative_paths_resolve_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(tmp_path)
    monkeypatch.chdir(tmp_path / "linked")
    cases = ["a.md", "sub/b.md", "to-a.md", "dir.md"]
    assert _real_files(cases) == [os.path.realpath(p) for p in cases if os.path.isfile(p)]


def test_expand_patterns_through_a_linked_directory(tmp_path: Path) -> None:
    _tree(tmp_path)
    found = expand_patterns(["linked/*.md", "real/**/*.md"], base_dir=str(tmp_path), key="inputs")
    real = os.path.realpath(tmp_path / "real")
    assert found == sorted({f"{real}/a.md", f"{real}/sub/b.md"})
    with pytest.raises(SourceResolutionError, match="broken symbolic link"):
        expand_patterns(["real/dangling.md"], base_dir=str(tmp_path), key="inputs")
