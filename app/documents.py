"""Canonical JSON for the files a run writes (manifest, report, failure, …)."""

from __future__ import annotations

import io
from typing import Any

import msgspec
from runjournal.projections.streamed import Streamed

_json = msgspec.json.Encoder(order="sorted")


def json_bytes(doc: Any) -> bytes:
    """Canonical, human-readable JSON: sorted keys, two-space indent, a final newline."""
    return msgspec.json.format(_json.encode(doc), indent=2) + b"\n"


def json_bytes_streamed(streamed: Streamed) -> bytes:
    """`json_bytes` of a Streamed document, holding its text but never all its items.

    Gathered in a BytesIO, whose `getvalue` hands over its buffer without copying it (a
    bytearray's `bytes()` copy held the text twice, docs/performance.md "Reading commands
    on a large run"). The run's `manifest.json` and `report.json` are written this way too
    (their outputs one at a time, issue 29: peak RSS)."""
    buf = io.BytesIO()

    def write(text: str) -> None:
        buf.write(text.encode("utf-8"))

    write_streamed(write, streamed, "")
    buf.write(b"\n")
    return buf.getvalue()


def write_streamed(write: Any, streamed: Streamed, prefix: str) -> None:
    doc, key = streamed.doc, streamed.key
    inner = prefix + "  "
    write("{")
    for i, name in enumerate(sorted({*doc, key} - {None})):
        write(("," if i else "") + "\n" + inner + _json.encode(name).decode("utf-8") + ": ")
        if name != key:
            value = doc[name]
            if isinstance(value, Streamed):
                write_streamed(write, value, inner)
            else:
                write(_indented(value, inner))
            continue
        first = True
        for item in streamed.items:
            write(("[\n" if first else ",\n") + inner + "  ")
            if isinstance(item, Streamed):
                write_streamed(write, item, inner + "  ")
            else:
                write(_indented(item, inner + "  "))
            first = False
        write("[]" if first else "\n" + inner + "]")
    write("\n" + prefix + "}")


def _indented(value: Any, prefix: str) -> str:
    text = msgspec.json.format(_json.encode(value), indent=2).decode("utf-8")
    return text.replace("\n", "\n" + prefix)
