"""Printing results: one JSON document on stdout with --json, text otherwise."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import msgspec

_json = msgspec.json.Encoder(order="sorted")


def emit_json(doc: Any) -> None:
    sys.stdout.write(msgspec.json.format(_json.encode(doc), indent=2).decode("utf-8"))
    sys.stdout.write("\n")
    sys.stdout.flush()


def json_bytes(doc: Any) -> bytes:
    """Canonical, human-readable JSON for files the CLI writes (manifest, report, …)."""
    return msgspec.json.format(_json.encode(doc), indent=2) + b"\n"


def jsonl_line(doc: Any) -> str:
    """One compact JSON object and a newline: a line of a `--jsonl` stream."""
    return _json.encode(doc).decode("utf-8") + "\n"


def emit_json_streamed(doc: dict[str, Any], key: str, items: Iterable[Any]) -> None:
    """`emit_json({**doc, key: list(items)})`, byte for byte, holding one item at a time.

    For documents whose one long list would not fit in memory (`journal show --json`,
    docs/performance.md "Reading commands on a large run"): keys in sorted order, each
    item formatted on its own and indented to its depth, as msgspec formats the whole.
    """
    out = sys.stdout
    out.write("{")
    for i, name in enumerate(sorted({*doc, key})):
        out.write(("," if i else "") + "\n  " + _json.encode(name).decode("utf-8") + ": ")
        if name != key:
            out.write(_indented(doc[name], "  "))
            continue
        first = True
        for item in items:
            out.write(("[\n    " if first else ",\n    ") + _indented(item, "    "))
            first = False
        out.write("[]" if first else "\n  ]")
    out.write("\n}\n")
    out.flush()


def _indented(value: Any, prefix: str) -> str:
    text = msgspec.json.format(_json.encode(value), indent=2).decode("utf-8")
    return text.replace("\n", "\n" + prefix)
