"""The installed console script on a real pseudo-terminal: progress and colour."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support.console import console_script
from support.paths import REPO

pty = pytest.importorskip("pty")

SGR_COLOUR = re.compile(r"\x1b\[(3[0-7]|9[0-7])m")


def on_pty(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """Run with stdout and stderr on one pseudo-terminal; return (exit code, all output)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*console_script(), *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=cwd,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=120), b"".join(chunks).decode("utf-8", "replace")


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    shutil.copytree(
        REPO / "examples" / "glossary",
        tmp_path / "g",
        ignore=shutil.ignore_patterns("runs", "__pycache__"),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNJOURNAL_")}
    env.pop("NO_COLOR", None)
    env.update(
        HOME=str(tmp_path),
        XDG_CONFIG_HOME=str(tmp_path / ".config"),
        XDG_CACHE_HOME=str(tmp_path / ".cache"),
        RUNJOURNAL_OUTPUT_ROOT=str(tmp_path / "out"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    return tmp_path / "g", env


def test_progress_and_colour_on_a_terminal(project) -> None:
    root, env = project
    code, out = on_pty(["run", "pipeline.toml"], {**env, "TERM": "xterm"}, root)
    assert code == 0, out
    assert "\r\x1b[2Kopening the journal" in out
    assert "\r\x1b[2Kresolving pipeline 'glossary'" in out
    assert SGR_COLOUR.search(out)
    code, out = on_pty(["run", "pipeline.toml", "--resume"], {**env, "TERM": "xterm"}, root)
    assert code == 0 and "reused" in out and SGR_COLOUR.search(out)


def test_dumb_terminal_and_no_color(project) -> None:
    root, env = project
    code, out = on_pty(["run", "pipeline.toml"], {**env, "TERM": "dumb"}, root)
    assert code == 0, out
    assert "\x1b" not in out
    assert "runjournal: opening the journal" in out
    code, out = on_pty(["reasons"], {**env, "TERM": "xterm", "NO_COLOR": "1"}, root)
    assert code == 0 and "forced_recompute" in out
    assert "\x1b" not in out
    code, out = on_pty(["reasons"], {**env, "TERM": "xterm"}, root)
    assert SGR_COLOUR.search(out)


PROGRESS_LINE = re.compile(
    r"\r\x1b\[2Kstages (\d+)/~?(\d+) \((\d+) reused, (\d+) executed\) · (\d+) in flight"
    r"[^\r]* │ [^\r]+"
)


def test_progress_counts_the_whole_run_on_a_terminal(project) -> None:
    """A run long enough to be shown: the counts of the whole run, redrawn, then cleared."""
    root, env = project
    for page in sorted((root / "docs").glob("*.md")):
        for i in range(16):  # long enough to be drawn (DELAY_S) on a fast machine
            shutil.copy(page, page.with_name(f"{page.stem}-copy{i}.md"))
    wide = {**env, "TERM": "xterm", "COLUMNS": "200"}  # room for the current step too
    code, out = on_pty(["run", "pipeline.toml", "--jobs", "2"], wide, root)
    assert code == 0, out
    lines = PROGRESS_LINE.findall(out)
    assert len(lines) >= 2, out[-2000:]
    done = [int(d) for d, *_ in lines]
    assert done == sorted(done) and done[-1] > done[0]  # it moves
    for d, total, reused, executed, _ in lines:
        assert int(d) == int(reused) + int(executed) <= int(total)
    # cleared before anything else is printed (hints, then the summary)
    summary = out.index("\nrun ") if "\nrun " in out else out.index("run ")
    last = list(PROGRESS_LINE.finditer(out))[-1]
    assert last.end() < summary
    after = out[last.end() : summary]
    assert after.startswith("\r\x1b[2K"), repr(after[:80])
    assert "stages " not in after
