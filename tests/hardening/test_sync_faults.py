"""A failed group sync (`syncfs` reporting EIO) is reported, never ignored
(docs/internals.md "Group durability"): for checkpoints the run succeeds with exit 3
and one line; for outputs the run fails like a failed write, with no outputs kept."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path
from typing import Any

from runjournal.adapters.fsroot import FsRoot, classify_os_error
from runjournal.cli.compose import Factories
from runjournal.cli.main import cli
from support.paths import EXAMPLE


def failing_sync(where: str) -> type[FsRoot]:
    """Roots whose `sync` fails with EIO when the root's path contains `where`."""

    class FailingSync(FsRoot):
        def sync(self) -> None:
            if where in self.path:
                raise classify_os_error(OSError(errno.EIO, "writeback error"), ".")
            super().sync()

    return FailingSync


def run(tmp_path: Path, capsys: Any, root_class: type[FsRoot]) -> tuple[int, dict, str]:
    example = tmp_path / "glossary"
    shutil.copytree(EXAMPLE, example)
    args = [
        "run",
        str(example / "pipeline.toml"),
        "--output-root",
        str(tmp_path / "out"),
        "--cache-root",
        str(tmp_path / "cache"),
        "--json",
    ]
    try:
        cli.main(args, standalone_mode=False, obj=Factories(open_root=root_class.open))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def test_a_failed_checkpoint_sync_is_exit_3_and_one_line(tmp_path, capsys):
    code, doc, stderr = run(tmp_path, capsys, failing_sync(str(tmp_path / "cache")))
    assert code == 3, stderr
    assert doc["status"] == "succeeded" and doc["outputs"]
    assert any("may not be durable" in e for e in doc["persistence_errors"])
    assert "Traceback" not in stderr


def test_a_failed_output_sync_fails_the_run_without_outputs(tmp_path, capsys):
    code, doc, stderr = run(tmp_path, capsys, failing_sync(str(tmp_path / "out")))
    assert code == 1, stderr
    assert doc["status"] == "failed" and doc["outputs"] == []
    assert "cannot write outputs" in stderr and "Traceback" not in stderr
    run_dir = Path(doc["run_dir"])
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "error.log",
        "failure.json",
        "manifest.json",
    ]
