"""`RunOutcome`: what one `PipelineRunner.run` returns to the run command.

Only what the runner produced: the output files, the chunk map, their attribution and
the persistence errors it met. Counts (decisions, plan outcomes, module calls) and
warnings are in the events it emitted, and folded once, by the projections
(projections/report.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from runjournal.domain.identity import LaneIdentities
from runjournal.domain.modules import OutputFile
from runjournal.domain.plan_keys import ChunkMapEntry
from runjournal.domain.ports import Spool


@dataclass(frozen=True, slots=True)
class SpooledOutput:
    """An output file set aside in the run's spool: its name, digest and size, and its
    bytes read back when asked for (`data`), once, by the placement of P5.

    One is held per output file from the end of the stages to the run's end: its digest
    as its 32 bytes and the spool's own handle, not a hex string and a bound reader
    (about 130 bytes an output less; issue 29: peak RSS)."""

    name: str
    digest: bytes  # sha256, raw
    size: int
    source: Spool  # where the bytes are: the run's spool, or `InMemory`
    handle: Any  # what `source.get` takes

    @property
    def sha256(self) -> str:
        return self.digest.hex()

    @property
    def data(self) -> bytes:
        return self.source.get(self.handle)

    @classmethod
    def of(cls, spool: Spool, name: str, data: bytes) -> SpooledOutput:
        return cls(name, hashlib.sha256(data).digest(), len(data), spool, spool.put(data))

    @classmethod
    def held(cls, name: str, data: bytes) -> SpooledOutput:
        """A file held in memory (no spool): its own bytes."""
        return cls(name, hashlib.sha256(data).digest(), len(data), InMemory(data), None)


class InMemory:
    """The `Spool` of one file held in memory: `get` gives its bytes."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def put(self, data: bytes) -> None:
        raise TypeError("an in-memory output holds one file")

    def get(self, handle: Any) -> bytes:
        return self._data


Output = OutputFile | SpooledOutput


@dataclass
class RunOutcome:
    outputs: list[Output]
    lane_identities: LaneIdentities
    chunk_map: Iterable[ChunkMapEntry]  # read at most once or twice: made as it is read
    persistence_errors: list[str] = field(default_factory=list)
    # output name -> (step, lane) of the artifact it holds or renders (`runs show`)
    attribution: dict[str, tuple[str, str]] = field(default_factory=dict)
