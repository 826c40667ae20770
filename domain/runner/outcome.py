"""`RunOutcome`: what one `PipelineRunner.run` returns to the run command."""

from __future__ import annotations

from dataclasses import dataclass, field

from runjournal.domain.modules import OutputFile
from runjournal.domain.plan_keys import ChunkMapEntry


@dataclass
class RunOutcome:
    outputs: list[OutputFile]
    decisions: dict[str, int]
    plans: dict[str, int]
    lane_identities: list[str]
    chunk_map: list[ChunkMapEntry]
    persistence_errors: list[str] = field(default_factory=list)
    warnings: list[tuple[str, str, str]] = field(default_factory=list)
    module_calls: int = 0
    # output name -> (step, lane) of the artifact it holds or renders (`runs show`)
    attribution: dict[str, tuple[str, str]] = field(default_factory=dict)
