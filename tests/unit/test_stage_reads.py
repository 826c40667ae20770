"""A stage depends only on the part of the consumed artifacts its module says it reads.

The runner through its ports with in-memory fakes (tests/unit/test_runner.py): a corpus
consumer whose extract reads only the first letters of each document's words keeps its
extracts when a document gains a word with a letter already there, and loses them when
the letters change; each stage sees only what it declared; the lane records the parts
and every decision's D is the digest of what its stage reads (docs/modules.md
"Declaring what a stage reads").
"""

from __future__ import annotations

from collections import Counter

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.domain.decisions import Stage
from runjournal.domain.events import LaneResolved, StageDecided
from runjournal.domain.identity import dependencies_digest
from runjournal.domain.modules import Module, Normalized
from runjournal.domain.pipeline import ResolvedPipeline, ResolvedStep, Scope
from runjournal.domain.runner import StageFailure
from unit.test_runner import CALLS, DOCS, FakeStore, codes, comps, run
from unit.test_runner import pipeline as words_pipeline

SEEN: dict[str, list] = {}
UNCHANGED = 3  # the chunks of a.md, which the edits below leave as they are


class Letters(Module):
    """Counts, per chunk, its words whose first letter starts a word of the same document."""

    name = "t.letters"
    fingerprint = "t.letters/1"
    artifact_kind = "letters"
    schema = "t.letters/v1"
    chunk_type = int
    merged_type = int
    artifact_type = dict[str, int]
    declare = True

    def reads(self, stage, ctx):
        if not self.declare:
            return None
        if stage == "extract":
            words = ctx.consumed["words"]
            return {"words": {lane: sorted({w[0] for w in v}) for lane, v in words.items()}}
        return {} if stage == "merge" else None

    def extract(self, chunk, ctx):
        CALLS["letters.extract"] += 1
        SEEN.setdefault("extract", []).append(ctx.consumed)
        letters = ctx.consumed["words"][chunk.source]
        if not self.declare:
            letters = sorted({w[0] for w in letters})
        return sum(1 for w in chunk.text.lower().split() if w[:1] in letters)

    def merge(self, parts, ctx):
        SEEN.setdefault("merge", []).append(ctx.consumed)
        return sum(parts)

    def normalize(self, merged, ctx):
        SEEN.setdefault("normalize", []).append(ctx.consumed)
        return Normalized({lane: len(v) for lane, v in sorted(ctx.consumed["words"].items())})


class Undeclared(Letters):
    declare = False


def pipeline(texts, module: Module | None = None) -> ResolvedPipeline:
    words = words_pipeline(texts)
    consumer = ResolvedStep(
        id="letters",
        module=module or Letters(),
        scope=Scope.CORPUS,
        consumes=("words",),
        params={},
        components=comps(),
    )
    return ResolvedPipeline(
        name="p",
        steps=(words.steps[0], consumer),
        sources=words.sources,
        chunking=words.chunking,
    )


def extract_codes(sink) -> Counter:
    return codes(sink, "letters", Stage.EXTRACT)


@pytest.fixture(autouse=True)
def _clear_seen():
    SEEN.clear()


def test_each_stage_sees_only_what_it_declared() -> None:
    run(pipeline(DOCS), FakeStore())
    assert SEEN["extract"][0] == {"words": {"a.md": list("abdegikltz"), "b.md": list("cosu")}}
    assert SEEN["merge"] == [{}]
    [whole] = SEEN["normalize"]
    assert whole["words"]["a.md"][:3] == ["alpha", "beta", "delta"]


def test_a_change_outside_the_part_keeps_the_consumers_extracts() -> None:
    store = FakeStore()
    run(pipeline(DOCS), store)
    # b.md gains "scheme": its words artifact changes, its first letters do not.
    edited = dict(DOCS, **{"b.md": DOCS["b.md"].replace("Omega sigma.", "Omega sigma scheme.")})
    _, sink = run(pipeline(edited), store, resume=True)
    assert codes(sink, "words", Stage.NORMALIZE)["stage_input_changed"] == 1
    decided = extract_codes(sink)
    assert set(decided) == {"reused", "input_changed"} and decided["reused"] == UNCHANGED
    assert CALLS["letters.extract"] == decided["input_changed"]
    # normalize reads every artifact whole: it sees the change
    assert codes(sink, "letters", Stage.NORMALIZE) == Counter({"stage_input_changed": 1})


def test_the_same_change_invalidates_a_consumer_that_declares_nothing() -> None:
    store = FakeStore()
    run(pipeline(DOCS, Undeclared()), store)
    edited = dict(DOCS, **{"b.md": DOCS["b.md"].replace("Omega sigma.", "Omega sigma scheme.")})
    _, sink = run(pipeline(edited, Undeclared()), store, resume=True)
    decided = extract_codes(sink)
    assert set(decided) == {"dependency_invalidated", "input_changed"}
    assert decided["dependency_invalidated"] == UNCHANGED


def test_a_change_inside_the_part_invalidates_the_extracts() -> None:
    store = FakeStore()
    run(pipeline(DOCS), store)
    edited = dict(DOCS, **{"b.md": DOCS["b.md"].replace("Omega sigma.", "Omega sigma fjord.")})
    _, sink = run(pipeline(edited), store, resume=True)
    decided = extract_codes(sink)
    assert set(decided) == {"dependency_invalidated", "input_changed"}
    assert decided["dependency_invalidated"] == UNCHANGED


def test_the_lane_records_the_parts_and_each_decision_their_digest() -> None:
    _, sink = run(pipeline(DOCS), FakeStore())
    [lane] = [f for f in sink.of(LaneResolved) if f.step == "letters"]
    assert set(lane.reads) == {Stage.EXTRACT, Stage.MERGE}
    assert lane.reads[Stage.MERGE] == []
    parts = lane.reads[Stage.EXTRACT]
    assert [(p.step, p.lane) for p in parts] == [(d.step, d.lane) for d in lane.dependencies]
    assert all(p.sha256 != d.sha256 for p, d in zip(parts, lane.dependencies, strict=True))
    expected = {
        Stage.EXTRACT: dependencies_digest(parts),
        Stage.MERGE: "",
        Stage.NORMALIZE: dependencies_digest(lane.dependencies),
    }
    decided = [f for f in sink.of(StageDecided) if f.step == "letters"]
    assert len(decided) == UNCHANGED + 1 + 2  # the chunk of b.md, then merge and normalize
    for f in decided:
        assert f.dependencies == expected[f.stage], f.stage


def test_a_module_whose_reads_fails_fails_that_stage() -> None:
    class Broken(Letters):
        def reads(self, stage, ctx):
            if stage == "merge":
                raise ValueError("cannot tell what merge reads")
            return super().reads(stage, ctx)

    with pytest.raises(StageFailure) as info:
        run(pipeline(DOCS, Broken()), FakeStore())
    failure = info.value
    assert (failure.step, failure.lane, failure.stage) == ("letters", "corpus", Stage.MERGE)
    assert "cannot tell what merge reads" in failure.message


def test_a_part_of_an_artifact_the_lane_does_not_consume_is_refused() -> None:
    class Stray(Letters):
        def reads(self, stage, ctx):
            return {"words": {"z.md": []}} if stage == "extract" else None

    with pytest.raises(StageFailure) as info:
        run(pipeline(DOCS, Stray()), FakeStore())
    assert info.value.stage is Stage.EXTRACT
    assert "names words/z.md, which this lane does not consume" in info.value.message


# --- the built-ins: what they declare is all their extract reads -------------------------

VOCABULARY = ["checkpoint", "event journal", "os.replace", "fsync", "lane", "stage input"]


def _terms(keys: list[str], counts: list[int]) -> list:
    from runjournal.adapters.builtin_modules.terms import Term, TermKind

    return [Term(k, k, n, TermKind.EMPHASIS) for k, n in zip(keys, counts, strict=False)]


_lanes = st.dictionaries(
    st.sampled_from(["docs/a.md", "docs/b.md", "docs/c.md"]),
    st.lists(st.sampled_from(VOCABULARY), unique=True, max_size=4),
    min_size=1,
)


@settings(max_examples=60, deadline=None)
@given(
    lanes=_lanes,
    counts=st.lists(st.integers(1, 9), min_size=4, max_size=4),
    other=st.lists(st.integers(1, 9), min_size=4, max_size=4),
    words=st.lists(st.sampled_from([*VOCABULARY, "is", "a", "part", "The"]), max_size=30),
)
def test_a_builtin_extract_reads_only_its_declared_part(lanes, counts, other, words) -> None:
    """The extract gives the same result from its declared part as from the whole
    artifacts, and term counts are no part of it (only the keys are)."""
    from runjournal.adapters.builtin_modules.definitions import DefinitionsModule
    from runjournal.adapters.builtin_modules.glossary import GlossaryModule
    from runjournal.domain.identity import ArtifactRef
    from runjournal.domain.modules import Chunk, StageContext
    from runjournal.domain.runner.reads import stage_reads

    text = " ".join(words) + ". A checkpoint is a record of a stage."
    source = sorted(lanes)[0]
    chunk = Chunk(id="0" * 64, source=source, start=0, end=len(text), text=text, sha256="")

    def ctx(step: str, lane: str, per_lane_counts: list[int]) -> StageContext:
        consumed = {ln: _terms(keys, per_lane_counts) for ln, keys in lanes.items()}
        return StageContext(step=step, lane=lane, consumed={"terms": consumed})

    def refs(c: StageContext) -> list[ArtifactRef]:
        return [
            ArtifactRef("terms", ln, "terms", "s", "application/json", "f" * 64, 1)
            for ln in c.consumed["terms"]
        ]

    for module, lane in ((GlossaryModule(), "corpus"), (DefinitionsModule(), source)):
        whole = ctx("x", lane, counts)
        reads = stage_reads(module, Stage.EXTRACT, whole, refs(whole))
        viewed = msgspec.structs.replace(whole, consumed=reads.consumed)
        assert type(module)().extract(chunk, viewed) == type(module)().extract(chunk, whole)
        recounted = ctx("x", lane, other)
        assert stage_reads(module, Stage.EXTRACT, recounted, refs(recounted)).digest == (
            reads.digest
        )
        for stage in (Stage.MERGE, Stage.NORMALIZE):
            if stage is Stage.NORMALIZE and isinstance(module, GlossaryModule):
                continue  # the glossary's normalize reads every artifact whole
            assert stage_reads(module, stage, whole, refs(whole)).digest == ""
