"""Finding credential-shaped spans in text, and replacing them with markers.

Short texts first pick their candidate shapes by their needles (looked for one by one
in a process's first few hundred scans, then with one pass of a needle alternation,
built then); long texts run every shape's own literal-prefixed scan. Nothing is
compiled at import.
"""

from __future__ import annotations

import functools
import itertools
import re

from runjournal.domain.redaction.known import KNOWN_NAME, known_spans
from runjournal.domain.redaction.shapes import SHAPES, Shape
from runjournal.domain.redaction.views import View

# Annotations only (never evaluated): importing `typing` would cost start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Final

_ALL_SHAPES: Final = tuple(range(len(SHAPES)))
# Below this length one regex pass picks the candidate shapes; above it, running every
# shape's own literal-prefixed scan is cheaper than the alternation.
_SHORT: Final = 2048
# Every shape that needs no `:`, `=` or `-` matches at least this many characters (the
# shortest is `bearer ` with an 8-character token; command lines have a `-`), so
# shorter texts without any of them are plain.
_MIN_SEPARATORLESS: Final = 15
_SEPARATORS: Final = (":", "=", "-")
_MAX_PASSES: Final = 8
# Short texts scanned with `in` per needle before the needle alternations are compiled:
# about what compiling them costs, in scans (docs/performance.md "Start-up").
_SCANS_BEFORE_INDEX: Final = 256
_short_scans = itertools.count()  # `next` on it is atomic: scans from any thread


def _needle_owners(
    needles_of: Callable[[Shape], tuple[str, ...]],
) -> dict[str, frozenset[int]]:
    """Each needle and the shapes it selects."""
    owners: dict[str, set[int]] = {}
    for i, shape in enumerate(SHAPES):
        for needle in needles_of(shape):
            owners.setdefault(needle, set()).add(i)
    return {needle: frozenset(shapes) for needle, shapes in owners.items()}


def _needle_index(
    owners: dict[str, frozenset[int]],
) -> tuple[re.Pattern[str], dict[str, frozenset[int]]]:
    """One alternation over all needles, and the candidate shapes each hit implies.

    The alternation sits in a lookahead, so `findall` reports the longest needle at
    every position, overlapping hits included; a hit also selects the shapes of the
    needles it starts with (found at the same position, but not reported). So the
    shapes chosen are those of every needle that occurs, as `_by_needles` finds them.
    """
    # A needle implies the shapes of every needle it starts with: its own prefixes, looked
    # up (one lookup per prefix length, not one comparison per pair of needles).
    implied = {
        a: frozenset(i for k in range(1, len(a) + 1) for i in owners.get(a[:k], ())) for a in owners
    }
    return re.compile("(?=(" + _trie_pattern(list(owners)) + "))"), implied


def _trie_pattern(words: list[str]) -> str:
    """An alternation factored by common prefixes, so `re` tries one branch per position.

    Optional tails are greedy: at any position the longest needle wins.
    """
    if "" in words:
        rest = [w for w in words if w]
        return f"(?:{_trie_pattern(rest)})?" if rest else ""
    by_first: dict[str, list[str]] = {}
    for word in words:
        by_first.setdefault(word[0], []).append(word[1:])
    alts = [re.escape(c) + _trie_pattern(tails) for c, tails in sorted(by_first.items())]
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


@functools.cache
def _owners() -> tuple[
    dict[str, frozenset[int]],
    dict[str, frozenset[int]],
    tuple[tuple[int, int], ...],
    tuple[int, ...],
]:
    """Needles (text, lowercase view) and their shapes, and the shapes chosen by
    length/ASCII."""
    by_length = tuple((i, s.min_length) for i, s in enumerate(SHAPES) if s.min_length is not None)
    non_ascii = tuple(i for i, s in enumerate(SHAPES) if s.non_ascii)
    return (
        _needle_owners(lambda s: s.needles),
        _needle_owners(lambda s: s.folded_needles),
        by_length,
        non_ascii,
    )


@functools.cache
def _indexes() -> tuple[
    tuple[re.Pattern[str], dict[str, frozenset[int]]],
    tuple[re.Pattern[str], dict[str, frozenset[int]]],
]:
    """The needle alternations (text, lowercase view), compiled once."""
    case, folded, _, _ = _owners()
    return _needle_index(case), _needle_index(folded)


def candidate_shapes(view: View) -> Iterable[int]:
    if len(view.text) >= _SHORT:
        return _ALL_SHAPES
    return candidate_shapes_short(view)


def candidate_shapes_short(view: View) -> list[int]:
    # The first short texts of a process look for each needle with `in`; later ones use
    # the compiled alternations. Same shapes either way (a test compares them); a command
    # that redacts a few dozen texts (a run's argv and settings) never compiles them.
    chosen = _by_needles(view) if next(_short_scans) < _SCANS_BEFORE_INDEX else _by_index(view)
    _, _, by_length, non_ascii = _owners()
    n = len(view.text)
    chosen.update(i for i, length in by_length if n >= length)
    if not view.text.isascii():
        chosen.update(non_ascii)
    return sorted(chosen)


def _by_needles(view: View) -> set[int]:
    """The shapes of every needle that occurs, each looked for with `in`."""
    case, folded, _, _ = _owners()
    text, lowered = view.text, view.lowered
    chosen = {i for needle, shapes in case.items() if needle in text for i in shapes}
    chosen.update(i for needle, shapes in folded.items() if needle in lowered for i in shapes)
    return chosen


def _by_index(view: View) -> set[int]:
    """The same shapes, from one pass of each needle alternation."""
    (case_rx, case_implied), (folded_rx, folded_implied) = _indexes()
    chosen: set[int] = set()
    for hit in case_rx.findall(view.text):
        chosen |= case_implied[hit]
    for hit in folded_rx.findall(view.lowered):
        chosen |= folded_implied[hit]
    return chosen


def find_secrets(text: str) -> list[tuple[int, int, str]]:
    """Credential-shaped spans `(start, end, shape)`, sorted and non-overlapping.

    Every shape is searched independently; overlapping spans are merged and take the
    name of the highest-priority shape among them, so the result is deterministic.
    """
    if len(text) < _MIN_SEPARATORLESS and not any(map(text.__contains__, _SEPARATORS)):
        return []
    view = View(text)
    found = [
        (start, end, prio)
        for prio in candidate_shapes(view)
        for start, end in SHAPES[prio].spans(view)
    ]
    if not found:
        return []
    found.sort()
    merged: list[list[int]] = []
    for start, end, prio in found:
        if merged and start < merged[-1][1]:
            last = merged[-1]
            last[1] = max(last[1], end)
            last[2] = min(last[2], prio)
        else:
            merged.append([start, end, prio])
    return [(s, e, SHAPES[p].name) for s, e, p in merged]


def _replace_spans(text: str, spans: list[tuple[int, int, str]]) -> str:
    parts: list[str] = []
    pos = 0
    for start, end, name in spans:
        parts.append(text[pos:start])
        parts.append(f"[REDACTED:{name}]")
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


def _with_known(spans: list[tuple[int, int, str]], text: str) -> list[tuple[int, int, str]]:
    """`spans` united with where registered secrets are (docs/internals.md "Known
    secrets"), both found in the same text: a known piece inside a shaped token must not
    break the shape and leave the token's rest. A merged span keeps its shape's name."""
    known = known_spans(text)
    if not known:
        return spans
    found = sorted([*spans, *((s, e, KNOWN_NAME) for s, e in known)])
    merged: list[tuple[int, int, str]] = []
    for start, end, name in found:
        if merged and start < merged[-1][1]:
            first, last, kept = merged[-1]
            merged[-1] = (first, max(last, end), name if kept == KNOWN_NAME else kept)
        else:
            merged.append((start, end, name))
    return merged


def redact_text(text: str) -> str:
    """Replace every registered secret with `[REDACTED:known_secret]` and every
    credential-shaped substring with `[REDACTED:<shape>]`, both found in `text` itself,
    before any caller cuts it.

    Repeats until nothing matches, so the result is a fixed point and redacting it
    again is a no-op. Returns `text` itself when nothing was found.
    """
    current = text
    for round_ in range(_MAX_PASSES):
        spans = find_secrets(current)
        if round_ == 0:
            spans = _with_known(spans, current)
        if not spans:
            return current
        current = _replace_spans(current, spans)
    # Pathological input that keeps producing new matches: hide all of it.
    return "[REDACTED:unbounded]"


def is_credential_shaped(value: str) -> bool:
    """Whether `value` holds any credential-shaped substring (enters identity as a marker)."""
    return bool(find_secrets(value))
