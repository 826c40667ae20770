"""`journal audit|export|import` and `projections status|rebuild` in-process (CliRunner).

Error matrices and a projection version bump on synthetic journals: fast, and a test can
monkeypatch the product here. The same commands on real runs through the installed
console script are in tests/e2e/test_journal_cmds.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from runjournal.adapters.journal import open_journal
from runjournal.projections.manifest import ManifestProjection
from support import synthetic as syn
from support.inprocess import InProcess, one_error_line


def test_a_version_bump_is_stale_until_rebuilt(
    tmp_path: Path, invoke: InProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    run = syn.synthetic_journal(out)
    (out / run.run_id).mkdir()
    where = ["--output-root", str(out)]
    assert invoke("projections", "rebuild", "manifest", *where).exit_code == 0
    manifest = out / run.run_id / "manifest.json"

    def manifest_status() -> dict[str, Any]:
        result = invoke("projections", "status", "--json", *where)
        assert result.exit_code == 0
        return {p["name"]: p for p in json.loads(result.stdout)["projections"]}["manifest"]

    assert manifest_status()["stale"] is False
    now, bumped = ManifestProjection.VERSION, ManifestProjection.VERSION + 1
    monkeypatch.setattr(ManifestProjection, "VERSION", bumped)
    status = manifest_status()
    assert status["stale"] is True and status["materialised"] == [now]
    assert status["version"] == bumped
    stdout = invoke("projections", "status", *where).stdout
    assert f"built with another version than v{bumped}" in stdout
    result = invoke("projections", "rebuild", *where)
    assert result.exit_code == 0, result.output
    projection = json.loads(manifest.read_text())["projection"]
    assert projection == {"name": "manifest", "version": bumped}
    status = manifest_status()
    assert status["stale"] is False and status["materialised"] == [bumped]


def test_projection_usage_errors(tmp_path: Path, invoke: InProcess) -> None:
    out = tmp_path / "out"
    syn.synthetic_journal(out)
    where = ["--output-root", str(out)]
    result = invoke("projections", "rebuild", "nope", *where)
    assert result.exit_code == 2 and "no projection named 'nope'" in one_error_line(result.stderr)
    result = invoke("projections", "rebuild", "runs_index", "--run", "latest", *where)
    assert result.exit_code == 2 and "--run does not apply" in one_error_line(result.stderr)
    result = invoke("projections", "rebuild", "--run", "20990101T000000Z-00000000", *where)
    assert result.exit_code == 1 and "no run matches" in one_error_line(result.stderr)


def test_import_refuses_bad_files_with_one_line(tmp_path: Path, invoke: InProcess) -> None:
    source = tmp_path / "source"
    syn.synthetic_journal(source)
    export = tmp_path / "run.rjx"
    result = invoke("journal", "export", "latest", "-o", str(export), "--output-root", str(source))
    assert result.exit_code == 0, result.output
    data = export.read_bytes()
    cases = {
        "corrupt.rjx": (data[:-40] + bytes([data[-40] ^ 0x10]) + data[-39:], 1),
        "truncated.rjx": (data[: len(data) // 2], 1),
        "foreign.rjx": ((source / "journal.sqlite3").read_bytes()[:4096], 2),
        "empty.rjx": (b"", 2),
    }
    target = tmp_path / "target"
    other = ["--output-root", str(target)]
    for name, (content, expected) in cases.items():
        (tmp_path / name).write_bytes(content)
        result = invoke("journal", "import", str(tmp_path / name), *other)
        assert result.exit_code == expected, (name, result.output)
        line = one_error_line(result.stderr)
        assert ("refused" in line) if expected == 1 else ("not a runjournal export" in line)
        assert result.stdout == ""
    result = invoke("journal", "import", str(tmp_path / "missing.rjx"), *other)
    assert result.exit_code == 2 and "cannot read" in one_error_line(result.stderr)
    assert not (target / "journal.sqlite3").exists()  # nothing was opened for a bad file
    result = invoke("journal", "import", str(export), *other)
    assert result.exit_code == 0 and result.stdout.startswith("imported run ")
    result = invoke("journal", "import", str(export), *other)
    assert result.exit_code == 0 and "already imported" in result.stdout
    # A journal that holds other events of the same run refuses the import.
    conflict = tmp_path / "conflict"
    run = syn.synthetic_run(syn.run_id_for(21), output_root=str(conflict), lanes=1)
    with open_journal(str(conflict / "journal.sqlite3")) as store:
        store.append_events(run.run_id, run.events)
    result = invoke("journal", "import", str(export), "--output-root", str(conflict))
    assert result.exit_code == 1
    assert "already in the journal with other events" in one_error_line(result.stderr)


def test_export_does_not_clobber_without_force(tmp_path: Path, invoke: InProcess) -> None:
    out = tmp_path / "out"
    syn.synthetic_journal(out)
    where = ["--output-root", str(out)]
    target = tmp_path / "exists.rjx"
    target.write_bytes(b"keep me")
    result = invoke("journal", "export", "latest", "-o", str(target), *where)
    assert result.exit_code == 2 and "--force" in one_error_line(result.stderr)
    assert target.read_bytes() == b"keep me"
    result = invoke("journal", "export", "latest", "-o", str(target), "--force", *where)
    assert result.exit_code == 0 and target.read_bytes()[:8] == b"RJEXPORT"
    result = invoke("journal", "export", "latest", "-o", str(tmp_path / "no/such/x.rjx"), *where)
    assert result.exit_code == 2 and "no such directory" in one_error_line(result.stderr)
