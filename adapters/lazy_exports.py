"""A package's public names, imported from their submodule when first used (PEP 562).

A package `__init__` that re-exports names from heavy submodules makes every importer
pay for all of them: importing `runjournal.adapters.journal` for `JournalError` would
load eventsourcing. With `lazy_exports` the package names what it exports and where, and
each submodule is imported on first access to one of its names (docs/performance.md
"Start-up").
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], exports: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for the package whose globals are `namespace`.

    `exports` maps each public name to the submodule (relative to the package) that
    defines it. A resolved name is stored in the package, so it is looked up once.
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        submodule = exports.get(name)
        if submodule is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{submodule}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
