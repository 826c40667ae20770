"""Logical output names: docs/operations.md "Names" rules, refusals, conflicts, properties."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.domain.logical_names import (
    RESERVED_NAMES,
    LogicalNameError,
    NameRefusal,
    check_logical_names,
    find_name_conflicts,
    validate_logical_name,
)

SETTINGS = settings(max_examples=200, deadline=None)
COMPONENT_RE = re.compile(r"[A-Za-z0-9._-]{1,255}")


def refusal_of(name: str, **kwargs: bool) -> NameRefusal:
    with pytest.raises(LogicalNameError) as info:
        validate_logical_name(name, **kwargs)
    assert info.value.name == name
    return info.value.refusal


def follows_the_rules(name: str) -> bool:
    """An independent restatement of the documented rules, used as the oracle."""
    parts = name.split("/")
    return (
        1 <= len(parts) <= 8
        and len(name.encode("utf-8")) <= 1024
        and all(COMPONENT_RE.fullmatch(p) and not p.startswith(".") for p in parts)
        and parts[0].lower() not in RESERVED_NAMES
    )


@pytest.mark.parametrize(
    "name",
    [
        "glossary.md",
        "artifacts/words/doc.json",
        "a/b/c/d/e/f/g/h",
        "x" * 255,
        "/".join(["y" * 127] * 8),
        "A-b_c.d",
        "out/manifest.json",  # reserved only at the top of the run directory
        "report.json.bak",
        "a..b",
        "a.",
    ],
)
def test_valid_names_are_returned_unchanged(name: str) -> None:
    assert validate_logical_name(name) == name


@pytest.mark.parametrize(
    ("name", "refusal"),
    [
        ("", NameRefusal.EMPTY),
        ("a\x00b", NameRefusal.NUL),
        ("a\nb", NameRefusal.CONTROL_CHARACTER),
        ("\x1b[31mred", NameRefusal.CONTROL_CHARACTER),
        ("a\x85b", NameRefusal.CONTROL_CHARACTER),
        ("bad\udcffname", NameRefusal.NOT_UTF8),
        ("a\\b", NameRefusal.BACKSLASH),
        ("..\\x", NameRefusal.BACKSLASH),
        ("/etc/passwd", NameRefusal.ABSOLUTE),
        ("~/x", NameRefusal.BAD_CHARACTER),
        ("C:/x", NameRefusal.BAD_CHARACTER),
        ("a b", NameRefusal.BAD_CHARACTER),
        ("caf\u00e9", NameRefusal.BAD_CHARACTER),
        ("evil\u202etxt.json", NameRefusal.BAD_CHARACTER),
        ("a//b", NameRefusal.EMPTY_COMPONENT),
        ("a/", NameRefusal.EMPTY_COMPONENT),
        (".", NameRefusal.DOT_COMPONENT),
        ("..", NameRefusal.DOT_COMPONENT),
        ("a/../b", NameRefusal.DOT_COMPONENT),
        ("a/./b", NameRefusal.DOT_COMPONENT),
        (".hidden", NameRefusal.LEADING_DOT),
        ("a/.git/config", NameRefusal.LEADING_DOT),
        ("a/b/c/d/e/f/g/h/i", NameRefusal.TOO_MANY_COMPONENTS),
        ("x" * 256, NameRefusal.COMPONENT_TOO_LONG),
        ("/".join(["y" * 200] * 6), NameRefusal.TOO_LONG),
        ("z" * 5000, NameRefusal.TOO_LONG),
        ("manifest.json", NameRefusal.RESERVED),
        ("Manifest.JSON", NameRefusal.RESERVED),
        ("error.log", NameRefusal.RESERVED),
        ("chunk-map.index.json", NameRefusal.RESERVED),
        ("report.json/x", NameRefusal.RESERVED),
    ],
)
def test_refusals_are_typed(name: str, refusal: NameRefusal) -> None:
    assert refusal_of(name) is refusal


@pytest.mark.parametrize("name", sorted(RESERVED_NAMES))
def test_reserved_names_allowed_for_the_cli(name: str) -> None:
    assert refusal_of(name) is NameRefusal.RESERVED
    assert validate_logical_name(name, allow_reserved=True) == name


def test_reserved_set_matches_the_contract() -> None:
    assert (
        frozenset(
            {
                "manifest.json",
                "report.json",
                "report.html",
                "failure.json",
                "error.log",
                "chunk-map.json",
                "chunk-map.index.json",
            }
        )
        == RESERVED_NAMES
    )


def test_non_str_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        validate_logical_name(b"a.json")  # type: ignore[arg-type]


def test_error_str_is_one_escaped_line() -> None:
    error = LogicalNameError("a\nb\u202e" + "q" * 500, NameRefusal.CONTROL_CHARACTER)
    text = str(error)
    assert "\n" not in text and "\u202e" not in text
    assert len(text) < 250
    assert "control character" in text
    assert isinstance(error, ValueError)


def test_conflicts_report_duplicates_case_and_path_clashes() -> None:
    names = ["out/A.json", "out/a.json", "out/A.json", "x", "x/y", "p/q", "P", "solo"]
    assert find_name_conflicts(names) == [
        ("out/a.json", NameRefusal.CASE_COLLISION),
        ("out/A.json", NameRefusal.DUPLICATE),
        ("x/y", NameRefusal.PATH_CLASH),
        ("P", NameRefusal.PATH_CLASH),
    ]


def test_no_conflicts_for_distinct_names() -> None:
    assert find_name_conflicts(["a/b", "a/c", "ab", "b/a"]) == []
    assert find_name_conflicts(iter([])) == []


def test_check_logical_names_raises_the_first_problem() -> None:
    assert check_logical_names(["a.json", "b/c.json"]) == ["a.json", "b/c.json"]
    with pytest.raises(LogicalNameError) as info:
        check_logical_names(["a.json", "A.JSON"])
    assert info.value.refusal is NameRefusal.CASE_COLLISION
    with pytest.raises(LogicalNameError) as info:
        check_logical_names(["a.json", "report.json"])
    assert info.value.refusal is NameRefusal.RESERVED
    assert check_logical_names(["report.json"], allow_reserved=True) == ["report.json"]


# ------------------------------------------------------------------ properties

component = st.from_regex(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,40}", fullmatch=True)
valid_names = st.lists(component, min_size=1, max_size=8).map("/".join)
hostile_fragments = st.sampled_from(
    ["..", ".", "", "\x00", "\n", "\\", "~", ":", " ", "\u202e", "\udcff", "\u00e9", "*", "\t"]
)


@SETTINGS
@given(st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from("/.-_aZ09"), max_size=60))
def test_anything_accepted_follows_the_rules(name: str) -> None:
    try:
        validate_logical_name(name)
    except LogicalNameError as error:
        assert not follows_the_rules(name), error
    else:
        assert follows_the_rules(name)


@SETTINGS
@given(valid_names)
def test_names_built_by_the_rules_are_accepted(name: str) -> None:
    if name.split("/")[0].lower() in RESERVED_NAMES:
        assert refusal_of(name) is NameRefusal.RESERVED
    else:
        assert validate_logical_name(name) == name


@SETTINGS
@given(valid_names, hostile_fragments, st.data())
def test_hostile_components_are_refused(name: str, fragment: str, data: st.DataObject) -> None:
    parts = name.split("/")
    index = data.draw(st.integers(0, len(parts) - 1))
    if fragment in ("..", ".", ""):
        parts[index] = fragment  # a whole component
    else:
        position = data.draw(st.integers(0, len(parts[index])))
        parts[index] = parts[index][:position] + fragment + parts[index][position:]
    hostile = "/".join(parts)
    with pytest.raises(LogicalNameError):
        validate_logical_name(hostile)


@SETTINGS
@given(valid_names)
def test_leading_slash_or_dot_is_refused(name: str) -> None:
    assert refusal_of("/" + name) is NameRefusal.ABSOLUTE
    assert refusal_of("." + name) in (NameRefusal.LEADING_DOT, NameRefusal.DOT_COMPONENT)


tiny_names = st.lists(st.sampled_from(["a", "A", "b", "B"]), min_size=1, max_size=3).map("/".join)


def clash(a: str, b: str) -> bool:
    a, b = a.casefold(), b.casefold()
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


@SETTINGS
@given(st.lists(tiny_names, max_size=10))
def test_conflicts_are_exactly_the_case_insensitive_repeats_and_clashes(
    names: list[str],
) -> None:
    conflicts = find_name_conflicts(names)
    flagged = [name for name, _ in conflicts]
    kept: list[str] = []
    for index, name in enumerate(names):
        if name in names[:index] or any(clash(name, k) for k in kept):
            assert flagged and flagged.pop(0) == name  # reported, in input order
        else:
            kept.append(name)
    assert flagged == []
    for name, refusal in conflicts:
        if refusal is NameRefusal.DUPLICATE:
            assert names.count(name) > 1
        elif refusal is NameRefusal.CASE_COLLISION:
            assert sum(n.casefold() == name.casefold() for n in names) > 1
        else:
            assert refusal is NameRefusal.PATH_CLASH


def test_refused_names_lists_every_problem_and_accepts_the_callers_own_reserved_names():
    from runjournal.domain.logical_names import refused_names

    problems = refused_names(
        ["ok.md", "manifest.json", "../x", "chunk-map.json", "A.md", "a.md"],
        reserved_ok=["chunk-map.json"],
    )
    assert [(name, refusal.name) for name, refusal in problems] == [
        ("manifest.json", "RESERVED"),
        ("../x", "DOT_COMPONENT"),
        ("a.md", "CASE_COLLISION"),
    ]
