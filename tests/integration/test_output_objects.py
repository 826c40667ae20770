"""`OutputObjects.place` opens each shard directory once per terminalization, and what it
links is still exactly the output's bytes (docs/internals.md "Run outputs as links")."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.objects import OutputObjects, Placement


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_outputs_of_one_shard_open_it_once_and_link_their_objects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    subroot = FsRoot.subroot

    def counted(self: FsRoot, name: str, **kwargs: bool) -> FsRoot:
        opened.append(name)
        return subroot(self, name, **kwargs)

    monkeypatch.setattr(FsRoot, "subroot", counted)
    # Outputs whose digests share their first two hex digits: one shard directory.
    blobs: dict[str, bytes] = {}
    i = 0
    while len(blobs) < 3:
        data = f"output {i}".encode()
        if _digest(data).startswith(_digest(b"output 0")[:2]):
            blobs[f"artifacts/o{i}.json"] = data
        i += 1
    with FsRoot.open(tmp_path / "out", create=True) as root:
        run_dir = root.subroot("run", create=True)
        for attempt in ("cold", "again"):  # objects written, then found and linked
            opened.clear()
            objects = OutputObjects(root)
            try:
                for name, data in blobs.items():
                    target = f"{attempt}/{name}"
                    placed = objects.place(run_dir, target, data, _digest(data))
                    assert placed is Placement.LINKED
            finally:
                objects.close()
            shard = f".runjournal/objects/{_digest(b'output 0')[:2]}"
            assert opened.count(shard) == (2 if attempt == "cold" else 1), opened
        run_dir.close()
    for name, data in blobs.items():
        for attempt in ("cold", "again"):
            path = tmp_path / "out" / "run" / attempt / name
            assert path.read_bytes() == data and os.stat(path).st_nlink == 3


def test_an_object_edited_by_hand_is_replaced_not_linked(tmp_path: Path) -> None:
    data = b"the output"
    with FsRoot.open(tmp_path / "out", create=True) as root:
        run_dir = root.subroot("run", create=True)
        objects = OutputObjects(root)
        try:
            objects.place(run_dir, "a.json", data, _digest(data))
            obj = tmp_path / "out" / OutputObjects.object_name(_digest(data))
            obj.chmod(0o600)
            obj.write_bytes(b"edited")  # in place: a.json, a link to it, changes too
            objects.place(run_dir, "b.json", data, _digest(data))  # the shard is cached
        finally:
            objects.close()
            run_dir.close()
    assert (tmp_path / "out" / "run" / "b.json").read_bytes() == data
    assert obj.read_bytes() == data
