"""The README's exit codes are true (issue 32, "Found" 3): exit 2 allocates nothing,
except the inputs it names as recorded runs (a glob that matches nothing, a broken link,
a binary file), and each of those is exit 2, one line, and a run failed at
`resolution` with no run directory. Before, the README said exit 2 allocated nothing
while a binary input recorded a failed run."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from support.paths import REPO

STEP = '[[steps]]\nid = "terms"\nmodule = "builtin.terms"\n'


def _exit_codes_paragraph() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return " ".join(section.split())


def _glob_matches_nothing(root: Path) -> str:
    return 'inputs = ["nothing/*.md"]'


def _broken_link(root: Path) -> str:
    os.symlink(root / "docs" / "gone.md", root / "docs" / "link.md")
    return 'inputs = ["docs/link.md"]'


def _binary_file(root: Path) -> str:
    (root / "docs" / "image.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x01")
    return 'inputs = ["docs/image.md"]'


# README wording -> how to make that input
RECORDED = {
    "a glob that matches nothing": _glob_matches_nothing,
    "a broken link": _broken_link,
    "a binary file": _binary_file,
}


def test_the_readme_names_the_exit_2_paths_that_record_a_run() -> None:
    paragraph = _exit_codes_paragraph()
    assert "2 usage or configuration error (nothing allocated, except" in paragraph
    for wording in RECORDED:
        assert wording in paragraph, wording
    assert "recorded as a run failed at `resolution`" in paragraph


@pytest.mark.parametrize("wording", list(RECORDED))
def test_each_named_input_is_exit_2_and_a_run_failed_at_resolution(
    cli: Any, tmp_path: Path, wording: str
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nA **lane** is a path.\n")
    inputs = RECORDED[wording](tmp_path)
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(f'name = "x"\n{inputs}\n{STEP}')
    out = tmp_path / "out"
    proc = cli("run", str(pipeline), "--output-root", str(out), "--cache-root", str(tmp_path / "c"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert not [p for p in out.iterdir() if re.match(r"\d{8}T\d{6}Z", p.name)]  # no run dir
    _listed, runs = cli.json("runs", "list", "--output-root", str(out))
    assert [r["status"] for r in runs["runs"]] == ["failed"]
    _shown, view = cli.json("runs", "show", "latest", "--output-root", str(out))
    assert view["phase"] == "resolution"
