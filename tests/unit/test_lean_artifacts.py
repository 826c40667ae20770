"""A run holds every lane's artifact until its outputs are written: as bytes only, for a
step no other step consumes (`Artifact.lean`; the decoded form is decoded again when
`outputs` asks for it), decoded for a step another step consumes (issue 29: peak RSS)."""

from __future__ import annotations

import hashlib
import tracemalloc

import msgspec
from runjournal.domain.chunking import ChunkingSettings, ChunkStrategy
from runjournal.domain.identity import LaneComponents
from runjournal.domain.modules import Module, Normalized, OutputFile
from runjournal.domain.pipeline import ResolvedPipeline, ResolvedStep, Scope, Source
from runjournal.domain.runner import PipelineRunner
from support.recorder import FakeRecorder

LANES = 40
ENTRIES = 2000  # per artifact: about 10 bytes each encoded, a dict of about 200 decoded


class Wide(Module):
    """An artifact whose decoded form is many times its bytes."""

    name = "t.wide"
    fingerprint = "t.wide/1"
    artifact_kind = "wide"
    schema = "t.wide/v1"
    chunk_type = str
    merged_type = list[str]
    artifact_type = list[dict[str, int]]

    def extract(self, chunk, ctx):
        return chunk.text

    def merge(self, parts, ctx):
        return list(parts)

    def normalize(self, merged, ctx):
        return Normalized([{"k": i} for i in range(ENTRIES)])

    def outputs(self, artifact, ctx):
        assert artifact == [{"k": i} for i in range(ENTRIES)]  # decoded again, the same
        return [OutputFile(f"count/{ctx.lane}.txt", str(len(artifact)).encode())]


class Count(Module):
    """Consumes `wide`: its lanes get the decoded artifacts."""

    name = "t.count"
    fingerprint = "t.count/1"
    artifact_kind = "count"
    schema = "t.count/v1"
    chunk_type = str
    merged_type = list[str]
    artifact_type = int

    def extract(self, chunk, ctx):
        return chunk.text

    def merge(self, parts, ctx):
        return list(parts)

    def normalize(self, merged, ctx):
        (lanes,) = ctx.consumed.values()
        return Normalized(sum(len(a) for a in lanes.values()))


def pipeline(*steps: tuple[str, Module, tuple[str, ...], Scope]) -> ResolvedPipeline:
    comps = LaneComponents(
        config="a",
        module="m",
        validators="",
        references="",
        overrides="",
        profile="",
        profile_source="",
    )
    sources = []
    for i in range(LANES):
        data = f"Document {i} says alpha.\n".encode()
        sources.append(Source(name=f"d{i}.md", data=data, sha256=hashlib.sha256(data).hexdigest()))
    return ResolvedPipeline(
        name="p",
        steps=tuple(
            ResolvedStep(
                id=sid, module=m, scope=scope, consumes=consumes, params={}, components=comps
            )
            for sid, m, consumes, scope in steps
        ),
        sources=tuple(sources),
        chunking=ChunkingSettings(strategy=ChunkStrategy.PARAGRAPHS, max_chars=400),
    )


def _decoded_size() -> int:
    data = msgspec.json.encode([{"k": i} for i in range(ENTRIES)])
    tracemalloc.start()
    try:
        value = msgspec.json.decode(data, type=Wide.artifact_type)
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del value
    return size


def test_a_run_holds_the_artifacts_no_step_consumes_as_bytes() -> None:
    decoded = _decoded_size()
    tracemalloc.start()
    try:
        outcome = PipelineRunner(journal=FakeRecorder()).run(
            pipeline(("wide", Wide(), (), Scope.DOCUMENT))
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len([o for o in outcome.outputs if o.name.startswith("count/")]) == LANES
    # holding every lane's decoded artifact would be LANES x decoded at least
    assert peak < LANES * decoded / 4, (peak, decoded)


def test_a_consumed_steps_artifacts_reach_their_consumer_decoded() -> None:
    outcome = PipelineRunner(journal=FakeRecorder()).run(
        pipeline(
            ("wide", Wide(), (), Scope.DOCUMENT),
            ("count", Count(), ("wide",), Scope.CORPUS),
        )
    )
    (counted,) = [o for o in outcome.outputs if o.name.startswith("artifacts/count/")]
    assert msgspec.json.decode(counted.data) == LANES * ENTRIES
