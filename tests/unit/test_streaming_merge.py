"""The built-ins' streaming merges (docs/modules.md "Streaming merge"): over a one-pass
iterator of their parts they give the value, byte for byte once encoded, that the list
gives; and the declaration is checked when a module is loaded."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runjournal.adapters.builtin_modules import BUILTIN_MODULES
from runjournal.adapters.builtin_modules.definitions import DefinitionsModule
from runjournal.adapters.builtin_modules.glossary import GlossaryModule
from runjournal.adapters.builtin_modules.headings import HeadingsModule
from runjournal.adapters.builtin_modules.llm_json import ChunkAnswer, LLMJsonModule
from runjournal.adapters.builtin_modules.terms import (
    _ALPHA_WORD,
    _KIND_RANK,
    Term,
    TermForm,
    TermKind,
    TermsChunk,
    TermsModule,
    _noun_ish_bigram,
)
from runjournal.adapters.builtin_modules.text import clean_inline, usable_term_key
from runjournal.domain.modules import (
    Chunk,
    Module,
    ModuleContractError,
    Normalized,
    StageContext,
    check_module_declarations,
    streams_merge,
)

WORDS = [
    "checkpoint",
    "checkpoints",
    "journal",
    "decision",
    "the",
    "a",
    "lane",
    "merge",
    "`os.replace`",
    "**Event Sourcing**",
    "*resume*",
    "store",
    "is",
    "means",
    "digest",
]
SENTENCE = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)
PARAGRAPH = st.one_of(
    SENTENCE.map(lambda s: s + ".\n"),
    SENTENCE.map(lambda s: "# " + s + "\n"),
    SENTENCE.map(lambda s: "## " + s + "\n"),
    st.tuples(st.sampled_from(WORDS), SENTENCE).map(lambda t: f"{t[0]}\n: {t[1]}.\n"),
    st.tuples(st.sampled_from(WORDS), SENTENCE).map(lambda t: f"A {t[0]} is {t[1]}.\n"),
)
DOCS = st.dictionaries(
    st.sampled_from(["docs/a.md", "docs/b.md", "docs/c.md"]),
    st.lists(PARAGRAPH, min_size=1, max_size=8),
    min_size=1,
)


def chunks_of(source: str, paragraphs: list[str]) -> list[Chunk]:
    out, offset = [], 0
    for text in paragraphs:
        data = text.encode()
        chunk_id = hashlib.sha256(source.encode() + b"\0" + data).hexdigest()
        digest = hashlib.sha256(data).hexdigest()
        out.append(Chunk(chunk_id, source, offset, offset + len(data), text, digest))
        offset += len(data)
    return out


def canonical(value: Any) -> bytes:
    return msgspec.json.encode(value, order="deterministic")


def parts_of(module: Module, chunks: list[Chunk], ctx: StageContext) -> list[Any]:
    """Each chunk's extract value as the runner hands it on: encoded, then decoded."""
    return [
        msgspec.json.decode(canonical(module.extract(c, ctx)), type=module.chunk_type)
        for c in chunks
    ]


class OnePass:
    """An iterator that can be read once, and counts what it handed out."""

    def __init__(self, parts: list[Any]) -> None:
        self._parts = iter(parts)
        self.handed = 0

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        part = next(self._parts)
        self.handed += 1
        return part


def same_merge(module: Module, parts: list[Any], ctx: StageContext) -> bytes:
    """The list merge's encoded value, after checking the one-pass merge gives the same."""
    listed = canonical(module.merge(list(parts), ctx))
    once = OnePass(parts)
    assert canonical(module.merge(once, ctx)) == listed
    assert once.handed == len(parts)
    return listed


def lane_artifact(module: Module, parts: list[Any], ctx: StageContext) -> Any:
    merged = msgspec.json.decode(same_merge(module, parts, ctx), type=module.merged_type)
    value = module.normalize(merged, ctx).value
    return msgspec.json.decode(canonical(value), type=module.artifact_type)


def _display_before(key: str, forms: list[TermForm]) -> tuple[str, TermKind]:
    """`builtin.terms`'s spelling choice before its merge folded forms (issue 29)."""
    kind = min((f.kind for f in forms), key=_KIND_RANK.__getitem__)
    totals: dict[str, list[int]] = {}
    for form in forms:
        slot = totals.setdefault(form.text, [0, 0])
        slot[0] += form.count
        slot[1] += form.initial
    order = list(totals)
    ranks: dict[str, int] = {}
    for form in forms:
        ranks[form.text] = min(ranks.get(form.text, 99), _KIND_RANK[form.kind])

    def score(text: str) -> tuple[bool, bool, bool, int, int]:
        count, initial = totals[text]
        is_singular = clean_inline(text).casefold() == key
        best_kind = ranks[text] == _KIND_RANK[kind]
        return (is_singular, count > initial, best_kind, count, -order.index(text))

    text = max(order, key=score)
    count, initial = totals[text]
    if count == initial and text[:1].isupper() and text[1:] == text[1:].lower():
        text = text[:1].lower() + text[1:]
    return text, kind


def terms_merge_before(parts: list[TermsChunk]) -> list[Term]:
    """`builtin.terms`'s list merge before it folded its parts: every form kept."""
    totals: dict[str, int] = {}
    forms: dict[str, list[TermForm]] = {}
    for part in parts:
        for key, count in part.ngrams.items():
            totals[key] = totals.get(key, 0) + count
        for form in part.forms:
            forms.setdefault(form.key, []).append(form)
    for key in sorted(totals):
        if key not in forms and totals[key] >= 2 and _noun_ish_bigram(key):
            forms[key] = [TermForm(key, key, TermKind.BIGRAM, totals[key])]
    terms: list[Term] = []
    for key, key_forms in forms.items():
        if not usable_term_key(key):
            continue
        text, kind = _display_before(key, key_forms)
        marked = sum(f.count for f in key_forms)
        count = max(totals.get(key, 0), marked)
        if kind is TermKind.CODE and _ALPHA_WORD.fullmatch(key) and marked * 4 < count:
            continue
        terms.append(Term(text, key, count, kind))
    return terms


FORMS = st.builds(
    TermForm,
    st.sampled_from(["Checkpoint", "checkpoint", "checkpoints", "`lane`", "Lane", "event store"]),
    st.sampled_from(["checkpoint", "lane", "event store"]),
    st.sampled_from(list(TermKind)),
    st.integers(1, 5),
    st.integers(0, 2),
)
TERMS_PARTS = st.lists(
    st.builds(
        TermsChunk,
        forms=st.lists(FORMS, max_size=6),
        ngrams=st.dictionaries(
            st.sampled_from(["checkpoint", "lane", "event store", "store", "default"]),
            st.integers(1, 4),
            max_size=4,
        ),
    ),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(TERMS_PARTS)
def test_the_folding_terms_merge_equals_the_merge_before_it(parts: list[TermsChunk]) -> None:
    ctx = StageContext(step="terms", lane="docs/a.md")
    assert same_merge(TermsModule(), parts, ctx) == canonical(terms_merge_before(parts))


def test_every_builtin_streams_its_merge() -> None:
    assert all(streams_merge(cls()) for cls in BUILTIN_MODULES.values())
    assert set(BUILTIN_MODULES) == {
        m.name
        for m in (TermsModule, DefinitionsModule, GlossaryModule, HeadingsModule, LLMJsonModule)
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCS)
def test_builtin_merges_over_an_iterator_equal_the_list_merge(docs: dict[str, list[str]]) -> None:
    chunks = {source: chunks_of(source, paragraphs) for source, paragraphs in docs.items()}
    terms, definitions = {}, {}
    for source, lane in chunks.items():
        ctx = StageContext(step="terms", lane=source)
        parts = parts_of(TermsModule(), lane, ctx)
        assert same_merge(TermsModule(), parts, ctx) == canonical(terms_merge_before(parts))
        terms[source] = lane_artifact(TermsModule(), parts, ctx)
        ctx = StageContext(step="headings", lane=source)
        same_merge(HeadingsModule(), parts_of(HeadingsModule(), lane, ctx), ctx)
        ctx = StageContext(
            step="definitions", lane=source, consumed={"terms": {source: terms[source]}}
        )
        module = DefinitionsModule()
        definitions[source] = lane_artifact(module, parts_of(module, lane, ctx), ctx)
    corpus = [c for source in sorted(chunks) for c in chunks[source]]
    ctx = StageContext(
        step="glossary", lane="corpus", consumed={"terms": terms, "definitions": definitions}
    )
    same_merge(GlossaryModule(), parts_of(GlossaryModule(), corpus, ctx), ctx)


ANSWERS = st.lists(
    st.builds(
        ChunkAnswer,
        st.sampled_from(["docs/a.md", "docs/b.md"]),
        st.recursive(
            st.none() | st.integers() | st.text(max_size=8),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=4), inner, max_size=3)
            ),
            max_leaves=6,
        ),
    ),
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(ANSWERS)
def test_llm_json_merge_over_an_iterator_equals_the_list_merge(parts: list[ChunkAnswer]) -> None:
    same_merge(LLMJsonModule(), parts, StageContext(step="ask", lane="docs/a.md"))


class _Declares(Module):
    name = "test.declares"
    fingerprint = "test.declares/1"
    artifact_kind = "k"
    schema = "test.declares/v1"

    def extract(self, chunk: Chunk, ctx: StageContext) -> int:
        return 1

    def merge(self, parts: list[int], ctx: StageContext) -> int:
        return sum(parts)

    def normalize(self, merged: int, ctx: StageContext) -> Normalized:
        return Normalized(merged)


def test_merge_streams_defaults_to_a_list_and_must_be_a_bool() -> None:
    check_module_declarations(_Declares())
    assert not streams_merge(_Declares())

    class Streams(_Declares):
        merge_streams = True

    check_module_declarations(Streams())
    assert streams_merge(Streams())

    class Says(_Declares):
        merge_streams = "yes"  # type: ignore[assignment]

    with pytest.raises(ModuleContractError, match="merge_streams"):
        check_module_declarations(Says())
    assert not streams_merge(Says())
