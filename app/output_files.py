"""A file a maintenance command writes where the user asked (`journal export -o`, `journal
otel --path`), through the confined root of its directory, with one error line each."""

from __future__ import annotations

import os

from runjournal.app.errors import RunFailedError, UsageError
from runjournal.app.journals import MaintenancePorts


def write_output_file(ports: MaintenancePorts, path: str, data: bytes, *, force: bool) -> None:
    """Write `data` to the absolute `path`; an existing file only with `force`.

    An existing file without `force`, or a missing directory, is a `UsageError` (exit 2);
    any other failure a `RunFailedError` (exit 1).
    """
    from runjournal.adapters.fsroot import AlreadyExists, FsError, FsNotFound

    directory, name = os.path.split(path)
    try:
        with ports.open_root(directory) as root:
            root.write_bytes(name, data, overwrite=force)
    except AlreadyExists:
        raise UsageError(f"{path} exists (use --force to replace it)") from None
    except FsNotFound:
        raise UsageError(f"{directory}: no such directory") from None
    except FsError as exc:
        raise RunFailedError(f"cannot write {path}: {exc}") from None
