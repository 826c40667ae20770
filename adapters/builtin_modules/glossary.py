"""`builtin.glossary`: one corpus glossary from a terms step and a definitions step.

Extract counts the mentions of every consumed term in each chunk of the corpus, so an
entry's "Seen in" list covers documents where the term was mentioned but too rarely to
be one of that document's own terms. The matchers are built once per lane (one n-gram
table lookup and one compiled trie of the code-like keys), so the cost of a chunk does
not grow with the number of terms. Normalize joins terms, definitions and mentions;
`outputs` renders the entries as `glossary.md`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from runjournal.adapters.builtin_modules.definitions import (
    consumed_step,
    field_of,
    pattern_rank,
    require_step,
    term_entries,
)
from runjournal.adapters.builtin_modules.markup import chunk_sentences, syntax_of
from runjournal.adapters.builtin_modules.terms import TermKind
from runjournal.adapters.builtin_modules.text import (
    STOPWORDS,
    BuiltinParamError,
    bool_param,
    clean_inline,
    int_param,
    ngram_counts,
    str_param,
    term_key,
    unknown_param_warnings,
    valid_output_name,
)
from runjournal.domain.lazy_pattern import LazyPattern
from runjournal.domain.modules import Chunk, Module, Normalized, OutputFile, StageContext

__all__ = [
    "DefinedAt",
    "DocumentMentions",
    "Glossary",
    "GlossaryChunk",
    "GlossaryCounts",
    "GlossaryEntry",
    "GlossaryModule",
    "TermKeys",
    "render_markdown",
]

_NAME = "builtin.glossary"
_PARAMS = (
    "terms_step",
    "definitions_step",
    "output",
    "title",
    "min_documents",
    "max_entries",
    "include_undefined",
)
_NO_DEFINITION = "_No definition found in the corpus._"


class GlossaryChunk(msgspec.Struct, frozen=True):
    """Mentions of each consumed term key in one chunk."""

    source: str
    counts: dict[str, int]


class TermKeys(msgspec.Struct, frozen=True):
    """What the extract reads of one lane of the terms step: its sorted term keys."""

    keys: list[str]


class GlossaryCounts(msgspec.Struct, frozen=True):
    """Every source of the lane, and term key -> source -> mentions."""

    sources: list[str]
    mentions: dict[str, dict[str, int]]


class DefinedAt(msgspec.Struct, frozen=True):
    """Where the chosen definition is: a source and its section (nearest heading)."""

    source: str
    section: str | None = None


class DocumentMentions(msgspec.Struct, frozen=True):
    source: str
    count: int


class GlossaryEntry(msgspec.Struct, frozen=True):
    """A glossary entry; `definition` is markdown, or None when none was found."""

    term: str
    key: str
    kind: TermKind | None
    definition: str | None
    defined_at: DefinedAt | None
    documents: list[DocumentMentions]
    count: int


class Glossary(msgspec.Struct, frozen=True):
    sources: list[str]
    entries: list[GlossaryEntry]


_TOKEN_KEY = LazyPattern(r"[^\W\d_]\w*(?:-\w+)*(?: [^\W\d_]\w*(?:-\w+)*)*")


def _counted_by_ngrams(key: str) -> bool:
    """Whether `ngram_counts` produces this key (plain words, no stopword at either end)."""
    words = key.split(" ")
    return (
        bool(_TOKEN_KEY.fullmatch(key))
        and len(words) <= 6
        and words[0] not in STOPWORDS
        and words[-1] not in STOPWORDS
        and len(words[0]) >= 2
        and len(words[-1]) >= 2
    )


_WORD_CHAR = LazyPattern(r"\w")
_LONG_KEY = 200  # longer keys get a pattern of their own, so the trie stays shallow


class LiteralCounter:
    r"""Counts mentions of code-like keys (`os.replace`) with patterns compiled once.

    The same as counting each key with `(?<![\w.])KEY(?!\w)` and `findall`, but in
    one pass: a trie of the keys finds the longest key at each position, and the keys
    that are prefixes of it (ending at a non-word character) match there too.
    """

    def __init__(self, keys: list[str]) -> None:
        self.keys = sorted(set(keys))
        short = [k for k in self.keys if len(k) <= _LONG_KEY]
        self._long = [
            (k, re.compile(r"(?<![\w.])" + re.escape(k) + r"(?!\w)"))
            for k in self.keys
            if len(k) > _LONG_KEY
        ]
        self._trie = re.compile(r"(?<![\w.])(?=(" + _trie_pattern(short) + "))") if short else None
        present = set(short)
        self._prefixes: dict[str, list[str]] = {
            key: [
                key[:n]
                for n in range(len(key) - 1, 0, -1)
                if key[:n] in present and not _WORD_CHAR.match(key[n])
            ]
            for key in short
        }

    def count(self, plain: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        if self._trie is not None:
            ends: dict[str, int] = {}
            for match in self._trie.finditer(plain):
                at = match.start()
                longest = match.group(1)
                for key in (longest, *self._prefixes[longest]):
                    if ends.get(key, 0) <= at:  # findall never counts overlapping matches
                        counts[key] = counts.get(key, 0) + 1
                        ends[key] = at + len(key)
        for key, pattern in self._long:
            found = len(pattern.findall(plain))
            if found:
                counts[key] = found
        return counts


def _trie_pattern(keys: list[str]) -> str:
    r"""One regex alternation of `keys` as a trie: longest first, each ending at `(?!\w)`."""
    root: dict[str, Any] = {}
    for key in keys:
        node = root
        for char in key:
            node = node.setdefault(char, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        parts = []
        for char in sorted(c for c in node if c):
            child = node[char]
            run = re.escape(char)
            while len(child) == 1 and "" not in child:  # a chain: one literal run
                ((char, child),) = child.items()
                run += re.escape(char)
            parts.append(run + emit(child))
        if "" in node:
            parts.append(r"(?!\w)")
        return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"

    return emit(root)


class _KeyPlan:
    """The consumed term keys, split by how a chunk counts them, matchers built once."""

    def __init__(self, keys: list[str]) -> None:
        self.by_ngram = frozenset(k for k in keys if _counted_by_ngrams(k))
        self.literal = LiteralCounter([k for k in keys if not _counted_by_ngrams(k)])
        self.max_n = max((len(k.split(" ")) for k in self.by_ngram), default=1)


def _lane_keys(artifact: Any) -> list[str]:
    """A terms lane's keys: from its artifact, or from the `TermKeys` part already taken."""
    if isinstance(artifact, TermKeys):
        return artifact.keys
    return sorted(term_entries([artifact]))


def _key_plan(lanes: Mapping[str, Any]) -> _KeyPlan:
    return _KeyPlan(sorted({k for lane in sorted(lanes) for k in _lane_keys(lanes[lane])}))


def _kind(value: Any) -> TermKind | None:
    if isinstance(value, TermKind):
        return value
    try:
        return TermKind(value)
    except ValueError:
        return None


_KIND_ORDER = list(TermKind)


def _term_facts(
    ctx: StageContext, step: str
) -> tuple[dict[str, str], dict[str, TermKind | None], dict[str, dict[str, int]]]:
    """Display text, strongest kind and per-lane counts of every term key."""
    best: dict[str, tuple[int, str]] = {}
    kinds: dict[str, TermKind | None] = {}
    lane_counts: dict[str, dict[str, int]] = {}
    lanes = ctx.consumed.get(step, {})
    for lane in sorted(lanes):
        artifact = lanes[lane]
        for item in artifact if isinstance(artifact, list) else []:
            entries = term_entries([[item]])
            if not entries:
                continue
            key, text = next(iter(entries.items()))
            count = field_of(item, "count") if not isinstance(item, str) else None
            count = count if isinstance(count, int) and not isinstance(count, bool) else 0
            if key not in best or count > best[key][0]:
                best[key] = (count, text)
            kind = _kind(field_of(item, "kind")) if not isinstance(item, str) else None
            previous = kinds.get(key)
            if previous is None or (
                kind is not None and _KIND_ORDER.index(kind) < _KIND_ORDER.index(previous)
            ):
                kinds[key] = kind
            per_lane = lane_counts.setdefault(key, {})
            per_lane[lane] = per_lane.get(lane, 0) + count
    return {k: text for k, (_, text) in best.items()}, kinds, lane_counts


def _definitions(ctx: StageContext, step: str | None, keys: Mapping[str, str]) -> dict[str, Any]:
    """The best definition of each key: the most trusted kind, then lanes in name order."""
    chosen: dict[str, Any] = {}
    lanes = ctx.consumed.get(step, {}) if step is not None else {}
    for lane in sorted(lanes):
        artifact = lanes[lane]
        for item in artifact if isinstance(artifact, list) else []:
            key = field_of(item, "key")
            if not isinstance(key, str) or not key:
                term = field_of(item, "term")
                key = term_key(term) if isinstance(term, str) else ""
            if key not in keys:
                continue
            if key not in chosen or pattern_rank(field_of(item, "pattern")) < pattern_rank(
                field_of(chosen[key], "pattern")
            ):
                chosen[key] = item
    return chosen


def _defined_at(item: Any) -> DefinedAt | None:
    source, section = field_of(item, "source"), field_of(item, "section")
    if isinstance(source, str):
        return DefinedAt(source, section if isinstance(section, str) else None)
    return None


def _definition_text(item: Any) -> str | None:
    for name in ("markdown", "text", "definition"):
        value = field_of(item, name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _output_name(ctx: StageContext) -> str:
    name = str_param(ctx.params, "output", "glossary.md", module=_NAME)
    if not valid_output_name(name):
        raise BuiltinParamError(
            f"{_NAME}: params.output {name!r} is not a logical file name "
            "(`/`-separated [A-Za-z0-9._-] components, no leading dot)"
        )
    return name


class GlossaryModule(Module):
    """A corpus glossary: terms, their best definition, and where they are mentioned."""

    name = _NAME
    fingerprint = "builtin.glossary/2"
    artifact_kind = "glossary"
    schema = "runjournal.builtin.glossary/v2"
    media_type = "application/json"
    chunk_type = GlossaryChunk
    merged_type = GlossaryCounts
    artifact_type = Glossary
    override_keys = ()  # reads no --set key
    llm_stages = ()  # never calls a model
    known_params = _PARAMS
    strict_params = True  # an unknown param is an error before the run
    merge_streams = True  # merge reads its parts once, in order (docs/modules.md)

    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> list[str]:
        for name in ("terms_step", "definitions_step"):
            if name in params:
                str_param(params, name, name, module=_NAME)
        str_param(params, "title", "Glossary", module=_NAME)
        int_param(params, "min_documents", 1, module=_NAME, minimum=1)
        int_param(params, "max_entries", 0, module=_NAME, minimum=0)
        bool_param(params, "include_undefined", True, module=_NAME)
        name = str_param(params, "output", "glossary.md", module=_NAME)
        if not valid_output_name(name):
            return [f"{_NAME}: params.output {name!r} is not a logical file name"]
        return []

    def __init__(self) -> None:
        # Every chunk of the corpus lane sees the same consumed terms: plan once per lane.
        self._plan: tuple[object, _KeyPlan] | None = None

    def _plan_for(self, lanes: Mapping[str, Any]) -> _KeyPlan:
        cached = self._plan
        if cached is not None and cached[0] is lanes:
            return cached[1]
        plan = _key_plan(lanes)
        self._plan = (lanes, plan)
        return plan

    def reads(self, stage: str, ctx: StageContext) -> dict[str, dict[str, Any]] | None:
        """Extract reads the term keys only, merge no consumed artifact, normalize all.

        So a document whose term counts or definitions changed, but not its term keys,
        keeps every extract of the corpus lane (docs/modules.md "Declaring what a stage
        reads").
        """
        if stage == "merge":
            return {}
        if stage != "extract":
            return None
        step = require_step(ctx, "terms_step", "terms", module=_NAME)
        lanes = ctx.consumed.get(step, {})
        return {step: {lane: TermKeys(_lane_keys(lanes[lane])) for lane in lanes}}

    def extract(self, chunk: Chunk, ctx: StageContext) -> GlossaryChunk:
        step = require_step(ctx, "terms_step", "terms", module=_NAME)
        plan = self._plan_for(ctx.consumed.get(step, {}))
        counts: dict[str, int] = {}
        sentences = chunk_sentences(chunk.text, syntax_of(chunk.source, chunk.text), headings=True)
        if plan.by_ngram:
            table = ngram_counts(sentences, max_n=plan.max_n)
            counts = {k: n for k, n in table.items() if k in plan.by_ngram}
        if plan.literal.keys:
            plain = " ".join(clean_inline(s).casefold() for s in sentences)
            counts.update(plan.literal.count(plain))
        return GlossaryChunk(source=chunk.source, counts=dict(sorted(counts.items())))

    def merge(self, parts: Iterable[GlossaryChunk], ctx: StageContext) -> GlossaryCounts:
        sources: list[str] = []
        mentions: dict[str, dict[str, int]] = {}
        for part in parts:
            if part.source not in sources:
                sources.append(part.source)
            for key, count in part.counts.items():
                per_source = mentions.setdefault(key, {})
                per_source[part.source] = per_source.get(part.source, 0) + count
        return GlossaryCounts(sources=sorted(sources), mentions=mentions)

    def normalize(self, merged: GlossaryCounts, ctx: StageContext) -> Normalized:
        _output_name(ctx)
        str_param(ctx.params, "title", "Glossary", module=_NAME)
        min_documents = int_param(ctx.params, "min_documents", 1, module=_NAME, minimum=1)
        max_entries = int_param(ctx.params, "max_entries", 0, module=_NAME, minimum=0)
        include_undefined = bool_param(ctx.params, "include_undefined", True, module=_NAME)
        terms_step = require_step(ctx, "terms_step", "terms", module=_NAME)
        definitions_step = consumed_step(
            ctx, "definitions_step", "definitions", module=_NAME, exclude=(terms_step,)
        )
        texts, kinds, lane_counts = _term_facts(ctx, terms_step)
        definitions = _definitions(ctx, definitions_step, texts)

        entries: list[GlossaryEntry] = []
        for key, text in texts.items():
            per_source = dict(lane_counts.get(key, {}))
            per_source.update(merged.mentions.get(key, {}))
            documents = [
                DocumentMentions(source, count)
                for source, count in sorted(per_source.items())
                if count > 0
            ]
            definition = definitions.get(key)
            entries.append(
                GlossaryEntry(
                    term=text,
                    key=key,
                    kind=kinds.get(key),
                    definition=_definition_text(definition) if definition is not None else None,
                    defined_at=_defined_at(definition) if definition is not None else None,
                    documents=documents,
                    count=sum(d.count for d in documents),
                )
            )
        entries = [e for e in entries if len(e.documents) >= min_documents]
        if not include_undefined:
            entries = [e for e in entries if e.definition is not None]
        if max_entries:
            entries.sort(key=lambda e: (-e.count, e.key))
            entries = entries[:max_entries]
        entries.sort(key=lambda e: (e.term.casefold(), e.term, e.key))

        warnings = unknown_param_warnings(ctx.params, _PARAMS, module=_NAME)
        undefined = [e.term for e in entries if e.definition is None]
        if undefined:
            shown = ", ".join(undefined[:10])
            more = f" and {len(undefined) - 10} more" if len(undefined) > 10 else ""
            warnings.append(f"{len(undefined)} glossary term(s) have no definition: {shown}{more}")
        if not entries:
            warnings.append("the glossary is empty: no consumed terms")
        return Normalized(Glossary(sources=merged.sources, entries=entries), warnings)

    def outputs(self, artifact: Glossary, ctx: StageContext) -> list[OutputFile]:
        title = str_param(ctx.params, "title", "Glossary", module=_NAME)
        data = render_markdown(artifact, title=title).encode("utf-8")
        return [OutputFile(name=_output_name(ctx), data=data)]


_MD_SPECIAL = LazyPattern(r"([\\`*_\[\]<>|#])")


def _heading_text(entry: GlossaryEntry) -> str:
    if entry.kind is TermKind.CODE:
        fence = "``" if "`" in entry.term else "`"
        return f"{fence}{entry.term}{fence}"
    text = entry.term
    if text[:1].islower() and entry.kind is not TermKind.DEFINED:  # the author's spelling
        text = text[:1].upper() + text[1:]
    return _escape(text)


def _escape(text: str) -> str:
    return _MD_SPECIAL.sub(r"\\\1", text)


def _letter(term: str) -> str:
    """The index letter of a term: its first letter without accents, or `Other`."""
    for char in unicodedata.normalize("NFKD", term):
        if char.isalnum():
            upper = char.upper()
            return upper if "A" <= upper <= "Z" else "Other"
    return "Other"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def render_markdown(glossary: Glossary, *, title: str = "Glossary") -> str:
    """A readable markdown glossary: summary, letter index, one section per letter."""
    entries = glossary.entries
    defined = sum(1 for e in entries if e.definition is not None)
    lines = [f"# {title}", ""]
    lines.append(
        f"{_plural(len(entries), 'term')} from {_plural(len(glossary.sources), 'document')}; "
        f"{defined} with a definition."
    )
    groups: dict[str, list[GlossaryEntry]] = {}
    for entry in entries:
        groups.setdefault(_letter(entry.term), []).append(entry)
    letters = sorted(groups, key=lambda g: (g == "Other", g))
    if letters:
        lines += ["", " · ".join(f"[{g}](#{g.lower()})" for g in letters)]
    for letter in letters:
        lines += ["", f"## {letter}"]
        for entry in groups[letter]:
            lines += ["", f"### {_heading_text(entry)}", ""]
            if entry.definition is not None:
                lines.append(f"> {entry.definition}")
            else:
                lines.append(_NO_DEFINITION)
            lines.append("")
            if entry.defined_at is not None:
                at = entry.defined_at
                where = f" \u00a7 {_escape(at.section)}" if at.section else ""
                lines.append(f"- **Defined in:** `{at.source}`{where}")
            seen = ", ".join(f"`{d.source}` ({d.count})" for d in entry.documents)
            lines.append(
                f"- **Seen in:** {seen or 'no document'} \u2014 {_plural(entry.count, 'mention')}"
            )
    return "\n".join(lines) + "\n"
