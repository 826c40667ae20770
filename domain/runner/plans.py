"""Chunk plans: resolving each source's plan, then settling (publishing and recording) them.

Resolution happens before anything executes; settling waits until the required steps of
`--recompute` are restored, so a failed predecessor leaves the plan store untouched.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from runjournal.domain.chunking import PlanInvalid, Span, plan_chunks, validate_plan
from runjournal.domain.events import PlanOutcome
from runjournal.domain.identity import chunk_ids
from runjournal.domain.modules import Chunk
from runjournal.domain.pipeline import ResolvedPipeline, Source
from runjournal.domain.plan_keys import PlanFacts
from runjournal.domain.ports import ChunkPlanStore, PlanPublishError
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


def resolve_plans(
    pipeline: ResolvedPipeline, plan_store: ChunkPlanStore | None
) -> list[PlannedSource]:
    """Look up or compute every source's plan; publishing waits for `settle_plans`."""
    out: list[PlannedSource] = []
    settings = pipeline.chunking
    for source in pipeline.sources:
        facts = PlanFacts(
            source_sha256=source.sha256, source_size=len(source.data), settings=settings
        )
        key = facts.key()
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
        out.append(PlannedSource(source, key, facts, spans, outcomes, chunks, publish))
    return out


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
            chunks=len(p.spans),
        )


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
