"""`emit_json_streamed` prints what `emit_json` prints for the whole document, byte for byte
(`journal show --json` streams its events with it)."""

from __future__ import annotations

import contextlib
import io
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.cli.output import emit_json, emit_json_streamed, json_bytes, json_bytes_streamed
from runjournal.projections.streamed import Streamed

_leaf = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
_json = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)


def _printed(fn: Any, *args: Any) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fn(*args)
    return out.getvalue()


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=6), _json, max_size=3), st.lists(_json, max_size=4))
def test_streamed_document_is_the_whole_one(doc: dict[str, Any], items: list[Any]) -> None:
    doc.pop("events", None)
    whole = _printed(emit_json, {**doc, "events": items})
    assert _printed(emit_json_streamed, doc, "events", iter(items)) == whole
    # The bytes a streamed view is written as (`projections rebuild`) are the same text.
    rendered = json_bytes_streamed(Streamed(doc, "events", iter(items)))
    assert rendered == json_bytes({**doc, "events": items}) == whole.encode("utf-8")


def test_an_empty_list_and_nested_values() -> None:
    doc = {"run_id": 'r\u00e9\n"x'}
    items = [{"a": [], "b": {}, "c": [1, {"d": [None, "x"]}]}, {"type": "X", "data": {"k": [{}]}}]
    for chosen in ([], items):
        whole = _printed(emit_json, {**doc, "events": chosen})
        assert _printed(emit_json_streamed, doc, "events", iter(chosen)) == whole
