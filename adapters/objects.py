"""Run outputs as hard links to content-addressed objects under the output root.

A resume that reuses every artifact must not write every output again: each output file
enters the new run directory as a hard link to `<output root>/.runjournal/objects/<aa>/<sha256>`,
falling back to a copy where the file system cannot link (like DVC's `cache.type`
"hardlink,copy"). Objects and outputs are read-only (0400), so a file shared by two run
directories is not edited in place by accident (docs/internals.md "Run outputs as links").
"""

from __future__ import annotations

import enum

from runjournal.adapters.fsroot import AlreadyExists, FsError, FsNotFound, FsRoot

__all__ = ["OBJECTS_DIR", "OUTPUT_MODE", "OutputObjects", "Placement"]

OBJECTS_DIR = ".runjournal/objects"
OUTPUT_MODE = 0o400


class Placement(enum.Enum):
    """How an output entered its run directory."""

    LINKED = "linked"
    COPIED = "copied"


class OutputObjects:
    """The output root's object store: one file per distinct output content."""

    def __init__(self, root: FsRoot) -> None:
        self._root = root  # the output root; objects and run directories share its file system
        self._shards: dict[str, FsRoot] = {}  # shard directories opened by `place`

    def close(self) -> None:
        """Close the shard directories `place` kept open."""
        for shard in self._shards.values():
            shard.close()
        self._shards.clear()

    def _shard(self, digest: str) -> FsRoot | None:
        """The open shard directory of `digest`'s object, None while it does not exist:
        opened once, so each further object there is read and linked by its leaf name,
        without resolving the path again (docs/performance.md "Fully cached re-runs")."""
        key = digest[:2]
        shard = self._shards.get(key)
        if shard is None:
            try:
                shard = self._shards[key] = self._root.subroot(f"{OBJECTS_DIR}/{key}")
            except FsNotFound:
                return None
        return shard

    @staticmethod
    def object_name(digest: str) -> str:
        return f"{OBJECTS_DIR}/{digest[:2]}/{digest}"

    def place(self, run_dir: FsRoot, name: str, data: bytes, digest: str) -> Placement:
        """Make `name` in `run_dir` hold `data`: a link to its object, else a copy.

        An existing object is linked only if it still holds exactly `data` (one read), so
        an object edited by hand is replaced, never propagated. Nothing is fsynced: the
        terminalization syncs the output root once (docs/internals.md "Group durability").
        """
        obj = self.object_name(digest)
        try:
            shard = self._shard(digest)
            if shard is None or not self._holds(shard, digest, data):
                self._root.write_bytes(obj, data, durable=False, mode=OUTPUT_MODE)
                shard = shard or self._shard(digest)
            source, leaf = (shard, digest) if shard is not None else (self._root, obj)
            run_dir.link(name, source, leaf, durable=False)
            return Placement.LINKED
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
