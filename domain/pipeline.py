"""The resolved pipeline the runner executes: steps with loaded modules, sources, references.

Resolution (loading modules, reading files, computing component digests) happens in
adapters and the CLI; what reaches the runner is plain data plus module instances.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
from runjournal.domain.chunking import ChunkingSettings
from runjournal.domain.identity import LaneComponents
from runjournal.domain.modules import LLMRuntime, Module, Validator


class Scope(enum.StrEnum):
    DOCUMENT = "document"
    CORPUS = "corpus"


class Source(msgspec.Struct, frozen=True):
    """An input document: logical name, bytes (UTF-8 checked) and content digest."""

    name: str
    data: bytes
    sha256: str
    # An input not read yet (`input_check = "stat"`, its digest known from its stat facts):
    # its size, with `data` empty until the runner reads it through its `KnownChunks`
    # port (docs/internals.md "Inputs a resume does not read").
    unread_size: int | None = None

    @property
    def size(self) -> int:
        return self.unread_size if self.unread_size is not None else len(self.data)


class ModuleShipment(msgspec.Struct, frozen=True):
    """How a worker finds a step's module (docs/internals.md "Executors"): its spec and
    the pipeline directory.

    For a `path/file.py:Class` plugin, `plugin_path` (absolute, it names the plugin's
    Python module) and `plugin_source`, the exact bytes the coordinator loaded: a worker
    runs that code, not whatever the file holds on its own disk.
    """

    spec: str
    pipeline_dir: str
    plugin_path: str | None = None
    plugin_source: bytes | None = None
    # the pipeline's `plugin_fingerprint` ("source" or ""), so a worker resolves a class
    # that declares no fingerprint as the coordinator did
    default_fingerprint: str = ""


@dataclass(frozen=True)
class ResolvedStep:
    id: str
    module: Module
    scope: Scope
    consumes: tuple[str, ...]
    params: Mapping[str, Any]
    components: LaneComponents
    validators: tuple[Validator, ...] = ()
    llm: LLMRuntime | None = None
    # The `--set` pairs this step's module reads (None: every pair, the module did not
    # declare `override_keys`); see docs/modules.md "Overrides".
    overrides: Mapping[str, str] | None = None
    # Where a worker finds the module (None: its calls always run in the coordinator).
    shipment: ModuleShipment | None = None
    # under --keep-going, runs on the producer lanes that succeeded (`partial = true`)
    partial: bool = False

    def overrides_seen(self, pipeline_overrides: Mapping[str, str]) -> dict[str, str]:
        return dict(pipeline_overrides if self.overrides is None else self.overrides)


@dataclass(frozen=True)
class ResolvedPipeline:
    name: str
    steps: tuple[ResolvedStep, ...]
    sources: tuple[Source, ...]
    chunking: ChunkingSettings
    references: Mapping[str, str] = field(default_factory=dict)
    reference_digests: Mapping[str, str] = field(default_factory=dict)
    overrides: Mapping[str, str] = field(default_factory=dict)

    def step(self, step_id: str) -> ResolvedStep:
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(step_id)
