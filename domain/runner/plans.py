"""Chunk plans: resolving each source's plan, then settling (publishing and recording) them.

Resolution happens before anything executes; settling waits until the required steps of
`--recompute` are restored, so a failed predecessor leaves the plan store untouched.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
from runjournal.domain.chunking import PlanInvalid, Span, plan_chunks, validate_plan
from runjournal.domain.events import PlanOutcome
from runjournal.domain.identity import chunk_ids, raw_sha256
from runjournal.domain.modules import Chunk
from runjournal.domain.pipeline import ResolvedPipeline, Source
from runjournal.domain.plan_keys import PlanFacts
from runjournal.domain.ports import (
    ChunkPlanStore,
    KnownChunks,
    PlanPublishError,
    SourceChanged,
    Spool,
)
from runjournal.domain.redaction import safe_error_text
from runjournal.domain.runner.ledger import RunLedger


@dataclass
class PlannedSource:
    """One source's chunk plan, resolved but not yet published or recorded."""

    source: Source
    key: str
    facts: PlanFacts
    spans: list[Span]
    outcomes: list[PlanOutcome]
    chunks: list[Chunk]
    publish: bool
    # chunks known without reading the source: their text is "" until `read_chunks`
    unread: bool = False
    # `resolve_plans` holds each source's chunks packed as it plans it (then `chunks` and,
    # unless the plan is to be published, `spans` are empty: `count` chunks), so no step
    # of a run holds every chunk as objects (issue 29: peak RSS)
    packed: SourceChunks | None = None
    count: int | None = None


def _held(planned: PlannedSource, spool: Spool | None) -> PlannedSource:
    """`planned` with its chunks packed (set aside in `spool` when there is one) and,
    unless it is to be published, no spans."""
    planned.packed = SourceChunks(planned.source.name, planned.chunks).spilled(spool)
    planned.count = len(planned.chunks)
    planned.chunks = []
    if not planned.publish:
        planned.spans = []
    return planned


def _known(source: Source, key: str, known: KnownChunks | None) -> list[Chunk] | None:
    """An unread source's chunks as recorded under its plan key (texts empty), or None."""
    rows = known.chunks(source.name, key) if known is not None else None
    if not rows:
        return None
    end = 0
    for _id, start, stop, _sha in rows:  # contiguous spans over the whole source
        if start != end or stop <= start:
            return None
        end = stop
    if end != source.size:
        return None
    return [
        Chunk(id=i, source=source.name, start=a, end=b, text="", sha256=h) for i, a, b, h in rows
    ]


def resolve_plans(
    pipeline: ResolvedPipeline,
    plan_store: ChunkPlanStore | None,
    known: KnownChunks | None = None,
    spool: Spool | None = None,
) -> list[PlannedSource]:
    """Look up or compute every source's plan; publishing waits for `settle_plans`.

    A source not read yet (`Source.unread_size`) whose chunks `known` recorded under its
    plan key is planned from them without reading it (outcome REUSED: the chunks are the
    plan's, keyed by the source's digest); otherwise it is read now (docs/internals.md
    "Inputs a resume does not read"), and its chunks keep no text either: the run holds
    no input's bytes (issue 29), `read_chunks` reads them when an extract executes.
    `known` records the chunks of every source planned here from its bytes; with a
    `spool` each source's packed chunks are set aside there as it is planned."""
    out: list[PlannedSource] = []
    settings = pipeline.chunking
    for unread in pipeline.sources:
        source = unread
        facts = PlanFacts(source_sha256=source.sha256, source_size=source.size, settings=settings)
        key = facts.key()
        if source.unread_size is not None:
            # not in bypass mode (no plan store), whose outcome is BYPASSED
            chunks = _known(source, key, known) if plan_store is not None else None
            if chunks is not None:
                spans = [Span(c.start, c.end) for c in chunks]
                outcomes = [PlanOutcome.REUSED]
                out.append(
                    _held(
                        PlannedSource(source, key, facts, spans, outcomes, chunks, False, True),
                        spool,
                    )
                )
                continue
            if known is None:
                raise SourceChanged(f"input '{source.name}' was not read")
            source = msgspec.structs.replace(source, data=known.read(source), unread_size=None)
        outcomes: list[PlanOutcome] = []
        spans: list[Span] | None = None
        if plan_store is None:
            outcomes.append(PlanOutcome.BYPASSED)
        else:
            lookup = plan_store.get(key)
            if lookup.outcome is PlanOutcome.REUSED and lookup.spans is not None:
                try:
                    validate_plan(source.data, lookup.spans, settings.max_chars)
                    spans = list(lookup.spans)
                    outcomes.append(PlanOutcome.REUSED)
                except PlanInvalid:  # a stored plan that does not fit this source
                    outcomes.append(PlanOutcome.CORRUPT)
            elif lookup.outcome is PlanOutcome.CORRUPT:
                outcomes.append(PlanOutcome.CORRUPT)
        publish = spans is None and plan_store is not None
        if spans is None:
            spans = plan_chunks(source.data, settings)
            validate_plan(source.data, spans, settings.max_chars)
            outcomes.append(PlanOutcome.COMPUTED)
        chunks = make_chunks(source, spans)
        if known is not None:
            known.remember(source.name, key, chunks)
        if unread is not source:  # read here: its text is read again when an extract needs it
            texts = [msgspec.structs.replace(c, text="") for c in chunks]
            out.append(
                _held(
                    PlannedSource(unread, key, facts, spans, outcomes, texts, publish, True), spool
                )
            )
            continue
        out.append(
            _held(PlannedSource(source, key, facts, spans, outcomes, chunks, publish), spool)
        )
    return out


# a chunk without its text, packed: its id and sha256 (raw digests), its offsets
_PACKED_CHUNK = struct.Struct(">32s32sQQ")


class SourceChunks:
    """One source's planned chunks as the run holds them between planning and its lanes.

    Chunks without text (a source planned unread, or read and let go: the usual case)
    are held packed, 80 bytes a chunk, and made again each time a lane asks (`get`):
    as objects with hex ids they were about 350 bytes a chunk, held for the whole run
    (issue 29: peak RSS). `spilled` sets the packed chunks aside in the run's spool, so
    the run holds a handle and a digest a source, not its chunks; `get` reads them back
    and checks them against the digest. Chunks with text are held as they are."""

    __slots__ = ("_chunks", "_digest", "_packed", "_spool", "source")

    def __init__(self, source: str, chunks: list[Chunk]) -> None:
        self.source = source
        self._chunks: list[Chunk] | None = chunks
        self._packed: Any = b""  # the packed chunks, or their handle in `_spool`
        self._spool: Spool | None = None
        self._digest = b""
        parts: list[bytes] = []
        for c in chunks:
            ident, sha = raw_sha256(c.id), raw_sha256(c.sha256)
            if c.text or c.source != source or ident is None or sha is None:
                return
            parts.append(_PACKED_CHUNK.pack(ident, sha, c.start, c.end))
        self._chunks, self._packed = None, b"".join(parts)

    def spilled(self, spool: Spool | None) -> SourceChunks:
        """Itself, its packed chunks set aside in `spool` (when there is one and they
        are packed): a handle and their 16-byte digest held in their place."""
        if spool is None or self._chunks is not None or self._spool is not None:
            return self
        packed = self._packed
        self._digest = _chunks_digest(packed)
        self._packed, self._spool = spool.put(packed), spool
        return self

    def _packed_chunks(self) -> bytes:
        if self._spool is None:
            return self._packed  # type: ignore[no-any-return]
        packed = self._spool.get(self._packed)
        if _chunks_digest(packed) != self._digest:
            raise OSError(f"the chunks of '{self.source}' set aside in the run's spool changed")
        return packed

    def __len__(self) -> int:
        chunks = self._chunks
        if chunks is not None:
            return len(chunks)
        return len(self._packed_chunks()) // _PACKED_CHUNK.size

    def get(self) -> list[Chunk]:
        """The chunks, in plan order (equal to the ones planned)."""
        if self._chunks is not None:
            return self._chunks
        source = self.source
        return [
            Chunk(id=i.hex(), source=source, start=a, end=b, text="", sha256=h.hex())
            for i, h, a, b in _PACKED_CHUNK.iter_unpack(self._packed_chunks())
        ]

    def __iter__(self) -> Iterator[Chunk]:
        return iter(self.get())


def _chunks_digest(packed: bytes) -> bytes:
    return hashlib.blake2b(packed, digest_size=16).digest()


def read_chunks(unread: Source, known: KnownChunks, chunks: list[Chunk]) -> list[Chunk]:
    """The chunks of a source planned unread, with their text: the source is read (its
    digest checked by `known.read`) and chunked along the plan's spans (`chunks`, its
    planned chunks); chunks other than the planned ones (ids) are `SourceChanged`."""
    source = msgspec.structs.replace(unread, data=known.read(unread), unread_size=None)
    chunks_read = make_chunks(source, [Span(c.start, c.end) for c in chunks])
    if [c.id for c in chunks_read] != [c.id for c in chunks]:
        raise SourceChanged(f"input '{source.name}' is not the one its chunks were recorded from")
    return chunks_read


def settle_plans(
    planned: list[PlannedSource], plan_store: ChunkPlanStore | None, ledger: RunLedger
) -> None:
    """Publish the computed plans as one durable group, then record each source's plan
    outcomes (docs/internals.md "Group durability": one sync for the batch, before any
    `ChunkPlanResolved` names a published plan)."""
    published = 0
    for p in planned:
        if p.publish and plan_store is not None:
            try:
                if plan_store.publish(p.key, p.spans, p.facts, durable=False):
                    p.outcomes.append(PlanOutcome.PUBLISHED)
                    published += 1
            except PlanPublishError as exc:
                ledger.persistence_error(safe_error_text(str(exc)))
    if published and plan_store is not None:
        try:
            plan_store.sync()
        except PlanPublishError as exc:
            ledger.persistence_error(safe_error_text(f"{published} {exc}"))
    for p in planned:
        ledger.journal.plan_resolved(
            source=p.source.name,
            plan_key=p.key,
            outcomes=p.outcomes,
            chunks=len(p.spans) if p.count is None else p.count,
        )
        # published and recorded: the chunks' offsets are all the run needs of them now
        # (`read_chunks`), not a second list held to the run's end (issue 29: peak RSS)
        p.spans = []


def make_chunks(source: Source, spans: list[Span]) -> list[Chunk]:
    """The source's chunks: id, offsets, text and content digest of each span."""
    ids = chunk_ids(source.name)
    out = []
    for span in spans:
        data = source.data[span.start : span.end]
        out.append(
            Chunk(
                id=ids(data),
                source=source.name,
                start=span.start,
                end=span.end,
                text=data.decode("utf-8"),
                sha256=hashlib.sha256(data).hexdigest(),
            )
        )
    return out
