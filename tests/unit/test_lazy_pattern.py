"""`LazyPattern` answers as `re.compile` would, compiling once, on first use; lazy
package exports resolve each name from its submodule once (docs/performance.md
"Start-up")."""

from __future__ import annotations

import re

import pytest
from runjournal.domain.lazy_pattern import LazyPattern


def test_a_lazy_pattern_answers_as_the_compiled_one() -> None:
    source, text = r"(?P<word>[a-z]+)-(\d+)", "ab-12 cd-3 x-"
    lazy, real = LazyPattern(source, re.I), re.compile(source, re.I)
    assert lazy.findall(text) == real.findall(text)
    assert lazy.sub(r"\2", text) == real.sub(r"\2", text)
    assert [m.span() for m in lazy.finditer(text)] == [m.span() for m in real.finditer(text)]
    assert lazy.fullmatch("AB-1") is not None and lazy.match("-1") is None
    assert (lazy.pattern, lazy.flags) == (real.pattern, real.flags)
    assert lazy.groupindex == real.groupindex


def test_a_lazy_pattern_compiles_once_and_only_when_used(monkeypatch) -> None:
    calls: list[str] = []
    real_compile = re.compile

    def counting(pattern: str, flags: int = 0) -> re.Pattern[str]:
        calls.append(pattern)
        return real_compile(pattern, flags)

    monkeypatch.setattr(re, "compile", counting)
    lazy = LazyPattern(r"x+")
    assert calls == []
    assert lazy.search("axxb").group() == "xx"
    assert lazy.split("axb") == ["a", "b"]
    assert lazy.compiled() is lazy.compiled()
    assert calls == [r"x+"]


def test_a_bad_pattern_fails_when_first_used() -> None:
    lazy = LazyPattern(r"(unclosed")
    with pytest.raises(re.error):
        lazy.match("x")


def test_lazy_exports_resolve_each_name_once_and_refuse_unknown_ones() -> None:
    import runjournal.adapters.debug_bundle as bundle

    first = bundle.RESOLUTION
    assert "RESOLUTION" in vars(bundle) and bundle.RESOLUTION is first
    assert "JournalSpans" in dir(bundle)
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = bundle.Nothing
