"""Many runs placing the same new output objects at once all link them (docs/internals.md
"Run outputs as links"): a writer whose fresh object is renamed over by another writer's
copy between its write and its link gets ENOENT from link(2) for the replaced inode, and
links the name again instead of falling back to a copy."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.objects import OutputObjects, Placement

REPEATS = 40
THREADS = 16
OUTPUTS = 40


def test_concurrent_writers_of_one_new_object_all_link_it(tmp_path: Path) -> None:
    placements: list[Placement] = []
    lock = threading.Lock()
    for rep in range(REPEATS):
        with FsRoot.open(tmp_path / f"out{rep}", create=True) as root:
            objects = OutputObjects(root, open_dirs=1)  # the smallest handle cache

            def place(i: int, root: FsRoot = root, objects: OutputObjects = objects) -> None:
                with root.subroot(f"run-{i}", create=True) as run_dir:
                    for j in range(OUTPUTS):
                        data = f"output {j % 7}".encode()
                        digest = hashlib.sha256(data).hexdigest()
                        got = objects.place(run_dir, f"o{j}.txt", data, digest)
                        with lock:
                            placements.append(got)

            threads = [threading.Thread(target=place, args=(i,)) for i in range(THREADS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            objects.close()
        for i in range(THREADS):
            for j in range(OUTPUTS):
                placed = tmp_path / f"out{rep}" / f"run-{i}" / f"o{j}.txt"
                assert placed.read_bytes() == f"output {j % 7}".encode()
    assert len(placements) == REPEATS * THREADS * OUTPUTS
    assert set(placements) == {Placement.LINKED}, placements.count(Placement.COPIED)
