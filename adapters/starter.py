"""The starter pipeline `runjournal init DIR` writes: small, offline, and runnable as is."""

from __future__ import annotations

PIPELINE = """\
# A starter runjournal pipeline: run it with `runjournal run pipeline.toml`,
# then `runjournal run pipeline.toml --resume` and `runjournal explain latest`.
name = "starter"
description = "Candidate terms, their definitions, and a glossary of a few notes."
inputs = ["docs/*.md"]
# Your own module classes (plugins/your_module.py:YourClass) need no `fingerprint`:
# runjournal derives it from the class's code, so editing it recomputes its results.
plugin_fingerprint = "source"

[chunking]
strategy = "paragraphs"
max_chars = 1200

[[steps]]
id = "terms"
module = "builtin.terms"
scope = "document"
params = { min_count = 2 }

[[steps]]
id = "definitions"
module = "builtin.definitions"
scope = "document"
consumes = ["terms"]

[[steps]]
id = "glossary"
module = "builtin.glossary"
scope = "corpus"
consumes = ["terms", "definitions"]
params = { title = "Starter glossary" }
"""

NOTES = """\
# Notes on resumable work

A **checkpoint** is a saved stage result that a later run may reuse. Every
**checkpoint** records the facts it was computed from, so a changed input is noticed.

A **journal** is an append-only record of everything a run decided. The **journal**
answers the question of why a stage was reused or run again.
"""

MORE = """\
# More notes

A **lane** is one document's path through a step. Each **lane** runs its stages in order,
and a **checkpoint** of each stage lets the next run skip it.

The **journal** keeps one event per decision.
"""


def _toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def starter_pipeline(settings: dict[str, str] | None = None) -> str:
    """The starter pipeline, with a `[runjournal]` table when `settings` are given."""
    if not settings:
        return PIPELINE
    lines = [
        "# Written by `runjournal init` from its options (docs/configuration.md).",
        "[runjournal]",
    ]
    lines += [f"{key} = {_toml_string(value)}" for key, value in settings.items()]
    table = "\n".join(lines) + "\n\n"
    head, sep, rest = PIPELINE.partition("[chunking]")
    return head + table + sep + rest


STARTER_FILES: dict[str, str] = {
    "pipeline.toml": PIPELINE,
    "docs/notes.md": NOTES,
    "docs/more.md": MORE,
}
