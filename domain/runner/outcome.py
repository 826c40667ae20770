"""`RunOutcome`: what one `PipelineRunner.run` returns to the run command.

Only what the runner produced: the output files, the chunk map, their attribution and
the persistence errors it met. Counts (decisions, plan outcomes, module calls) and
warnings are in the events it emitted, and folded once, by the projections
(projections/report.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runjournal.domain.modules import OutputFile
from runjournal.domain.plan_keys import ChunkMapEntry


@dataclass
class RunOutcome:
    outputs: list[OutputFile]
    lane_identities: list[str]
    chunk_map: list[ChunkMapEntry]
    persistence_errors: list[str] = field(default_factory=list)
    # output name -> (step, lane) of the artifact it holds or renders (`runs show`)
    attribution: dict[str, tuple[str, str]] = field(default_factory=dict)
