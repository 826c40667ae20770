"""Fake roots that fail on chosen entries, passed to the product through `Factories`.

CI runs as root, where directory modes do not stop writes, so faults are injected. A test
builds a `Fault` list, and `faulty_factories(...)` gives the `Factories` whose
`open_root` opens an `FsRoot` subclass raising the fault; its subroots are of the same
class (`FsRoot.subroot` keeps the class), so every file beneath a root the composition
root opened is reached through the fake. Nothing in the product is monkeypatched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runjournal.adapters.fsroot import FsRoot
from runjournal.cli.compose import Factories


@dataclass(frozen=True)
class Fault:
    """`method(name, ...)` raises `error(name)` on a root where `applies(root, name)` holds."""

    method: str  # an FsRoot method taking the entry's name first: write_bytes, mkdir, …
    applies: Callable[[FsRoot, str], bool]
    error: Callable[[str], BaseException]


# The FsRoot methods that take an entry's name first, and so can be made to fail.
METHODS = (
    "write_bytes",
    "append_record",
    "link",
    "read_bytes",
    "append_line",
    "mkdir",
    "subroot",
    "replace_symlink",
    "remove",
    "remove_tree",
    "rename",
)


def faulty_root_class(faults: list[Fault]) -> type[FsRoot]:
    """An `FsRoot` subclass raising the faults of `faults` that apply.

    The list is read at each call, so a test may add a fault after the roots were opened
    (a write that fails only after allocation, say).
    """
    namespace: dict[str, Any] = {}
    for method in METHODS:
        original = getattr(FsRoot, method)

        def wrapper(self: FsRoot, name: str, *a: Any, _orig=original, _m=method, **kw: Any):
            for fault in faults:
                if fault.method == _m and fault.applies(self, name):
                    raise fault.error(name)
            return _orig(self, name, *a, **kw)

        namespace[method] = wrapper
    return type("FaultyFsRoot", (FsRoot,), namespace)


def faulty_factories(*faults: Fault) -> Factories:
    """The real factories, with every root opened as a faulty one."""
    return Factories(open_root=faulty_root_class(list(faults)).open)
