"""The built-in modules driven by hand through extract, merge, normalize and outputs.

Every stage value goes through the canonical codec (encode with order="deterministic",
decode with the declared type), as the runner does, so a value that does not round-trip
fails here rather than at the first checkpoint.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.adapters.builtin_modules import BUILTIN_MODULES
from runjournal.adapters.builtin_modules.definitions import (
    Definition,
    DefinitionsModule,
    definition_keys,
)
from runjournal.adapters.builtin_modules.glossary import Glossary, GlossaryModule
from runjournal.adapters.builtin_modules.headings import Heading, HeadingsModule
from runjournal.adapters.builtin_modules.markup import Syntax, chunk_sentences
from runjournal.adapters.builtin_modules.terms import Term, TermKind, TermsModule
from runjournal.adapters.builtin_modules.text import (
    BuiltinParamError,
    clean_inline,
    term_key,
    valid_output_name,
)
from runjournal.adapters.profiles import OFFLINE, OfflineRuntime
from runjournal.domain.modules import (
    Chunk,
    Module,
    OutputFile,
    StageContext,
    check_module_declarations,
)
from support.paths import EXAMPLE

# --- a tiny runner ---------------------------------------------------------------


def paragraph_chunks(source: str, text: str, max_chars: int = 1200) -> list[Chunk]:
    """Whole paragraphs packed greedily; blank lines start the next chunk (the planning rules)."""
    paragraphs: list[str] = []
    current = ""
    for line in text.splitlines(keepends=True):
        if not line.strip() and current.strip():
            paragraphs.append(current)
            current = line
        else:
            current += line
    if current:
        paragraphs.append(current)
    packed: list[str] = []
    buffer = ""
    for paragraph in paragraphs:
        if buffer and len(buffer) + len(paragraph) > max_chars:
            packed.append(buffer)
            buffer = paragraph
        else:
            buffer += paragraph
    if buffer:
        packed.append(buffer)
    assert "".join(packed) == text
    chunks: list[Chunk] = []
    offset = 0
    for piece in packed:
        data = piece.encode()
        chunk_id = hashlib.sha256(source.encode() + b"\0" + data).hexdigest()
        digest = hashlib.sha256(data).hexdigest()
        chunks.append(Chunk(chunk_id, source, offset, offset + len(data), piece, digest))
        offset += len(data)
    return chunks


def canonical(value: Any) -> bytes:
    return msgspec.json.encode(value, order="deterministic")


def round_trip(value: Any, declared: Any) -> Any:
    data = canonical(value)
    decoded = msgspec.json.decode(data, type=declared)
    assert canonical(decoded) == data
    return decoded


def run_lane(module: Module, chunks: list[Chunk], ctx: StageContext) -> tuple[Any, list[str]]:
    parts = [round_trip(module.extract(c, ctx), module.chunk_type) for c in chunks]
    merged = round_trip(module.merge(parts, ctx), module.merged_type)
    normalized = module.normalize(merged, ctx)
    assert all(isinstance(w, str) and "\n" not in w for w in normalized.warnings)
    return round_trip(normalized.value, module.artifact_type), normalized.warnings


def ctx(step: str, lane: str, **kwargs: Any) -> StageContext:
    return StageContext(step=step, lane=lane, **kwargs)


def run_terms(docs: dict[str, str], **params: Any) -> dict[str, list[Term]]:
    module = TermsModule()
    return {
        source: run_lane(
            module, paragraph_chunks(source, text), ctx("terms", source, params=params)
        )[0]
        for source, text in docs.items()
    }


def run_definitions(
    docs: dict[str, str], terms: dict[str, list[Term]]
) -> dict[str, list[Definition]]:
    module = DefinitionsModule()
    out = {}
    for source, text in docs.items():
        lane_ctx = ctx("definitions", source, consumed={"terms": {source: terms[source]}})
        out[source] = run_lane(module, paragraph_chunks(source, text), lane_ctx)[0]
    return out


def run_glossary(
    docs: dict[str, str], max_chars: int = 1200, **params: Any
) -> tuple[Glossary, list[str], list[OutputFile]]:
    terms = run_terms(docs)
    definitions = run_definitions(docs, terms)
    corpus = [c for s in sorted(docs) for c in paragraph_chunks(s, docs[s], max_chars)]
    corpus_ctx = ctx(
        "glossary",
        "corpus",
        params=params,
        consumed={"terms": terms, "definitions": definitions},
    )
    module = GlossaryModule()
    glossary, warnings = run_lane(module, corpus, corpus_ctx)
    return glossary, warnings, module.outputs(glossary, corpus_ctx)


def example_docs() -> dict[str, str]:
    return {
        str(p.relative_to(EXAMPLE)): p.read_text(encoding="utf-8")
        for p in sorted((EXAMPLE / "docs").glob("*.md"))
    }


# --- registry and declarations ---------------------------------------------------


def test_registry_names_match_classes_and_declarations_are_complete() -> None:
    assert sorted(BUILTIN_MODULES) == [
        "builtin.definitions",
        "builtin.glossary",
        "builtin.headings",
        "builtin.terms",
        "llm.json",
    ]
    # Each bump of a fingerprint or schema is deliberate: old checkpoints are not trusted.
    versions = {
        "builtin.definitions": (2, 2),
        "builtin.glossary": (2, 2),
        "builtin.headings": (2, 1),
        "builtin.terms": (3, 2),  # 3: max_terms never cuts a defined term (issue 32)
        "llm.json": (1, 1),
    }
    for name, cls in BUILTIN_MODULES.items():
        module = cls()
        check_module_declarations(module)
        assert cls.name == name
        fingerprint, schema = versions[name]
        assert cls.fingerprint == f"{name}/{fingerprint}"
        assert cls.schema == f"runjournal.{name}/v{schema}"
        assert cls.media_type == "application/json"
        for declared in (cls.chunk_type, cls.merged_type, cls.artifact_type):
            msgspec.json.Decoder(declared)


# --- text helpers ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("The **Checkpoints**", "checkpoint"),
        ("dependencies", "dependency"),
        ("process", "process"),
        ("status", "status"),
        ("caches", "cache"),
        ("batches", "batch"),
        ("Event  Sourcing", "event sourcing"),
        ("`os.replace`", "os.replace"),
        ("the journal's", "journal"),
        ("read-models", "read-model"),
    ],
)
def test_term_key_folds_case_articles_and_plurals(text: str, key: str) -> None:
    assert term_key(text) == key


def test_clean_inline_strips_markdown_but_keeps_words() -> None:
    raw = "A **lane** uses `snake_case` and [a link](http://x) with _emphasis_\n> more"
    assert clean_inline(raw) == "A lane uses snake_case and a link with emphasis more"
    assert clean_inline("keep snake_case_names intact") == "keep snake_case_names intact"


def test_sentences_skip_code_headings_and_tables_and_split_list_items() -> None:
    text = (
        "# Title\n\nOne sentence here. Another one, e.g. this. Third!\n\n"
        "```\nCode is not. Prose here.\n```\n\n| a | b |\n|---|---|\n\n"
        "- First item.\n- Second item\n  continues.\n"
    )
    sentences = chunk_sentences(text, Syntax.MARKDOWN)
    assert sentences == [
        "One sentence here.",
        "Another one, e.g. this.",
        "Third!",
        "First item.",
        "Second item\ncontinues.",
    ]
    with_headings = chunk_sentences(text, Syntax.MARKDOWN, headings=True)
    assert with_headings[0] == "Title"


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("glossary.md", True),
        ("out/glossary-v1.md", True),
        (".hidden", False),
        ("a/../b", False),
        ("a//b", False),
        ("/abs", False),
        ("sp ace.md", False),
        ("", False),
    ],
)
def test_output_names(name: str, ok: bool) -> None:
    assert valid_output_name(name) is ok


# --- terms -----------------------------------------------------------------------

TERMS_DOC = """# Notes on Event Sourcing

A **checkpoint** is saved after each stage. Call `fsync` before the rename.
Checkpoints matter because the Run Journal records them.

The checkpoint store holds every checkpoint. Another `fsync` call follows, and the
Run Journal grows. The checkpoint store is local.
"""


def test_terms_finds_marked_phrases_and_bigrams_with_counts() -> None:
    terms = run_terms({"a.md": TERMS_DOC})["a.md"]
    found = {t.key: t for t in terms}
    assert found["checkpoint"].kind is TermKind.EMPHASIS
    assert found["checkpoint"].text == "checkpoint"
    assert found["checkpoint"].count == 5  # bold once, plural once, plain three times
    assert found["fsync"].kind is TermKind.CODE and found["fsync"].count == 2
    assert (
        found["run journal"].kind is TermKind.PHRASE and found["run journal"].text == "Run Journal"
    )
    assert found["checkpoint store"].kind is TermKind.BIGRAM
    assert found["checkpoint store"].count == 2
    # a capitalised single word at the start of a sentence is not a phrase
    assert "checkpoints matter" not in found and "call" not in found
    # sorted by count, then key
    assert [t.count for t in terms] == sorted((t.count for t in terms), reverse=True)


def test_terms_counts_plain_mentions_in_other_chunks_and_hold_no_chunk_ids() -> None:
    text = "A **lane** is a unit.\n\nEvery lane runs.\n\nThe lane ends.\n"
    chunks = paragraph_chunks("a.md", text, max_chars=10)
    assert len(chunks) == 3
    terms, _ = run_lane(TermsModule(), chunks, ctx("terms", "a.md"))
    (lane,) = [t for t in terms if t.key == "lane"]
    assert lane.count == 3
    encoded = canonical(terms).decode()
    assert not any(c.id in encoded for c in chunks)


def test_terms_min_count_and_max_terms_prefer_marked_terms() -> None:
    text = "The **alpha** rule. The alpha rule. Red apple, red apple, red apple.\n"
    module = TermsModule()
    chunks = paragraph_chunks("a.md", text)
    keys = lambda **p: [t.key for t in run_lane(module, chunks, ctx("t", "a.md", params=p))[0]]  # noqa: E731
    assert keys() == ["red apple", "alpha", "alpha rule"]
    assert keys(min_count=3) == ["red apple"]
    assert keys(max_terms=1) == ["alpha"]


def test_terms_warns_for_a_document_without_terms() -> None:
    terms, warnings = run_lane(TermsModule(), paragraph_chunks("e.md", "Hi.\n"), ctx("t", "e.md"))
    assert terms == []
    assert warnings == ["e.md: no terms found (min_count=2)"]


@pytest.mark.parametrize(
    "params", [{"min_count": 0}, {"min_count": "2"}, {"min_count": True}, {"max_terms": -1}]
)
def test_terms_rejects_bad_params(params: dict[str, Any]) -> None:
    with pytest.raises(BuiltinParamError, match=r"builtin\.terms: params"):
        run_lane(TermsModule(), paragraph_chunks("a.md", "x\n"), ctx("t", "a.md", params=params))


def test_unknown_params_give_a_warning() -> None:
    _, warnings = run_lane(
        TermsModule(), paragraph_chunks("a.md", TERMS_DOC), ctx("t", "a.md", params={"min_cout": 3})
    )
    assert warnings == ["builtin.terms: unknown params ignored: min_cout"]


@settings(max_examples=40, deadline=None)
@given(max_chars=st.integers(min_value=1, max_value=3000))
def test_terms_do_not_depend_on_how_a_document_is_chunked(max_chars: int) -> None:
    text = (EXAMPLE / "docs" / "03-checkpoints.md").read_text(encoding="utf-8")
    module = TermsModule()
    whole, _ = run_lane(module, paragraph_chunks("d.md", text, 10**6), ctx("t", "d.md"))
    split, _ = run_lane(module, paragraph_chunks("d.md", text, max_chars), ctx("t", "d.md"))
    strip = lambda terms: [(t.text, t.key, t.count, t.kind) for t in terms]  # noqa: E731
    assert strip(split) == strip(whole)


@pytest.mark.parametrize("cls", list(BUILTIN_MODULES.values()))
def test_extract_results_do_not_depend_on_chunk_position(cls: type[Module]) -> None:
    """A reused extract result must stay right when its chunk moves in the source."""
    text = "## Journal\n\nThe **journal** is an append-only log. The journal grows.\n"
    terms = run_terms({"a.md": text})["a.md"]
    consumed = {"terms": {"a.md": terms}, "definitions": {"a.md": []}}
    lane = "corpus" if cls is GlossaryModule else "a.md"
    stage_ctx = ctx("s", lane, consumed=consumed, llm=OfflineRuntime(OFFLINE))
    first = Chunk("id", "a.md", 0, len(text), text, "x")
    moved = Chunk("id", "a.md", 500, 500 + len(text), text, "x")
    module = cls()
    assert canonical(module.extract(first, stage_ctx)) == canonical(
        module.extract(moved, stage_ctx)
    )


# --- definitions -----------------------------------------------------------------

DEFINITION_TERMS = {
    k: k
    for k in ("journal", "event store", "lane", "checkpoint", "idempotence", "early cutoff", "step")
}


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("The journal is an append-only log of events.", [("journal", "is")]),
        ("Checkpoints are the saved results of stages.", [("checkpoint", "is")]),
        ("Idempotence refers to repeating safely.", [("idempotence", "refers_to")]),
        ("Idempotence means that a retry is harmless.", [("idempotence", "refers_to")]),
        (
            "A journal, also called an event store, records events.",
            [("journal", "also_called"), ("event store", "also_called")],
        ),
        ("We call one unit of work a lane.", [("lane", "called")]),
        ("A rerun with equal bytes is called an early cutoff.", [("early cutoff", "called")]),
        ("Step: one named transformation of a pipeline.", [("step", "colon")]),
        ("Lane \u2014 the unit of work of one step.", [("lane", "colon")]),
    ],
)
def test_definition_patterns(sentence: str, expected: list[tuple[str, str]]) -> None:
    assert definition_keys(sentence, DEFINITION_TERMS) == expected


@pytest.mark.parametrize(
    "sentence",
    [
        "Is the journal a log?",
        "In practice, the journal is a log.",
        "Checkpoints are cheap.",
        "The journal grows when a run appends events.",
        "The run journal is an append-only log.",  # "run journal" is not a known term
        "Step: go.",  # too short to be a definition
    ],
)
def test_non_definitions(sentence: str) -> None:
    assert definition_keys(sentence, DEFINITION_TERMS) == []


def test_definitions_name_their_section_across_chunks() -> None:
    text = (
        "# Caf\u00e9 notes \u2014 \u00e9t\u00e9\n\n"
        "Some *na\u00efve* words about the lane and the lane.\n\n"
        "A **lane** is the unit of work of one step.\n"
    )
    terms = {"a.md": run_terms({"a.md": text})["a.md"]}
    assert "lane" in {t.key for t in terms["a.md"]}
    for max_chars in (10, 10_000):
        chunks = paragraph_chunks("a.md", text, max_chars)
        assert (len(chunks) > 1) is (max_chars == 10)
        lane_ctx = ctx("d", "a.md", consumed={"terms": terms})
        (definition,), _ = run_lane(DefinitionsModule(), chunks, lane_ctx)
        raw = "A **lane** is the unit of work of one step."
        assert definition.source == "a.md"
        assert definition.section == "Caf\u00e9 notes \u2014 \u00e9t\u00e9"
        assert definition.markdown == raw
        assert definition.text == clean_inline(raw)


def test_definitions_keep_the_first_sensible_sentence_per_term() -> None:
    text = (
        "A **journal** is one.\n\n"
        "The journal is the append-only record of every event of a run.\n\n"
        "The journal is also the only source of truth for a run.\n"
    )
    terms = run_terms({"a.md": text})
    (definition,) = run_definitions({"a.md": text}, terms)["a.md"]
    assert definition.text == "The journal is the append-only record of every event of a run."
    assert definition.pattern == "is"


def test_definitions_choose_the_terms_step() -> None:
    module = DefinitionsModule()
    chunk = paragraph_chunks("a.md", "The lane is a unit of work in a run.\n")[0]
    as_dicts = [{"text": "lane", "count": 2}]
    for consumed, params in [
        ({"words": {"a.md": as_dicts}}, {}),
        ({"terms": {"a.md": ["lane"]}, "other": {"a.md": []}}, {}),
        ({"x": {"a.md": []}, "y": {"a.md": as_dicts}}, {"terms_step": "y"}),
    ]:
        result = module.extract(chunk, ctx("d", "a.md", consumed=consumed, params=params))
        assert [h.key for h in result.hits] == ["lane"]
    with pytest.raises(BuiltinParamError, match=r"set params\.terms_step"):
        module.extract(chunk, ctx("d", "a.md", consumed={"x": {}, "y": {}}))
    with pytest.raises(BuiltinParamError, match="does not consume"):
        module.extract(chunk, ctx("d", "a.md", consumed={"x": {}}, params={"terms_step": "t"}))


# --- glossary --------------------------------------------------------------------

CORPUS = {
    "docs/a.md": (
        "# Alpha\n\nA **zebra crossing** is a striped place to cross a road. "
        "Every zebra crossing has stripes.\n\nThe `apply_fn` hook and `apply_fn` again.\n"
    ),
    "docs/b.md": "# Beta\n\nThe **Anchor** holds. The anchor is heavy. One zebra crossing here.\n",
}


def test_glossary_joins_terms_definitions_and_mentions() -> None:
    glossary, warnings, outputs = run_glossary(CORPUS)
    assert glossary.sources == ["docs/a.md", "docs/b.md"]
    by_key = {e.key: e for e in glossary.entries}
    assert [e.term for e in glossary.entries] == ["Anchor", "apply_fn", "zebra crossing"]
    zebra = by_key["zebra crossing"]
    assert zebra.definition == "A **zebra crossing** is a striped place to cross a road."
    assert zebra.defined_at is not None and zebra.defined_at.source == "docs/a.md"
    assert zebra.defined_at.section == "Alpha"
    # mentioned once in b.md: too rare to be a term there, still listed as seen there
    assert [(d.source, d.count) for d in zebra.documents] == [("docs/a.md", 2), ("docs/b.md", 1)]
    assert zebra.count == 3
    assert by_key["apply_fn"].kind is TermKind.CODE
    assert by_key["anchor"].definition is None
    assert warnings == ["2 glossary term(s) have no definition: Anchor, apply_fn"]
    (output,) = outputs
    assert output.name == "glossary.md"
    markdown = output.data.decode()
    assert markdown.startswith("# Glossary\n\n3 terms from 2 documents; 1 with a definition.\n")
    assert "\n[A](#a) \u00b7 [Z](#z)\n" in markdown
    assert "### `apply_fn`\n" in markdown and "### Zebra crossing\n" in markdown
    assert "_No definition found in the corpus._" in markdown
    assert "- **Seen in:** `docs/a.md` (2), `docs/b.md` (1) \u2014 3 mentions\n" in markdown
    assert "- **Defined in:** `docs/a.md` \u00a7 Alpha\n" in markdown


def test_glossary_params_filter_and_rename() -> None:
    glossary, _, outputs = run_glossary(
        CORPUS, include_undefined=False, output="out/terms.md", title="Words"
    )
    assert [e.key for e in glossary.entries] == ["zebra crossing"]
    assert outputs[0].name == "out/terms.md"
    assert outputs[0].data.startswith(b"# Words\n")
    glossary, _, _ = run_glossary(CORPUS, min_documents=2)
    assert [e.key for e in glossary.entries] == ["zebra crossing"]
    glossary, _, _ = run_glossary(CORPUS, max_entries=1)
    assert [e.key for e in glossary.entries] == ["zebra crossing"]
    for bad in ("../x.md", ".hidden.md", "a b.md"):
        with pytest.raises(BuiltinParamError, match=r"params\.output"):
            run_glossary(CORPUS, output=bad)


def test_glossary_without_a_definitions_step_warns_about_every_term() -> None:
    terms = run_terms(CORPUS)
    corpus = [c for s in sorted(CORPUS) for c in paragraph_chunks(s, CORPUS[s])]
    glossary, warnings = run_lane(
        GlossaryModule(), corpus, ctx("g", "corpus", consumed={"terms": terms})
    )
    assert glossary.entries and all(e.definition is None for e in glossary.entries)
    assert warnings[0].startswith("3 glossary term(s) have no definition")


def test_glossary_of_the_example_handbook() -> None:
    docs = example_docs()
    assert len(docs) >= 5
    assert 6_000 <= sum(len(t.encode()) for t in docs.values()) <= 12_000
    glossary, warnings, (output,) = run_glossary(docs)
    defined = {e.key: e for e in glossary.entries if e.definition is not None}
    for key in (
        "checkpoint",
        "journal",
        "lane",
        "chunk",
        "idempotence",
        "projection",
        "fingerprint",
        "aggregate",
        "event sourcing",
        "early cutoff",
        "required predecessor",
    ):
        assert key in defined, key
    assert len(defined) >= 25
    assert defined["checkpoint"].definition.startswith("A **checkpoint** is the saved result")
    assert len(defined["checkpoint"].documents) >= 4
    markdown = output.data.decode()
    assert markdown.count("\n### ") == len(glossary.entries)
    assert "### Checkpoint\n\n> A **checkpoint** is" in markdown
    assert "[C](#c)" in markdown and "- **Seen in:** `docs/" in markdown
    terms = [e.term.casefold() for e in glossary.entries]
    assert terms == sorted(terms)
    assert len(warnings) == 1 and "have no definition" in warnings[0]


def test_glossary_is_deterministic_whatever_the_chunking_and_dict_order() -> None:
    docs = example_docs()
    first = run_glossary(docs)
    again = run_glossary(dict(reversed(list(docs.items()))), max_chars=300)
    assert canonical(first[0]) == canonical(again[0])
    assert first[2] == again[2]


# --- headings --------------------------------------------------------------------


def test_headings_outline_with_byte_offsets() -> None:
    text = (
        "# Caf\u00e9 *guide*\n\nIntro.\n\n## Second ##\n\n```\n# not a heading\n```\n\n"
        "Setext title\n============\n\nSub title\n---\n\n- item\n---\n\n### Third\n"
    )
    source = text.encode()
    expected = [
        (1, "Caf\u00e9 guide"),
        (2, "Second"),
        (1, "Setext title"),
        (2, "Sub title"),
        (3, "Third"),
    ]
    for max_chars in (5, 10_000):
        outline, warnings = run_lane(
            HeadingsModule(), paragraph_chunks("g.md", text, max_chars), ctx("h", "g.md")
        )
        assert warnings == []
        assert [(h.level, h.text) for h in outline] == expected
        for heading in outline:
            assert isinstance(heading, Heading) and heading.source == "g.md"
            line = source[heading.offset :].split(b"\n", 1)[0].decode()
            assert heading.text.split()[0] in line
        assert HeadingsModule().outputs(outline, ctx("h", "g.md")) == []


@pytest.mark.parametrize("cls", [DefinitionsModule, HeadingsModule])
def test_locations_stay_right_when_reused_extracts_move(cls: type[Module]) -> None:
    """As on resume: a paragraph is inserted, unchanged chunks keep their old results."""
    old = "# Lanes\n\nA **lane** is the unit of work of one step. The lane runs.\n"
    new = "# Lanes\n\nA fresh paragraph \u00e9\u00e9 first.\n\n" + old.split("\n\n", 1)[1]
    terms = {"a.md": run_terms({"a.md": old})["a.md"]}
    stage_ctx = ctx("s", "a.md", consumed={"terms": terms})
    module = cls()
    cache = {c.id: module.extract(c, stage_ctx) for c in paragraph_chunks("a.md", old, 1)}
    chunks = paragraph_chunks("a.md", new, 1)
    assert sum(c.id in cache for c in chunks) == 2
    parts = [cache.get(c.id) or module.extract(c, stage_ctx) for c in chunks]
    merged = module.merge(parts, stage_ctx)
    fresh = module.merge([module.extract(c, stage_ctx) for c in chunks], stage_ctx)
    assert canonical(merged) == canonical(fresh)
    source = new.encode()
    assert merged
    for item in merged:
        if isinstance(item, Definition):
            assert item.section == "Lanes" and item.markdown.startswith("A **lane**")
        else:
            assert source[item.offset :].startswith(b"# Lanes")
