"""Name rules: identifiers, source logical names, safe lane ids, run ids."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import PurePosixPath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.domain.names import (
    CORPUS_LANE,
    RUN_ID_RE,
    SAFE_LANE_READABLE_MAX,
    InvalidRunIdPart,
    InvalidSourcePath,
    NameRuleError,
    compact_utc_timestamp,
    is_valid_pipeline_name,
    is_valid_run_id,
    is_valid_step_id,
    make_run_id,
    recorded_run_parent,
    safe_lane_id,
    source_logical_name,
)

COMPONENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


def h8(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


class TestIdentifiers:
    @pytest.mark.parametrize("name", ["glossary", "a", "A_b-9", "x" * 64, "-", "_"])
    def test_valid(self, name):
        assert is_valid_pipeline_name(name)
        assert is_valid_step_id(name)

    @pytest.mark.parametrize(
        "name", ["", "x" * 65, "a b", "a/b", "a.b", "é", "a\n", "words\n", "..", None, 3]
    )
    def test_invalid(self, name):
        assert not is_valid_pipeline_name(name)
        assert not is_valid_step_id(name)


class TestSourceLogicalName:
    def test_inside_the_pipeline_directory_is_the_relative_posix_path(self):
        assert source_logical_name("/work/p", "/work/p/docs/a.md") == "docs/a.md"
        assert source_logical_name(PurePosixPath("/work/p"), "/work/p/a.md") == "a.md"
        assert source_logical_name("/", "/a/b.md") == "a/b.md"

    def test_outside_is_file_name_tilde_hash_of_the_absolute_path(self):
        assert (
            source_logical_name("/work/p", "/work/other/a.md") == f"a.md~{h8('/work/other/a.md')}"
        )
        # a sibling whose name merely starts with the directory's name is outside too
        assert source_logical_name("/work/p", "/work/p2/a.md") == f"a.md~{h8('/work/p2/a.md')}"

    def test_outside_files_with_the_same_name_stay_distinct(self):
        a = source_logical_name("/p", "/x/notes.md")
        b = source_logical_name("/p", "/y/notes.md")
        assert a != b
        assert a.startswith("notes.md~")
        assert b.startswith("notes.md~")

    def test_non_utf8_file_names_are_hashed_as_their_bytes(self):
        name = source_logical_name("/p", "/x/caf\udce9.md")  # os.fsdecode of b"caf\xe9.md"
        expected = hashlib.sha256(b"/x/caf\xe9.md").hexdigest()[:8]
        assert name == f"caf\udce9.md~{expected}"

    @pytest.mark.parametrize(
        ("base", "source"),
        [
            ("p", "/p/a.md"),
            ("/p", "a.md"),
            ("/p", "/p/../etc/passwd"),
            ("/p", "/p"),
            ("/p", "/"),
        ],
    )
    def test_rejects_paths_that_are_not_absolute_resolved_files(self, base, source):
        with pytest.raises(InvalidSourcePath):
            source_logical_name(base, source)

    @settings(max_examples=400, deadline=None)
    @given(
        base=st.lists(st.sampled_from(["", ".", "p", "q", "x y", "caf\udce9"]), max_size=4),
        source=st.lists(st.sampled_from(["", ".", "..", "p", "q", "a.md", "x y"]), max_size=5),
        base_root=st.sampled_from(["/", "//", "///"]),
        source_root=st.sampled_from(["/", "//", "///", ""]),
    )
    def test_the_string_rules_are_pure_posix_path_semantics(
        self, base, source, base_root, source_root
    ):
        """The domain does no pathlib (purity contract); the result is what PurePosixPath gives."""
        base_text = base_root + "/".join(base)
        source_text = source_root + "/".join(source)

        def reference() -> str:
            b, s = PurePosixPath(base_text), PurePosixPath(source_text)
            if not b.is_absolute() or ".." in b.parts or not s.is_absolute() or ".." in s.parts:
                raise InvalidSourcePath("not absolute and resolved")
            if s.name == "" or s == b:
                raise InvalidSourcePath("names no file")
            if s.is_relative_to(b):
                return s.relative_to(b).as_posix()
            digest = hashlib.sha256(str(s).encode("utf-8", "surrogateescape")).hexdigest()
            return f"{s.name}~{digest[:8]}"

        try:
            expected = reference()
        except InvalidSourcePath:
            with pytest.raises(InvalidSourcePath):
                source_logical_name(base_text, source_text)
        else:
            assert source_logical_name(base_text, source_text) == expected
            assert source_logical_name(PurePosixPath(base_text), source_text) == expected


class TestSafeLaneId:
    @pytest.mark.parametrize(
        ("lane", "safe"),
        [
            (CORPUS_LANE, "corpus"),
            ("notes.md", "notes.md"),
            ("a-b_c.1", "a-b_c.1"),
            ("docs/a.md", f"docs__a.md-{h8('docs/a.md')}"),
            ("a b.md", f"a_b.md-{h8('a b.md')}"),
            (".hidden", f"_hidden-{h8('.hidden')}"),
            ("docs/.hidden", f"docs__.hidden-{h8('docs/.hidden')}"),
            ("café.md", f"caf_.md-{h8('café.md')}"),
            ("notes.md~1a2b3c4d", f"notes.md_1a2b3c4d-{h8('notes.md~1a2b3c4d')}"),
            ("..", f"_.-{h8('..')}"),
            ("", f"_-{h8('')}"),
        ],
    )
    def test_examples(self, lane, safe):
        assert safe_lane_id(lane) == safe

    def test_long_ids_keep_a_readable_prefix_and_the_hash(self):
        lane = "d/" * 150 + "x.md"
        safe = safe_lane_id(lane)
        assert safe == "d__" * 66 + "d_" + f"-{h8(lane)}"
        assert len(safe) == SAFE_LANE_READABLE_MAX + 9
        plain = "x" * 201
        assert safe_lane_id(plain) == "x" * SAFE_LANE_READABLE_MAX + f"-{h8(plain)}"
        assert safe_lane_id("x" * 200) == "x" * 200

    @settings(max_examples=200, deadline=None)
    @given(st.text(max_size=400))
    def test_always_a_valid_path_component(self, lane):
        safe = safe_lane_id(lane)
        assert COMPONENT.fullmatch(safe)
        assert safe not in {".", ".."}
        assert len(safe.encode("utf-8")) <= 255
        assert safe_lane_id(lane) == safe

    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(st.text(alphabet=st.sampled_from("a/._- é~"), max_size=12), min_size=2, max_size=8)
    )
    def test_distinct_ids_get_distinct_safe_ids(self, lanes):
        # a small alphabet makes inputs collide after substitution; the hash keeps them apart
        distinct = set(lanes)
        assert len({safe_lane_id(lane) for lane in distinct}) == len(distinct)

    def test_ids_equal_after_substitution_still_differ(self):
        variants = ["a b", "a\tb", "a_b", "a/b", "a__b", "aéb"]
        assert len({safe_lane_id(v) for v in variants}) == len(variants)


class TestRunId:
    def test_shape(self):
        run_id = make_run_id("20261130T150405Z", "1a2b3c4d")
        assert run_id == "20261130T150405Z-1a2b3c4d"
        assert is_valid_run_id(run_id)
        assert RUN_ID_RE.fullmatch(run_id)

    @pytest.mark.parametrize(
        ("stamp", "rand"),
        [
            ("2026-11-30T15:04:05Z", "1a2b3c4d"),
            ("20261130T150405", "1a2b3c4d"),
            ("20261130T150405Z", "1A2B3C4D"),
            ("20261130T150405Z", "1a2b3c4"),
            ("20261130T150405Z", "1a2b3c4d\n"),
        ],
    )
    def test_rejects_bad_parts(self, stamp, rand):
        with pytest.raises(InvalidRunIdPart):
            make_run_id(stamp, rand)

    @pytest.mark.parametrize(
        "value",
        ["", "20261130T150405Z", "20261130T150405Z-1a2b3c4d\n", "../20261130T150405Z-1a2b3c4d", 7],
    )
    def test_invalid_run_ids(self, value):
        assert not is_valid_run_id(value)

    def test_timestamp_is_utc(self):
        moment = datetime(2026, 11, 30, 16, 4, 5, 999, tzinfo=timezone(timedelta(hours=1)))
        assert compact_utc_timestamp(moment) == "20261130T150405Z"
        assert (
            compact_utc_timestamp(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "20260102T030405Z"
        )
        with pytest.raises(InvalidRunIdPart):
            compact_utc_timestamp(datetime(2026, 1, 2))

    def test_errors_are_value_errors(self):
        assert issubclass(InvalidRunIdPart, NameRuleError)
        assert issubclass(InvalidSourcePath, NameRuleError)
        assert issubclass(NameRuleError, ValueError)


class TestSafeLaneIdInjective:
    """docs/operations.md "Names": distinct lane ids never share a lane directory."""

    def test_a_name_shaped_like_an_escaped_id_gets_its_own_suffix(self):
        escaped = safe_lane_id("docs/a.md")
        assert escaped == f"docs__a.md-{h8('docs/a.md')}"  # unchanged: checkpoints stay found
        literal = safe_lane_id(escaped)
        assert literal == f"{escaped}-{h8(escaped)}"
        assert literal != escaped
        assert safe_lane_id(literal) != literal

    @pytest.mark.parametrize("kept", ["corpus", "a.md", "docs__a.md", "x-1234abc", "x-1234ABCD"])
    def test_ordinary_safe_ids_are_kept(self, kept):
        assert safe_lane_id(kept) == kept

    @settings(max_examples=500, deadline=None)
    @given(
        st.lists(
            st.one_of(
                st.text(alphabet=st.sampled_from("a/_.- é0123456789abcdef"), max_size=24),
                st.text(max_size=12),
            ),
            min_size=2,
            max_size=8,
        ),
        st.data(),
    )
    def test_distinct_names_get_distinct_safe_ids(self, lanes, data):
        # Feed the mapping its own outputs too: an escaped id taken literally as a name.
        pool = set(lanes)
        pool |= {safe_lane_id(lane) for lane in data.draw(st.lists(st.sampled_from(lanes)))}
        pool = sorted(pool)
        assert len({safe_lane_id(lane) for lane in pool}) == len(pool)


# --- recorded_run_parent: which records pin down a run directory ------------------------

RUN = "20261130T150405Z-1a2b3c4d"


@settings(max_examples=300)
@given(
    st.lists(st.sampled_from(["a", "out", ".", "..", "", "runs x", RUN]), max_size=4),
    st.sampled_from([RUN, "20261130T150405Z-00000000", "latest", RUN + "/"]),
    st.booleans(),
)
def test_recorded_run_parent_only_for_an_absolute_normal_dir_and_the_run_id(
    parts: list[str], last: str, absolute: bool
) -> None:
    parent = ("/" if absolute else "") + "/".join(parts)
    run_dir = f"{parent}/{last}"
    path = PurePosixPath(parent)
    normal = (  # the model: PurePosixPath keeps it as is; absolute, not "/" nor "//…", no ".."
        path.is_absolute()
        and str(path) == parent
        and ".." not in path.parts
        and parent != "/"
        and not parent.startswith("//")
    )
    expected = parent if normal and last == RUN else None
    assert recorded_run_parent(RUN, run_dir) == expected


def test_recorded_run_parent_needs_a_valid_run_id() -> None:
    assert recorded_run_parent("latest", "/out/latest") is None
    assert recorded_run_parent(RUN, f"/out/{RUN}") == "/out"
