"""docs/python-api.md: every example runs, in a project made by `runjournal init demo`.

Each block carries a marker (an HTML comment on the line before it): `example: NAME`.
The blocks of one example run in order in one fresh project: consecutive Python blocks
form one script (the cells of a notebook), run in a fresh interpreter; each `$` line of a
console block is a command, `runjournal` being this interpreter's command line. Every
script and command must exit 0 (their `assert`s are the checks).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import DOCS

DOC = DOCS / "python-api.md"
BLOCK = re.compile(
    r"(?:<!-- (?P<mark>[^\n]*?) -->\n)?```(?P<lang>python|console)\n(?P<body>.*?)```", re.S
)
RUNJOURNAL = [sys.executable, "-m", "runjournal.cli.main"]


def _examples() -> dict[str, list[tuple[str, str]]]:
    examples: dict[str, list[tuple[str, str]]] = {}
    for m in BLOCK.finditer(DOC.read_text(encoding="utf-8")):
        mark = m.group("mark") or ""
        assert mark.startswith("example: "), f"a block without an example marker: {m.group(0)[:80]}"
        examples.setdefault(mark.split(": ", 1)[1], []).append((m.group("lang"), m.group("body")))
    return examples


EXAMPLES = _examples()


def test_the_page_shows_what_the_api_promises() -> None:
    assert {"resume", "notebook", "errors", "llm"} <= set(EXAMPLES)
    resume = [lang for lang, _ in EXAMPLES["resume"]]
    assert resume == ["python", "console", "python"]  # Python, then the CLI, then back
    text = DOC.read_text(encoding="utf-8")
    assert text.count("```python") + text.count("```console") == sum(map(len, EXAMPLES.values()))


def _segments(blocks: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Consecutive Python blocks joined into one script; console blocks as they are."""
    out: list[tuple[str, str]] = []
    for lang, body in blocks:
        if lang == "python" and out and out[-1][0] == "python":
            out[-1] = ("python", out[-1][1] + "\n" + body)
        else:
            out.append((lang, body))
    return out


@pytest.fixture
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("RUNJOURNAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    subprocess.run([*RUNJOURNAL, "init", str(tmp_path / "demo")], check=True, timeout=120)
    return tmp_path / "demo"


def _run(argv: list[str], cwd: Path) -> None:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{argv}\n{proc.stdout}\n{proc.stderr}"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs(demo: Path, name: str) -> None:
    for number, (lang, body) in enumerate(_segments(EXAMPLES[name])):
        if lang == "python":
            script = demo / f"example_{name}_{number}.py"
            script.write_text(body, encoding="utf-8")
            _run([sys.executable, str(script)], demo)
            continue
        for line in body.splitlines():
            if line.startswith("$ "):
                command = shlex.split(line[2:])
                assert command[0] == "runjournal"
                _run([*RUNJOURNAL, *command[1:]], demo)
