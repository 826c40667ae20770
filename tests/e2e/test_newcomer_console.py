"""The newcomer's path through the installed console script, on the glossary example.

What a subprocess sees that CliRunner cannot show: the stderr hint line and the stdout
summary of a real process, the `latest` symlink on disk, `RUNJOURNAL_RESUME` from the
environment, an edited plugin under an unchanged fingerprint, the module traceback of
`-v`, and `runs diff` / `explain --changed` between two real runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def _run(cli, example: Path, out: Path, *extra: str, env: dict[str, str] | None = None):
    return cli("run", str(example), "--output-root", str(out), *extra, env=env)


def test_plain_run_twice_hints_then_resume_from_env_reuses(cli, example: Path, tmp_path) -> None:
    out = tmp_path / "out"
    first = _run(cli, example, out)
    assert first.returncode == 0, first.stderr
    assert first.stderr == ""
    assert "  main:      " in first.stdout and first.stdout.count("glossary.md") >= 1
    assert "  warnings:  " in first.stdout  # the glossary's undefined terms
    second = _run(cli, example, out)
    assert second.returncode == 0
    [hint] = second.stderr.splitlines()
    assert hint.startswith("runjournal: hint: ") and f"runjournal run {example} --resume" in hint
    third = _run(cli, example, out, "--json", env={"RUNJOURNAL_RESUME": "1"})
    doc = json.loads(third.stdout)
    assert set(doc["decisions"]) == {"reused"} and doc["hints"] == []
    assert os.readlink(out / "latest-ok") == doc["run_id"]
    assert (out / "latest-ok" / "glossary.md").exists()


def test_edited_plugin_warns_and_the_diff_shows_it(cli, example: Path, tmp_path) -> None:
    out = tmp_path / "out"
    a = json.loads(_run(cli, example, out, "--json").stdout)
    plugin = example.parent / "plugins" / "acronyms.py"
    # an edit of the class's code that keeps the fingerprint (a comment alone is not one)
    text = plugin.read_text()
    plugin.write_text(text.replace("acronym not in expansions", "expansions.get(acronym) is None"))
    proc = _run(cli, example, out, "--resume")
    assert proc.returncode == 0
    assert "acronyms: the source of module 'plugins/acronyms.py:Acronyms' changed since run" in (
        proc.stdout
    )
    b = json.loads(cli("runs", "show", "latest", "--output-root", str(out), "--json").stdout)
    diff = cli("runs", "diff", a["run_id"], b["run_id"], "--output-root", str(out))
    assert diff.returncode == 0
    assert "acronyms: module source changed" in diff.stdout
    assert "resume: false -> true" in diff.stdout


def test_input_edit_explain_changed_and_diff(cli, example: Path, tmp_path) -> None:
    out = tmp_path / "out"
    a = json.loads(_run(cli, example, out, "--json").stdout)
    doc = example.parent / "docs" / "02-journal.md"
    doc.write_text(doc.read_text() + "\nA **write-ahead log** is a log. The write-ahead log.\n")
    b = json.loads(_run(cli, example, out, "--resume", "--json").stdout)
    changed = cli("explain", b["run_id"], "--changed", "--output-root", str(out))
    assert changed.returncode == 0
    first = changed.stdout.splitlines()[0]
    assert " decisions match: " in first and "reused" not in first
    assert "docs/02-journal.md" in changed.stdout
    diff = json.loads(
        cli("runs", "diff", a["run_id"], b["run_id"], "--output-root", str(out), "--json").stdout
    )
    assert diff["inputs"]["changed"] == ["docs/02-journal.md"]
    shown = cli("runs", "show", b["run_id"], "--output-root", str(out))
    assert "glossary.md" in shown.stdout and "glossary · corpus: " in shown.stdout


def test_verbose_traceback_of_a_failing_plugin(cli, example: Path, tmp_path) -> None:
    plugin = example.parent / "plugins" / "acronyms.py"
    text = plugin.read_text()
    marker = "    def extract(self, chunk"
    assert marker in text
    body_start = text.index(":\n", text.index(marker)) + 2
    plugin.write_text(
        text[:body_start] + "        raise KeyError('no such acronym')\n" + text[body_start:]
    )
    out = tmp_path / "out"
    proc = _run(cli, example, out, "-v")
    assert proc.returncode == 1
    assert "runjournal: the module's traceback (redacted):" in proc.stderr
    assert 'acronyms.py", line' in proc.stderr and "KeyError: 'no such acronym'" in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("runjournal: error: run ") and "stage_failed" in last
    assert not (out / "latest-ok").exists()


def test_set_unknown_key_on_the_example(cli, example: Path, tmp_path) -> None:
    out = tmp_path / "out"
    proc = _run(cli, example, out, "--set", "anything=1")
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.startswith("runjournal: error: --set 'anything' is read by no step")
    assert not out.exists()
