"""Printing results: one JSON document on stdout with --json, text otherwise."""

from __future__ import annotations

import sys
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
