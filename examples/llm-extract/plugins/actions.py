"""Example plugin: action items from meeting notes, with a small model filling two fields.

Rules do what rules do well: they find the attendees of each meeting, the action-item
lines, their due dates and priorities. The model answers only what needs reading: who
owns the item and what it is about, as a reply constrained by a JSON Schema whose
`owner` is one of that meeting's attendees and whose `area` is one of a few areas. A
135M-parameter model does that well; a larger one only better.

Three modules, loaded by path from the pipeline:
- `Attendees` (document): the names on each meeting's `Attendees:` line;
- `ActionItems` (document, consumes attendees): one LLM call per action item;
- `ActionBoard` (corpus, consumes actions): `action-items.md`, grouped by owner.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from runjournal.domain.modules import (
    CallOptions,
    Chunk,
    Module,
    Normalized,
    OutputFile,
    StageContext,
)

AREAS = ("engineering", "customers", "finance", "hiring", "events", "operations")
UNASSIGNED = "unassigned"

_ATTENDEES = re.compile(r"^\s*\**Attendees:?\**:?\s*(?P<names>.+)$", re.MULTILINE | re.IGNORECASE)
_ITEM = re.compile(r"^\s*[-*]\s+\[[ xX]\]\s+(?P<text>.+?)\s*$", re.MULTILINE)
_DUE = re.compile(r"\b(?:by|before)\s+(?P<due>[^;,.()]+?)\s*(?=[;,.(]|$)")
_HIGH = re.compile(r"\b(urgent|blocked|blocking|asap|costs us)\b", re.IGNORECASE)
_LOW = re.compile(r"\bno rush\b", re.IGNORECASE)

SYSTEM = (
    "For this action item from meeting notes: owner is the person named in it; "
    "area is what it is about."
)


class Fields(msgspec.Struct, frozen=True):
    """What the model fills in for one action item."""

    owner: str
    area: str


class ActionItem(msgspec.Struct, frozen=True):
    text: str
    owner: str
    area: str
    due: str | None
    priority: str
    source: str


def _schema(attendees: list[str]) -> dict[str, Any]:
    """The reply's JSON Schema: an owner among the attendees, one of the areas."""
    return {
        "type": "object",
        "properties": {
            "owner": {"enum": [*attendees, UNASSIGNED]},
            "area": {"enum": list(AREAS)},
        },
        "required": ["owner", "area"],
    }


def _priority(text: str) -> str:
    if _HIGH.search(text):
        return "high"
    if _LOW.search(text):
        return "low"
    return "normal"


def _due(text: str) -> str | None:
    found = _DUE.search(text)
    return found.group("due").strip() if found else None


class Attendees(Module):
    """The names on a meeting's `Attendees:` line, in the order written."""

    name = "example.attendees"
    fingerprint = "example.attendees/1"
    artifact_kind = "attendees"
    schema = "example.attendees/v1"
    media_type = "application/json"
    chunk_type = list[str]
    merged_type = list[str]
    artifact_type = list[str]

    def extract(self, chunk: Chunk, ctx: StageContext) -> list[str]:
        names: list[str] = []
        for line in _ATTENDEES.finditer(chunk.text):
            names.extend(n.strip(" .*") for n in re.split(r",|\band\b", line.group("names")))
        return [n for n in names if n]

    def merge(self, parts: list[list[str]], ctx: StageContext) -> list[str]:
        return list(dict.fromkeys(name for part in parts for name in part))

    def normalize(self, merged: list[str], ctx: StageContext) -> Normalized:
        warnings = [] if merged else [f"{ctx.lane}: no 'Attendees:' line"]
        return Normalized(merged, warnings)


class ActionItems(Module):
    """Action items (`- [ ] ...` lines): rules for due date and priority, the model for the rest."""

    name = "example.action-items"
    fingerprint = "example.action-items/1"
    artifact_kind = "action-items"
    schema = "example.action-items/v1"
    media_type = "application/json"
    chunk_type = list[ActionItem]
    merged_type = list[ActionItem]
    artifact_type = list[ActionItem]

    def extract(self, chunk: Chunk, ctx: StageContext) -> list[ActionItem]:
        lines = [m.group("text") for m in _ITEM.finditer(chunk.text)]
        if not lines:
            return []  # no call at all for chunks without action items
        attendees = ctx.consumed.get("attendees", {}).get(ctx.lane, [])
        schema = _schema(list(attendees))
        items = []
        for text in lines:
            fields = ctx.llm.ask(
                text,
                Fields,
                system=SYSTEM,
                options=CallOptions(max_tokens=48),
                schema=schema,
            )
            items.append(
                ActionItem(
                    text=text,
                    owner=fields.owner,
                    area=fields.area,
                    due=_due(text),
                    priority=_priority(text),
                    source=chunk.source,
                )
            )
        return items

    def merge(self, parts: list[list[ActionItem]], ctx: StageContext) -> list[ActionItem]:
        return [item for part in parts for item in part]

    def normalize(self, merged: list[ActionItem], ctx: StageContext) -> Normalized:
        loose = sum(1 for item in merged if item.owner == UNASSIGNED)
        warnings = [f"{ctx.lane}: {loose} action item(s) without an owner"] if loose else []
        return Normalized(merged, warnings)


class Board(msgspec.Struct, frozen=True):
    owners: dict[str, list[ActionItem]]


class ActionBoard(Module):
    """Every meeting's action items, grouped by owner, rendered to markdown."""

    name = "example.action-board"
    fingerprint = "example.action-board/1"
    artifact_kind = "action-board"
    schema = "example.action-board/v1"
    media_type = "application/json"
    chunk_type = int
    merged_type = int
    artifact_type = Board

    def extract(self, chunk: Chunk, ctx: StageContext) -> int:
        return 1  # the board is built from the consumed items, not from the text

    def merge(self, parts: list[int], ctx: StageContext) -> int:
        return sum(parts)

    def normalize(self, merged: int, ctx: StageContext) -> Normalized:
        owners: dict[str, list[ActionItem]] = {}
        for lane in sorted(ctx.consumed.get("actions", {})):
            for item in ctx.consumed["actions"][lane]:
                owners.setdefault(item.owner, []).append(item)
        order = {"high": 0, "normal": 1, "low": 2}
        board = {
            owner: sorted(items, key=lambda i: (order.get(i.priority, 1), i.source, i.text))
            for owner, items in sorted(owners.items())
        }
        return Normalized(Board(owners=board))

    def outputs(self, artifact: Board, ctx: StageContext) -> list[OutputFile]:
        name = ctx.params.get("output", "action-items.md")
        total = sum(len(items) for items in artifact.owners.values())
        lines = ["# Action items", "", f"{total} items from the meeting notes, by owner.", ""]
        for owner, items in artifact.owners.items():
            lines += [f"## {owner}", ""]
            for item in items:
                due = f", due {item.due}" if item.due else ""
                lines.append(
                    f"- **{item.priority}** [{item.area}{due}] {item.text} ({item.source})"
                )
            lines.append("")
        return [OutputFile(name, "\n".join(lines).encode("utf-8"))]
