"""Printing results: one JSON document on stdout with --json, text otherwise."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import msgspec
from runjournal.app.documents import json_bytes, json_bytes_streamed, write_streamed
from runjournal.projections.streamed import Streamed

__all__ = ["emit_json", "emit_json_streamed", "json_bytes", "json_bytes_streamed", "jsonl_line"]

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
    write_streamed(out.write, Streamed(doc, key, items), "")
    out.write("\n")
    out.flush()
