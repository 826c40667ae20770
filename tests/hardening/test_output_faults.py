"""Unwritable outputs: typed filesystem errors become one line and exit 1, never a traceback.

CI runs as root, where modes do not stop writes, so faults are injected in-process: fake
roots passed through the composition root's `Factories` (`support.faulty_fs`).
"""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest
from runjournal.adapters import fsroot
from runjournal.cli.main import cli
from support.faulty_fs import Fault, faulty_factories
from support.paths import EXAMPLE


def run_in_process(args: list[str], capsys, factories=None) -> tuple[int, str, str]:
    try:
        cli.main(args, standalone_mode=False, obj=factories)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("err", "needle"),
    [
        (errno.ENOSPC, "space"),
        (errno.EROFS, "read-only"),
        (errno.EACCES, "ermission"),
        (errno.EIO, "rror"),
    ],
)
def test_output_write_failure_exits_1_with_no_outputs(tmp_path, monkeypatch, capsys, err, needle):
    example = tmp_path / "glossary"
    shutil.copytree(EXAMPLE, example)
    # An output is linked to its object, or copied when the link fails: both fail here.
    failing = [
        Fault(
            method,
            lambda root, name: name == "glossary.md",
            lambda name: fsroot.classify_os_error(OSError(err, "injected"), name),
        )
        for method in ("link", "write_bytes")
    ]
    out = tmp_path / "out"
    code, stdout, stderr = run_in_process(
        [
            "run",
            str(example / "pipeline.toml"),
            "--output-root",
            str(out),
            "--cache-root",
            str(tmp_path / "cache"),
            "--json",
        ],
        capsys,
        faulty_factories(*failing),
    )
    assert code == 1
    assert "Traceback" not in stderr
    first = stderr.strip().splitlines()[0]
    assert "glossary.md" in first and needle in first
    doc = json.loads(stdout)
    assert doc["status"] == "failed" and doc["outputs"] == []
    run_dir = Path(doc["run_dir"])
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "error.log",
        "failure.json",
        "manifest.json",
    ]
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "failed"


def test_checkpoint_write_failure_is_exit_3_with_the_run_succeeded(tmp_path, monkeypatch, capsys):
    example = tmp_path / "glossary"
    shutil.copytree(EXAMPLE, example)

    def no_space(name: str) -> BaseException:
        return fsroot.classify_os_error(OSError(errno.ENOSPC, "injected"), name)

    # a checkpoint is a packed record (append_record), or a file of its own (write_bytes)
    failing = [
        Fault(method, lambda root, name: name.endswith("normalize.ckpt"), no_space)
        for method in ("write_bytes", "append_record")
    ]
    out = tmp_path / "out"
    args = [
        "run",
        str(example / "pipeline.toml"),
        "--output-root",
        str(out),
        "--cache-root",
        str(tmp_path / "cache"),
        "--json",
    ]
    code, stdout, stderr = run_in_process(args, capsys, faulty_factories(*failing))
    assert code == 3
    doc = json.loads(stdout)
    assert doc["status"] == "succeeded" and doc["outputs"]
    assert doc["persistence_errors"] and all("normalize" in e for e in doc["persistence_errors"])
    assert "not persisted" in stderr and "Traceback" not in stderr
    code, stdout, _ = run_in_process(
        ["journal", "show", doc["run_id"], "--output-root", str(out), "--json"], capsys
    )
    events = json.loads(stdout)["events"]
    assert any(e["type"] == "CheckpointWriteFailed" for e in events)
