"""The built-in deterministic modules, by the name a pipeline's `module` uses."""

from __future__ import annotations

from runjournal.adapters.builtin_modules.definitions import DefinitionsModule
from runjournal.adapters.builtin_modules.glossary import GlossaryModule
from runjournal.adapters.builtin_modules.headings import HeadingsModule
from runjournal.adapters.builtin_modules.llm_json import LLMJsonModule
from runjournal.adapters.builtin_modules.terms import TermsModule
from runjournal.domain.modules import Module

__all__ = [
    "BUILTIN_MODULES",
    "DefinitionsModule",
    "GlossaryModule",
    "HeadingsModule",
    "LLMJsonModule",
    "TermsModule",
]

BUILTIN_MODULES: dict[str, type[Module]] = {
    cls.name: cls
    for cls in (TermsModule, DefinitionsModule, GlossaryModule, HeadingsModule, LLMJsonModule)
}
