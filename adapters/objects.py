"""Run outputs as hard links to content-addressed objects under the output root.

A resume that reuses every artifact must not write every output again: each output file
enters the new run directory as a hard link to `<output root>/.runjournal/objects/<aa>/<sha256>`,
falling back to a copy where the file system cannot link (like DVC's `cache.type`
"hardlink,copy"). Objects and outputs are read-only (0400), so a file shared by two run
directories is not edited in place by accident (docs/internals.md "Run outputs as links").
"""

from __future__ import annotations

import enum

from runjournal.adapters.dir_handles import DirectoryHandles
from runjournal.adapters.fsroot import AlreadyExists, FsError, FsNotFound, FsRoot

__all__ = ["OBJECTS_DIR", "OUTPUT_MODE", "SHARDS", "OutputObjects", "Placement"]

OBJECTS_DIR = ".runjournal/objects"
OUTPUT_MODE = 0o400
SHARDS = 256  # `<aa>` shard directories: all of them stay open by default


class Placement(enum.Enum):
    """How an output entered its run directory."""

    LINKED = "linked"
    COPIED = "copied"


# Links tried before copying when concurrent writers of one new object keep replacing it.
_LINK_TRIES = 4


class OutputObjects:
    """The output root's object store: one file per distinct output content."""

    def __init__(self, root: FsRoot, *, open_dirs: int = SHARDS) -> None:
        self._root = root  # the output root; objects and run directories share its file system
        # Shard directories opened by `place`, lent under a lock
        # (docs/internals.md "Objects shared between threads"): each further object of a
        # shard is read and linked by its leaf name, without resolving the path again
        # (docs/performance.md "Fully cached re-runs").
        self._shards = DirectoryHandles(root, open_dirs)

    def close(self) -> None:
        """Close the shard directories `place` kept open."""
        self._shards.close()

    @staticmethod
    def _shard_name(digest: str) -> str:
        return f"{OBJECTS_DIR}/{digest[:2]}"

    @staticmethod
    def object_name(digest: str) -> str:
        return f"{OBJECTS_DIR}/{digest[:2]}/{digest}"

    def place(self, run_dir: FsRoot, name: str, data: bytes, digest: str) -> Placement:
        """Make `name` in `run_dir` hold `data`: a link to its object, else a copy.

        An existing object is linked only if it still holds exactly `data` (one read), so
        an object edited by hand is replaced, never propagated. Nothing is fsynced: the
        terminalization syncs the output root once (docs/internals.md "Group durability").
        """
        shard_name = self._shard_name(digest)
        try:
            for _ in range(_LINK_TRIES):
                try:
                    with self._shards.lend(shard_name) as shard:
                        if self._holds(shard, digest, data):
                            run_dir.link(name, shard, digest, durable=False)
                            return Placement.LINKED
                except FsNotFound:
                    pass  # no shard directory yet (or the object vanished): write it
                self._root.write_bytes(
                    self.object_name(digest), data, durable=False, mode=OUTPUT_MODE
                )
                try:
                    with self._shards.lend(shard_name) as shard:
                        run_dir.link(name, shard, digest, durable=False)
                    return Placement.LINKED
                except FsNotFound:
                    # Another run wrote the same new object at once and renamed its copy
                    # over ours between our write and our link: link(2) then says ENOENT
                    # for the replaced inode. The name holds the same bytes: link again.
                    continue
        except AlreadyExists:
            raise  # the run directory already has `name`: a real conflict, not a fallback
        except FsError:
            pass  # EXDEV, EPERM, EMLINK, ENOSPC, an object gc removed meanwhile: copy
        run_dir.write_bytes(name, data, overwrite=False, durable=False, mode=OUTPUT_MODE)
        return Placement.COPIED

    @staticmethod
    def _holds(shard: FsRoot, leaf: str, data: bytes) -> bool:
        try:
            return shard.read_bytes(leaf) == data
        except FsError:
            return False

    def prune(self, *, dry_run: bool = False) -> list[str]:
        """Remove objects no run directory links any more (link count 1); their names.

        A run linking an object at the same moment either linked first (the count is 2
        and the object stays) or finds it gone and links a fresh copy.
        """
        removed: list[str] = []
        try:
            shards = self._root.listdir(OBJECTS_DIR)
        except FsError:
            return removed
        for shard in shards:
            try:
                names = self._root.listdir(f"{OBJECTS_DIR}/{shard}")
            except FsError:
                continue
            for leaf in names:
                name = f"{OBJECTS_DIR}/{shard}/{leaf}"
                try:
                    if self._root.link_count(name) != 1:
                        continue
                    if not dry_run:
                        self._root.remove(name, missing_ok=True)
                except FsError:
                    continue
                removed.append(name)
        return removed
