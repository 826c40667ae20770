"""`RunOutcome`: what one `PipelineRunner.run` returns to the run command.

Only what the runner produced: the output files, the chunk map, their attribution and
the persistence errors it met. Counts (decisions, plan outcomes, module calls) and
warnings are in the events it emitted, and folded once, by the projections
(projections/report.py).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from runjournal.domain.identity import LaneIdentities
from runjournal.domain.modules import OutputFile
from runjournal.domain.plan_keys import ChunkMapEntry
from runjournal.domain.ports import Spool


@dataclass(frozen=True, slots=True)
class SpooledOutput:
    """An output file set aside in the run's spool: its name, digest and size, and its
    bytes read back when asked for (`data`), once, by the placement of P5."""

    name: str
    sha256: str
    size: int
    read: Callable[[], bytes]

    @property
    def data(self) -> bytes:
        return self.read()

    @classmethod
    def of(cls, spool: Spool, name: str, data: bytes) -> SpooledOutput:
        read = functools.partial(spool.get, spool.put(data))
        return cls(name, hashlib.sha256(data).hexdigest(), len(data), read)


Output = OutputFile | SpooledOutput


@dataclass
class RunOutcome:
    outputs: list[Output]
    lane_identities: LaneIdentities
    chunk_map: Iterable[ChunkMapEntry]  # read at most once or twice: made as it is read
    persistence_errors: list[str] = field(default_factory=list)
    # output name -> (step, lane) of the artifact it holds or renders (`runs show`)
    attribution: dict[str, tuple[str, str]] = field(default_factory=dict)
