"""`gc --cache` / `--max-cache-size`: the size syntax and the text of the cache part
(docs/operations.md "Cache retention"); the collection itself is app/collect_garbage.py's.
"""

from __future__ import annotations

import re
from typing import Any

import click
from runjournal.cli.exit_codes import CliError
from runjournal.domain.lazy_pattern import LazyPattern

_SIZE = LazyPattern(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """`--max-cache-size`: bytes, or a number with K, M, G or T (powers of 1024)."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise CliError(
            f"--max-cache-size {text!r}: expected a size such as 500M, 2G or 1048576 "
            "(units K, M, G, T: powers of 1024)"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def echo_cache(doc: dict[str, Any]) -> None:
    """The text lines of the cache part."""
    if doc["skipped"]:
        click.echo(f"cache left alone: {doc['skipped']}")
        return
    for row in doc["journals"]:
        pipelines = ", ".join(row["pipelines"])
        if row["status"] in ("missing", "unreadable"):
            click.echo(
                f"cache: kept everything of pipeline(s) {pipelines} and every chunk plan: "
                f"journal {row['journal']} is {row['status']} ({row['error']})"
                + ("; gc --forget-missing forgets it" if row["status"] == "missing" else "")
            )
        elif row["status"] == "forgotten":
            verb = "would forget" if doc["dry_run"] else "forgot"
            click.echo(f"cache: {verb} journal {row['journal']} ({pipelines}): it is gone")
    unregistered = doc.get("kept", {}).get("unregistered")
    if unregistered:
        click.echo(
            f"cache: kept {unregistered} entries written before the journal registry "
            "(gc --include-unregistered collects them)"
        )
    packed = doc.get("packed")
    if packed and packed["torn_segments"]:
        click.echo(
            f"cache: {packed['torn_segments']} packed segment(s) ended in a torn write"
            f" ({packed['torn_bytes']} bytes no entry used: a writer was killed); dropped"
        )
    batches = doc.get("batches")
    if batches and batches["removed"]:
        verb = "would remove" if doc["dry_run"] else "removed"
        click.echo(
            f"cache: {verb} {len(batches['removed'])} record(s) of collected LLM batches"
            " no kept run references"
        )
    verb = "would free" if doc["dry_run"] else "freed"
    kinds: dict[str, int] = {}
    for row in doc["removed"]:
        kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
    what = ", ".join(f"{n} {k.replace('_', ' ')}(s)" for k, n in sorted(kinds.items()))
    click.echo(
        f"cache {doc['root']}: {verb} {doc['freed']} bytes"
        f" ({what or 'nothing removed'}); {doc['size_before']} -> {doc['size_after']} bytes"
    )
