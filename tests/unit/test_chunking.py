"""The chunk planner: structural guarantees, exact rules, plan validation, source checks."""

from __future__ import annotations

import time

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.domain.chunking import (
    MAX_CHARS_LIMIT,
    PLANNER_FINGERPRINT,
    ChunkingError,
    ChunkingSettings,
    ChunkingSettingsError,
    ChunkStrategy,
    PlanDefect,
    PlanInvalid,
    SourceError,
    SourceIsBinary,
    SourceNotUtf8,
    Span,
    check_utf8,
    plan_chunks,
    validate_plan,
)

PARAGRAPHS, LINES, FIXED = ChunkStrategy.PARAGRAPHS, ChunkStrategy.LINES, ChunkStrategy.FIXED
WHITESPACE = [chr(c) for c in range(0x110000) if chr(c).isspace()]


def texts(data: bytes, spans: list[Span]) -> list[str]:
    return [data[s.start : s.end].decode("utf-8") for s in spans]


def chunks(text: str, max_chars: int, strategy: ChunkStrategy = PARAGRAPHS) -> list[str]:
    data = text.encode("utf-8")
    return texts(data, plan_chunks(data, ChunkingSettings(strategy, max_chars)))


# --- an independent, obviously-correct (and slow) model of docs/internals.md "Planning rules"


def _model_cut(text: str, start: int, stop: int, size: int) -> list[tuple[int, int]]:
    out = []
    while stop - start > size:
        limit = start + size
        cut = limit
        first_word = next((i for i in range(start, limit) if not text[i].isspace()), limit)
        spaces = [i for i in range(first_word, limit) if text[i].isspace()]
        if spaces:
            cut = spaces[-1] + 1
            if text[cut - 1] == "\r" and text[cut : cut + 1] == "\n" and len(spaces) > 1:
                cut = spaces[-2] + 1
        out.append((start, cut))
        start = cut
    out.append((start, stop))
    return out


def _split_lines(text: str) -> list[str]:
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


def _model_unit_ends(text: str, strategy: ChunkStrategy) -> list[int]:
    """Lines; or paragraphs, which end where a non-blank line meets a blank one."""
    lines = _split_lines(text)
    ends, pos = [], 0
    for i, line in enumerate(lines):
        pos += len(line)
        last = i == len(lines) - 1
        if strategy is LINES or last or (not line.isspace() and lines[i + 1].isspace()):
            ends.append(pos)
    return ends


def model_plan(text: str, strategy: ChunkStrategy, size: int) -> list[tuple[int, int]]:
    if strategy is FIXED:
        return [(i, min(i + size, len(text))) for i in range(0, len(text), size)]
    out: list[tuple[int, int]] = []
    chunk_start = chunk_end = unit_start = 0  # the open chunk is [chunk_start, chunk_end)
    for unit_end in _model_unit_ends(text, strategy):
        if unit_end - chunk_start > size:
            if chunk_end > chunk_start:
                out.append((chunk_start, chunk_end))
            chunk_start = chunk_end = unit_start
            if unit_end - unit_start > size:
                out.extend(_model_cut(text, unit_start, unit_end, size))
                chunk_start = unit_end
        chunk_end = unit_end
        unit_start = unit_end
    if chunk_end > chunk_start:
        out.append((chunk_start, chunk_end))
    return out


def model_byte_spans(text: str, strategy: ChunkStrategy, size: int) -> list[Span]:
    spans, pos = [], 0
    for a, b in model_plan(text, strategy, size):
        n = len(text[a:b].encode("utf-8"))
        spans.append(Span(pos, pos + n))
        pos += n
    return spans


# --- generated inputs -------------------------------------------------------------------

_TOKENS = [
    "a",
    "word",
    " ",
    "\t",
    "\n",
    "\n\n",
    "\n\n\n",
    "\r\n",
    "\r\n\r\n",
    "  \n",
    "é",
    "€",
    "\U0001d11e",
    "\u3000",
    "\xa0",
    "\u2028",
    "\x85",
    "x" * 40,
    "\u200b",
]
texts_strategy = st.one_of(
    st.lists(st.sampled_from(_TOKENS), max_size=60).map("".join),
    st.text(max_size=300),
    st.text(alphabet=st.sampled_from(["z", "é", "\U0001f600"]), max_size=600),
)


class TestGeneratedPlans:
    @settings(max_examples=200, deadline=None)
    @given(
        text=texts_strategy,
        size=st.integers(1, 500),
        strategy=st.sampled_from(list(ChunkStrategy)),
    )
    def test_every_plan_is_valid_and_covers_the_text(self, text, size, strategy):
        data = text.encode("utf-8")
        spans = plan_chunks(data, ChunkingSettings(strategy, size))
        validate_plan(data, spans, size)
        pieces = texts(data, spans)
        assert "".join(pieces) == text
        assert all(1 <= len(p) <= size for p in pieces)
        assert (spans == []) == (text == "")

    @settings(max_examples=200, deadline=None)
    @given(
        text=texts_strategy,
        size=st.integers(1, 60),
        strategy=st.sampled_from(list(ChunkStrategy)),
    )
    def test_plan_matches_the_reference_model(self, text, size, strategy):
        data = text.encode("utf-8")
        assert plan_chunks(data, ChunkingSettings(strategy, size)) == model_byte_spans(
            text, strategy, size
        )

    @settings(max_examples=50, deadline=None)
    @given(text=texts_strategy, size=st.integers(1, 80))
    def test_deterministic(self, text, size):
        data = text.encode("utf-8")
        s = ChunkingSettings(PARAGRAPHS, size)
        assert plan_chunks(data, s) == plan_chunks(bytes(data), ChunkingSettings(PARAGRAPHS, size))


class TestParagraphs:
    def test_packs_whole_paragraphs_greedily(self):
        text = "a b\n\nc d\n\ne f\n"
        assert chunks(text, 100) == [text]
        assert chunks(text, 9) == ["a b\n\nc d\n", "\ne f\n"]
        assert chunks(text, 8) == ["a b\n", "\nc d\n", "\ne f\n"]

    def test_blank_lines_belong_to_the_start_of_the_next_chunk(self):
        assert chunks("one\n\n\n\ntwo\n", 7) == ["one\n", "\n\n\ntwo\n"]

    def test_leading_and_trailing_blank_lines(self):
        assert chunks("\n\nabc\ndef\n\n  \nghi\n   ", 12) == ["\n\nabc\ndef\n", "\n  \nghi\n   "]
        assert chunks("abc\n\n\n", 4) == ["abc\n", "\n\n"]

    def test_indented_line_cut_off_by_the_window_is_not_a_blank_line(self):
        # the window "ab\n  " ends inside "  cd\n": that line is not blank, so no boundary
        assert chunks("ab\n  cd\n\nef", 5) == ["ab\n  ", "cd\n", "\nef"]
        assert chunks("ab\n  \ncd", 5) == ["ab\n", "  \ncd"]
        assert chunks("a\n\nb\n\nc\n  dd", 10) == ["a\n\nb\n", "\nc\n  dd"]

    def test_a_paragraph_is_several_lines(self):
        assert chunks("l1\nl2\nl3\n\nl4\n", 9) == ["l1\nl2\nl3\n", "\nl4\n"]

    def test_whitespace_only_and_crlf_lines_are_blank(self):
        assert chunks("a\r\n\r\nb", 4) == ["a\r\n", "\r\nb"]
        assert chunks("a\n \t\nb", 4) == ["a\n", " \t\nb"]

    def test_long_paragraph_is_cut_after_the_last_whitespace(self):
        assert chunks("hello world foo", 8) == ["hello ", "world ", "foo"]
        assert chunks("ab cd\tef", 4) == ["ab ", "cd\t", "ef"]

    def test_long_paragraph_without_whitespace_is_cut_at_the_limit(self):
        assert chunks("abcdefghij", 4) == ["abcd", "efgh", "ij"]

    def test_pieces_of_a_cut_paragraph_are_not_packed_with_the_next_paragraph(self):
        assert chunks("aaaa bbbb\n\nc", 7) == ["aaaa ", "bbbb\n", "\nc"]

    def test_the_paragraph_after_a_cut_one_starts_a_fresh_chunk(self):
        assert chunks("x\n\nyyy yy\n\nz\n\nw", 5) == [
            "x\n",
            "\nyyy ",
            "yy\n",
            "\nz\n\nw",
        ]

    def test_leading_blank_lines_are_not_a_cut_point(self):
        assert chunks("x\n\n\nyyyyyy\n", 5) == ["x\n", "\n\nyyy", "yyy\n"]
        assert chunks("\n" * 7, 3) == ["\n\n\n", "\n\n\n", "\n"]

    def test_limit_counts_code_points_not_bytes(self):
        data = "éé\n\néé".encode()
        assert plan_chunks(data, ChunkingSettings(PARAGRAPHS, 3)) == [Span(0, 5), Span(5, 10)]
        assert chunks("ééé ééé", 4) == ["ééé ", "ééé"]

    def test_does_not_split_crlf_when_an_earlier_space_exists(self):
        assert chunks("ab cd\r\nef", 6) == ["ab ", "cd\r\nef"]

    @pytest.mark.parametrize("space", WHITESPACE)
    def test_every_unicode_whitespace_is_a_cut_point(self, space):
        assert chunks(f"aaa{space}bbbbb", 6)[0] == f"aaa{space}"

    @pytest.mark.parametrize("char", ["\u200b", "\ufeff", "_", "\u00ad"])
    def test_other_characters_are_not_cut_points(self, char):
        assert chunks(f"aaa{char}bbbbb", 6)[0] == f"aaa{char}bb"


class TestLinesAndFixed:
    def test_lines_are_packed_greedily(self):
        assert chunks("one\ntwo\nthree\n", 8, LINES) == ["one\ntwo\n", "three\n"]
        assert chunks("one\n\ntwo", 5, LINES) == ["one\n\n", "two"]

    def test_long_line_is_cut_at_whitespace(self):
        assert chunks("aa bb cc\nd\n", 4, LINES) == ["aa ", "bb ", "cc\n", "d\n"]

    def test_fixed_pieces_have_exactly_max_chars_code_points(self):
        assert chunks("abcdefg", 3, FIXED) == ["abc", "def", "g"]
        data = "😀😀😀".encode()
        assert plan_chunks(data, ChunkingSettings(FIXED, 2)) == [Span(0, 8), Span(8, 12)]
        assert chunks("a\n\nb c", 2, FIXED) == ["a\n", "\nb", " c"]

    @pytest.mark.parametrize("strategy", list(ChunkStrategy))
    def test_empty_input_has_no_chunks(self, strategy):
        assert plan_chunks(b"", ChunkingSettings(strategy, 5)) == []


def test_golden_plan_pins_the_planner_fingerprint():
    """If this fails, the planner's behaviour changed: bump PLANNER_FINGERPRINT."""
    text = "Title\n\nFirst para, short.\nSecond line.\n\n\nA much longer paragraph here.\n"
    assert PLANNER_FINGERPRINT == "runjournal.chunking/1"
    assert chunks(text, 40) == [
        "Title\n\nFirst para, short.\nSecond line.\n",
        "\n\nA much longer paragraph here.\n",
    ]
    assert chunks(text, 12, LINES)[:3] == ["Title\n\n", "First para, ", "short.\n"]


class TestSettings:
    def test_defaults(self):
        s = ChunkingSettings()
        assert (s.strategy, s.max_chars) == (PARAGRAPHS, 2000)

    @pytest.mark.parametrize("size", [0, -1, MAX_CHARS_LIMIT + 1, True, 2.5, "5"])
    def test_rejects_bad_max_chars(self, size):
        with pytest.raises(ChunkingSettingsError):
            ChunkingSettings(PARAGRAPHS, size)

    def test_rejects_a_strategy_that_is_not_the_enum(self):
        with pytest.raises(ChunkingSettingsError):
            ChunkingSettings("sentences")  # type: ignore[arg-type]

    def test_decoding_validates(self):
        decoded = msgspec.json.decode(
            b'{"strategy": "lines", "max_chars": 10000000}', type=ChunkingSettings
        )
        assert decoded == ChunkingSettings(LINES, MAX_CHARS_LIMIT)
        with pytest.raises(msgspec.ValidationError):
            msgspec.json.decode(b'{"max_chars": 0}', type=ChunkingSettings)
        with pytest.raises(msgspec.ValidationError):
            msgspec.json.decode(b'{"strategy": "words"}', type=ChunkingSettings)

    def test_span_encodes_as_a_pair(self):
        assert msgspec.json.encode([Span(0, 3)]) == b"[[0,3]]"
        assert msgspec.json.decode(b"[[0,3]]", type=list[Span]) == [Span(0, 3)]


class TestValidatePlan:
    DATA = "abé\ncde".encode()  # 8 bytes; é is bytes 2..3

    def test_accepts_a_good_plan(self):
        validate_plan(self.DATA, [Span(0, 5), Span(5, 8)], 5)
        validate_plan(b"", [], 1)

    @pytest.mark.parametrize(
        ("spans", "max_chars", "defect", "index"),
        [
            ([Span(0, 5), Span(5, 9)], 10, PlanDefect.OUT_OF_BOUNDS, 1),
            ([Span(-1, 5)], 10, PlanDefect.OUT_OF_BOUNDS, 0),
            ([Span(0, 5), Span(5, 8), Span(0, 5)], 10, PlanDefect.NOT_ORDERED, 2),
            ([Span(0, 5), Span(8, 5)], 10, PlanDefect.NOT_ORDERED, 1),
            ([Span(0, 0), Span(0, 8)], 10, PlanDefect.EMPTY_CHUNK, 0),
            ([Span(0, 5), Span(5, 5), Span(5, 8)], 10, PlanDefect.EMPTY_CHUNK, 1),
            ([Span(0, 4), Span(5, 8)], 10, PlanDefect.GAP_OR_OVERLAP, 1),
            ([Span(0, 5), Span(4, 8)], 10, PlanDefect.GAP_OR_OVERLAP, 1),
            ([Span(1, 8)], 10, PlanDefect.NOT_COVERING, 0),
            ([Span(0, 5)], 10, PlanDefect.NOT_COVERING, None),
            ([], 10, PlanDefect.NOT_COVERING, None),
            ([Span(0, 3), Span(3, 8)], 10, PlanDefect.NOT_UTF8_BOUNDARY, 0),
            ([Span(0, 5), Span(5, 8)], 3, PlanDefect.TOO_LARGE, 0),
        ],
    )
    def test_rejects_each_defect(self, spans, max_chars, defect, index):
        with pytest.raises(PlanInvalid) as info:
            validate_plan(self.DATA, spans, max_chars)
        assert (info.value.reason, info.value.index) == (defect, index)
        assert isinstance(info.value, ChunkingError)

    def test_too_large_counts_code_points(self):
        data = "éééé".encode()  # 4 code points, 8 bytes
        validate_plan(data, [Span(0, 8)], 4)
        with pytest.raises(PlanInvalid) as info:
            validate_plan(data, [Span(0, 8)], 3)
        assert info.value.reason is PlanDefect.TOO_LARGE

    def test_rejects_a_bad_max_chars(self):
        with pytest.raises(ChunkingSettingsError):
            validate_plan(b"a", [Span(0, 1)], 0)


class TestSourceChecks:
    @pytest.mark.parametrize(
        ("data", "offset"),
        [
            (b"ab\xff", 2),
            (b"ab\xe2\x82", 2),  # truncated sequence
            (b"x\xed\xa0\x80", 1),  # encoded surrogate
            (b"\xc0\xaf", 0),  # overlong
            ("é".encode() + b"\x80", 2),  # stray continuation byte
        ],
    )
    def test_reports_the_first_bad_byte(self, data, offset):
        with pytest.raises(SourceNotUtf8) as info:
            check_utf8(data)
        assert info.value.offset == offset
        assert isinstance(info.value, SourceError)
        with pytest.raises(SourceNotUtf8):
            plan_chunks(data, ChunkingSettings())

    def test_nul_means_binary(self):
        with pytest.raises(SourceIsBinary) as info:
            check_utf8(b"ab\x00\xff")
        assert info.value.offset == 2
        assert isinstance(info.value, SourceError)

    def test_accepts_utf8_text(self):
        check_utf8("héllo \U0001f600\r\n".encode())
        check_utf8(b"")


@pytest.mark.parametrize(
    "text",
    [
        "lorem ipsum dolor\nsit amet\n\n" * 36_000,
        "a\n\n" * 333_333,
        "\n" * 1_000_000,
        "a" * 1_000_000,
        "é " * 500_000,
        ("a" * 30 + "\n") * 32_000,
    ],
    ids=["prose", "tiny-paragraphs", "blank-lines", "no-whitespace", "multibyte", "lines"],
)
def test_megabyte_inputs_plan_in_linear_time(text):
    data = text.encode("utf-8")
    for strategy in ChunkStrategy:
        began = time.thread_time()  # cpu, not wall: load on the machine stretches wall
        spans = plan_chunks(data, ChunkingSettings(strategy, 2000))
        elapsed = time.thread_time() - began
        validate_plan(data, spans, 2000)
        assert elapsed < 1.0, (strategy, elapsed)  # ~1-20 ms measured; generous for CI
