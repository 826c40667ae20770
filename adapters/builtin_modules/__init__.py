"""The built-in deterministic modules, by the name a pipeline's `module` uses.

Each module is imported when a pipeline first names it (`BUILTINS`), so resolving a
pipeline of `builtin.terms` does not load the other built-ins and their patterns
(docs/performance.md "Start-up"). `BUILTIN_MODULES` (every class, imported) is for
callers that want them all.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from runjournal.adapters.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from runjournal.domain.modules import Module

# name -> (submodule, class); a test checks each class's `name` against its key.
BUILTIN_CLASSES: dict[str, tuple[str, str]] = {
    "builtin.terms": ("terms", "TermsModule"),
    "builtin.definitions": ("definitions", "DefinitionsModule"),
    "builtin.glossary": ("glossary", "GlossaryModule"),
    "builtin.headings": ("headings", "HeadingsModule"),
    "llm.json": ("llm_json", "LLMJsonModule"),
}


class _Builtins(Mapping[str, "type[Module]"]):
    """Name -> class, each class imported on first lookup."""

    def __getitem__(self, name: str) -> type[Module]:
        submodule, cls = BUILTIN_CLASSES[name]
        module = importlib.import_module(f"{__name__}.{submodule}")
        found: type[Module] = getattr(module, cls)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(BUILTIN_CLASSES)

    def __len__(self) -> int:
        return len(BUILTIN_CLASSES)

    def __contains__(self, name: object) -> bool:
        return name in BUILTIN_CLASSES


BUILTINS: Mapping[str, type[Module]] = _Builtins()


def is_builtin_class(cls: type) -> bool:
    """Whether `cls` is one of the built-in module classes (without importing the others)."""
    submodule = cls.__module__.removeprefix(f"{__name__}.")
    return submodule != cls.__module__ and (submodule, cls.__qualname__) in BUILTIN_CLASSES.values()


_lazy_getattr, __dir__ = lazy_exports(
    globals(), {cls: submodule for submodule, cls in BUILTIN_CLASSES.values()}
)


def __getattr__(name: str) -> Any:
    if name == "BUILTIN_MODULES":
        return dict(BUILTINS.items())
    return _lazy_getattr(name)


__all__ = [
    "BUILTINS",
    "BUILTIN_CLASSES",
    "BUILTIN_MODULES",
    "DefinitionsModule",
    "GlossaryModule",
    "HeadingsModule",
    "LLMJsonModule",
    "TermsModule",
    "is_builtin_class",
]
