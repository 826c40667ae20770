"""Printing results: one JSON document on stdout with --json, text otherwise."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable
from typing import Any

import msgspec
from runjournal.app.documents import json_bytes
from runjournal.projections.streamed import Streamed

__all__ = ["emit_json", "emit_json_streamed", "json_bytes", "jsonl_line"]

_json = msgspec.json.Encoder(order="sorted")


def emit_json(doc: Any) -> None:
    sys.stdout.write(msgspec.json.format(_json.encode(doc), indent=2).decode("utf-8"))
    sys.stdout.write("\n")
    sys.stdout.flush()


def jsonl_line(doc: Any) -> str:
    """One compact JSON object and a newline: a line of a `--jsonl` stream."""
    return _json.encode(doc).decode("utf-8") + "\n"


def emit_json_streamed(doc: dict[str, Any], key: str, items: Iterable[Any]) -> None:
    """`emit_json({**doc, key: list(items)})`, byte for byte, holding one item at a time.

    For documents whose one long list would not fit in memory (`journal show --json`,
    `explain --json`, docs/performance.md "Reading commands on a large run"): keys in
    sorted order, each item formatted on its own and indented to its depth, as msgspec
    formats the whole. An item that is itself `Streamed` is written the same way.
    """
    out = sys.stdout
    _write_streamed(out.write, Streamed(doc, key, items), "")
    out.write("\n")
    out.flush()


def json_bytes_streamed(streamed: Streamed) -> bytes:
    """`json_bytes` of a Streamed document, holding its text but never all its items.

    Gathered in a BytesIO, whose `getvalue` hands over its buffer without copying it (a
    bytearray's `bytes()` copy held the text twice, docs/performance.md "Reading commands
    on a large run")."""
    buf = io.BytesIO()

    def write(text: str) -> None:
        buf.write(text.encode("utf-8"))

    _write_streamed(write, streamed, "")
    buf.write(b"\n")
    return buf.getvalue()


def _write_streamed(write: Any, streamed: Streamed, prefix: str) -> None:
    doc, key = streamed.doc, streamed.key
    inner = prefix + "  "
    write("{")
    for i, name in enumerate(sorted({*doc, key} - {None})):
        write(("," if i else "") + "\n" + inner + _json.encode(name).decode("utf-8") + ": ")
        if name != key:
            value = doc[name]
            if isinstance(value, Streamed):
                _write_streamed(write, value, inner)
            else:
                write(_indented(value, inner))
            continue
        first = True
        for item in streamed.items:
            write(("[\n" if first else ",\n") + inner + "  ")
            if isinstance(item, Streamed):
                _write_streamed(write, item, inner + "  ")
            else:
                write(_indented(item, inner + "  "))
            first = False
        write("[]" if first else "\n" + inner + "]")
    write("\n" + prefix + "}")


def _indented(value: Any, prefix: str) -> str:
    text = msgspec.json.format(_json.encode(value), indent=2).decode("utf-8")
    return text.replace("\n", "\n" + prefix)
