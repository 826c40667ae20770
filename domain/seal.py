"""Which runs must carry a chain and a seal, and the seal aggregate's id (docs/operations.md
"Signed checkpoints").

Version 0.2.0 always writes both: a run allocated by it or later whose rows carry no
chain link, or that ended without a checkpoint covering every row, was tampered with;
older runs may be `unchained` or unsealed honestly.
"""

from __future__ import annotations

from typing import Final
from uuid import UUID, uuid5

SEAL_NAMESPACE: Final = UUID("0c9e4a71-8d2b-5f36-a1e4-3b7c5d9f2e80")
SEALED_SINCE: Final = (0, 2, 0)


def seal_aggregate_id(run_id: str) -> UUID:
    return uuid5(SEAL_NAMESPACE, run_id)


def origin(run_id: str) -> str:
    """The checkpoint's origin line: names the log (one run) it is a checkpoint of."""
    return f"runjournal/run/{run_id}"


def writes_seals(tool_version: str) -> bool:
    """True when `tool_version` always chains and seals its runs."""
    parts = []
    for piece in tool_version.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit()) if piece else ""
        if not digits or not piece.startswith(digits):
            break
        parts.append(int(digits))
    return tuple(parts) >= SEALED_SINCE
