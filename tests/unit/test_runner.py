"""The runner through its ports, with in-memory fakes (no files, no journal)."""

from __future__ import annotations

import hashlib
from collections import Counter

import msgspec
import pytest
from runjournal.domain.chunking import ChunkingSettings, ChunkStrategy
from runjournal.domain.decisions import CheckpointState, PredecessorState, Stage
from runjournal.domain.events import (
    ArtifactGenerated,
    LaneResolved,
    StageDecided,
    StageFailed,
)
from runjournal.domain.identity import LaneComponents
from runjournal.domain.modules import Module, Normalized, OutputFile
from runjournal.domain.pipeline import ResolvedPipeline, ResolvedStep, Scope, Source
from runjournal.domain.ports import LoadedCheckpoint, RestoredArtifact
from runjournal.domain.recompute import plan_recompute
from runjournal.domain.runner import PipelineRunner, StageFailure
from support.recorder import FakeRecorder


class FakeStore:
    """Loader and recorder over one dict, like a workspace before checkpoint scopes: one
    record per position, whatever its scope (tests/integration/test_checkpoints.py and
    the e2e tests cover the scoped store)."""

    def __init__(self):
        self.files = {}

    def write(self, key, record):
        self.files[key.position] = record
        return hashlib.sha256(record.payload).hexdigest(), len(record.payload)

    def load(self, key, codec_id):
        record = self.files.get(key.position)
        if record is None:
            return LoadedCheckpoint(state=CheckpointState.MISSING)
        if record.codec_id != codec_id:
            return LoadedCheckpoint(state=CheckpointState.CODEC_MISMATCH)
        return LoadedCheckpoint(state=CheckpointState.PRESENT, record=record)

    def load_accepted_artifact(self, step, lane, lane_identity, codec_id):
        for key, record in self.files.items():
            if key.step == step and key.lane == lane and key.stage is Stage.NORMALIZE:
                if not lane_identity or record.lane_identity != lane_identity:
                    return RestoredArtifact(state=PredecessorState.IDENTITY_MISMATCH)
                return RestoredArtifact(state=PredecessorState.RESTORED, record=record)
        return RestoredArtifact(state=PredecessorState.MISSING)


CALLS: Counter = Counter()


class Words(Module):
    name = "t.words"
    fingerprint = "t.words/1"
    artifact_kind = "words"
    schema = "t.words/v1"
    chunk_type = list[str]
    merged_type = list[str]
    artifact_type = list[str]

    def extract(self, chunk, ctx):
        CALLS["extract"] += 1
        if "boom" in chunk.text:
            raise RuntimeError("boom token=" + "abc")
        return sorted({w.strip(".,").lower() for w in chunk.text.split() if len(w) > 3})

    def merge(self, parts, ctx):
        CALLS["merge"] += 1
        return sorted({w for p in parts for w in p})

    def normalize(self, merged, ctx):
        CALLS["normalize"] += 1
        return Normalized(merged, warnings=[] if merged else ["no words"])


class Count(Module):
    name = "t.count"
    fingerprint = "t.count/1"
    artifact_kind = "count"
    schema = "t.count/v1"
    chunk_type = int
    merged_type = int
    artifact_type = dict[str, int]

    def extract(self, chunk, ctx):
        CALLS["count.extract"] += 1
        return 0

    def merge(self, parts, ctx):
        return 0

    def normalize(self, merged, ctx):
        CALLS["count.normalize"] += 1
        words = ctx.consumed["words"]
        return Normalized({lane: len(v) for lane, v in sorted(words.items())})

    def outputs(self, artifact, ctx):
        return [OutputFile("count.txt", repr(sorted(artifact.items())).encode())]


def comps(tag="a"):
    return LaneComponents(
        config=tag,
        module="m",
        validators="",
        references="",
        overrides="",
        profile="",
        profile_source="",
    )


def pipeline(texts, *, words_tag="a", count_tag="a"):
    sources = tuple(
        Source(name=name, data=t.encode(), sha256=hashlib.sha256(t.encode()).hexdigest())
        for name, t in sorted(texts.items())
    )
    return ResolvedPipeline(
        name="p",
        steps=(
            ResolvedStep(
                id="words",
                module=Words(),
                scope=Scope.DOCUMENT,
                consumes=(),
                params={},
                components=comps(words_tag),
            ),
            ResolvedStep(
                id="count",
                module=Count(),
                scope=Scope.CORPUS,
                consumes=("words",),
                params={},
                components=comps(count_tag),
            ),
        ),
        sources=sources,
        chunking=ChunkingSettings(strategy=ChunkStrategy.PARAGRAPHS, max_chars=40),
    )


DOCS = {
    "a.md": "Alpha beta gamma delta.\n\nEpsilon zeta theta.\n\nIota kappa lambda.\n",
    "b.md": "Omega sigma.\n\nRho upsilon phi chi.\n",
}


def run(pipe, store=None, resume=False, recompute=()):
    CALLS.clear()
    sink = FakeRecorder()
    policy = plan_recompute(
        [s.id for s in pipe.steps], {s.id: s.consumes for s in pipe.steps}, recompute
    )
    runner = PipelineRunner(
        journal=sink,
        loader=store if (resume or recompute) else None,
        recorder=store,
        recompute=policy,
    )
    return runner.run(pipe), sink


def codes(sink, step=None, stage=None):
    return Counter(
        f.code.value
        for f in sink.of(StageDecided)
        if (step is None or f.step == step) and (stage is None or f.stage is stage)
    )


def test_cold_run_executes_everything_and_returns_logical_outputs():
    outcome, sink = run(pipeline(DOCS), FakeStore())
    assert set(codes(sink)) == {"not_resumed"}  # counts are the events' (projections fold them)
    names = [o.name for o in outcome.outputs]
    assert names == [
        "artifacts/words/a.md.json",
        "artifacts/words/b.md.json",
        "artifacts/count/corpus.json",
        "count.txt",
    ]
    lanes = sink.of(LaneResolved)
    assert [(x.step, x.lane) for x in lanes] == [
        ("words", "a.md"),
        ("words", "b.md"),
        ("count", "corpus"),
    ]
    art = sink.of(ArtifactGenerated)[0]
    data = outcome.outputs[0].data
    assert art.sha256 == hashlib.sha256(data).hexdigest() and art.size == len(data)
    assert msgspec.json.decode(data) == sorted(msgspec.json.decode(data))


def test_unchanged_resume_reuses_everything_with_zero_module_calls():
    store = FakeStore()
    first, _ = run(pipeline(DOCS), store)
    second, second_sink = run(pipeline(DOCS), store, resume=True)
    assert set(codes(second_sink)) == {"reused"}
    assert sum(CALLS.values()) == 0
    assert [o.data for o in second.outputs] == [o.data for o in first.outputs]


def test_editing_one_chunk_reextracts_only_that_chunk_and_cuts_off_early():
    store = FakeStore()
    run(pipeline(DOCS), store)
    edited = dict(DOCS, **{"a.md": DOCS["a.md"].replace("Iota kappa", "Iota, kappa")})
    _, sink = run(pipeline(edited), store, resume=True)
    assert CALLS["extract"] == 1
    extract = codes(sink, "words", Stage.EXTRACT)
    assert extract == Counter({"reused": 3, "input_changed": 1})
    # the edited chunk yields the same words: merge reuses through early cutoff
    assert codes(sink, "words", Stage.MERGE) == Counter({"reused": 2})
    # the corpus lane sees the new chunk too, then cuts off at merge (same results)
    assert codes(sink, "count") == Counter({"reused": 3 + 2, "input_changed": 1})
    assert CALLS["count.extract"] == 1 and CALLS["count.normalize"] == 0


def test_changed_words_invalidate_the_corpus_consumer():
    store = FakeStore()
    run(pipeline(DOCS), store)
    edited = dict(DOCS, **{"b.md": DOCS["b.md"].replace("Omega sigma", "Omega sigma newword")})
    _, sink = run(pipeline(edited), store, resume=True)
    assert codes(sink, "words", Stage.MERGE) == Counter({"reused": 1, "stage_input_changed": 1})
    count = codes(sink, "count")
    assert count["dependency_invalidated"] >= 1
    assert CALLS["count.normalize"] == 1


def test_config_change_is_named():
    store = FakeStore()
    run(pipeline(DOCS), store)
    _, sink = run(pipeline(DOCS, words_tag="b"), store, resume=True)
    assert set(codes(sink, "words")) == {"config_changed"}


def test_stage_failure_is_recorded_and_raised_with_redacted_message():
    docs = dict(DOCS, **{"c.md": "this will boom now\n"})
    store = FakeStore()
    with pytest.raises(StageFailure) as info:
        run(pipeline(docs), store)
    assert info.value.step == "words" and info.value.lane == "c.md"
    # failure path: a stage_failed decision and a StageFailed event were emitted before raising
    outcome_sink = FakeRecorder()
    runner = PipelineRunner(journal=outcome_sink, recorder=store)
    with pytest.raises(StageFailure):
        runner.run(pipeline(docs))
    sink_codes = codes(outcome_sink)
    assert sink_codes["stage_failed"] == 1
    failure = outcome_sink.of(StageFailed)[0]
    assert "boom" in failure.message


def test_selective_recompute_restores_producers_without_running_them():
    store = FakeStore()
    run(pipeline(DOCS), store)
    _outcome, sink = run(pipeline(DOCS), store, recompute=("count",))
    assert CALLS["extract"] == 0 and CALLS["count.normalize"] == 1
    assert codes(sink, "words") == Counter({"predecessor_reused": 2})
    assert set(codes(sink, "count")) == {"forced_recompute"}


def test_selective_recompute_fails_on_missing_predecessor_before_running_consumer():
    store = FakeStore()
    with pytest.raises(StageFailure) as info:
        run(pipeline(DOCS), store, recompute=("count",))
    assert info.value.code.value == "predecessor_missing"
    assert info.value.step == "words"
    assert CALLS["count.normalize"] == 0


def test_finished_extracts_are_checkpointed_before_an_interrupt():
    class Interrupting(Words):
        def extract(self, chunk, ctx):
            if "kappa" in chunk.text:
                raise KeyboardInterrupt
            return super().extract(chunk, ctx)

    pipe = pipeline(DOCS)
    step = pipe.steps[0]
    pipe = ResolvedPipeline(
        name=pipe.name,
        steps=(
            ResolvedStep(
                id=step.id,
                module=Interrupting(),
                scope=step.scope,
                consumes=(),
                params={},
                components=step.components,
            ),
            pipe.steps[1],
        ),
        sources=pipe.sources,
        chunking=pipe.chunking,
    )
    store = FakeStore()
    with pytest.raises(KeyboardInterrupt):
        PipelineRunner(journal=FakeRecorder(), recorder=store).run(pipe)
    kept = [k for k in store.files if k.stage is Stage.EXTRACT]
    assert len(kept) == 2  # a.md's first two chunks finished before the third was interrupted
    _, sink = run(pipeline(DOCS), store, resume=True)
    assert codes(sink, "words", Stage.EXTRACT)["reused"] == 2


def test_progress_is_reported_as_each_extract_finishes():
    seen = []
    runner = PipelineRunner(
        journal=FakeRecorder(),
        progress=lambda step, lane, done, total: seen.append((step, lane, done, total)),
    )
    runner.run(pipeline(DOCS))
    assert ("words", "a.md", 1, 3) in seen and ("words", "a.md", 3, 3) in seen
    assert ("count", "corpus", 4, 4) in seen


def test_a_stored_plan_that_does_not_fit_the_source_is_corrupt_and_recomputed():
    from runjournal.domain.chunking import Span
    from runjournal.domain.events import ChunkPlanResolved, PlanOutcome
    from runjournal.domain.ports import PlanLookup

    class LyingStore:
        published = []

        def get(self, key):
            return PlanLookup(PlanOutcome.REUSED, [Span(0, 3)])  # does not cover the source

        def publish(self, key, spans, facts=None, *, durable=True):
            self.published.append(key)
            return True

        def sync(self):
            pass

    sink = FakeRecorder()
    outcome = PipelineRunner(journal=sink, plan_store=LyingStore()).run(pipeline(DOCS))
    plans = sink.of(ChunkPlanResolved)
    assert all(p.outcomes[:2] == [PlanOutcome.CORRUPT, PlanOutcome.COMPUTED] for p in plans)
    counted = Counter(o.value for p in plans for o in p.outcomes)
    assert counted["corrupt"] == len(DOCS) and len(LyingStore.published) == len(DOCS)
    assert outcome.outputs  # the run still produced its outputs
