"""Markup-aware reading of markdown and reStructuredText for the built-in modules.

A chunk is read as blocks (headings, prose, definition-list items) whose text is one
small markdown dialect: code spans, `**strong**` (a marked term), `<dfn>` (the defining
use of a term), `*emphasis*`, `[links](url)` and plain words. Everything that is markup
and not prose is dropped here, in one place: reST/Sphinx roles and MyST roles become
code, terms or plain text; directives, options, comments, link targets, substitution
definitions, literal and code blocks, doctests, tables, HTML blocks, link reference
definitions and front matter are skipped; admonition and description directives keep
their prose bodies; definition lists and glossary blocks (`.. glossary::`,
`{glossary}`, `term` / `: definition`) become definition items. See docs/modules.md
"Markup the built-ins understand".

Everything is a pure function of the chunk's text and its source name, never of its
position, so a reused extract result stays right when its chunk moves (docs/modules.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from enum import Enum
from typing import NamedTuple

from runjournal.domain.lazy_pattern import LazyPattern

__all__ = [
    "Block",
    "BlockKind",
    "Syntax",
    "blocks",
    "chunk_sentences",
    "inline_markdown",
    "rest_heading_lines",
    "split_sentences",
    "syntax_of",
]


class Syntax(Enum):
    MARKDOWN = "markdown"
    REST = "rest"


class BlockKind(Enum):
    HEADING = "heading"
    PROSE = "prose"
    DEFINITION = "definition"  # a definition-list or glossary item


class Block(NamedTuple):
    """A block in the markdown dialect.

    A DEFINITION's `text` is the first paragraph of its body, `terms` the defined terms
    and `definition` that paragraph cut to whole sentences of at most 60 words.
    """

    kind: BlockKind
    text: str
    terms: tuple[str, ...] = ()
    glossary: bool = False
    definition: str = ""


_REST_SUFFIXES = (".rst", ".rest", ".rst.txt")
_MARKDOWN_SUFFIXES = (".md", ".markdown", ".mdown", ".mkd", ".mdx", ".myst")
_REST_SNIFF = LazyPattern(
    r"(?m)^[ \t]*\.\. (?:[\w:.+-]+::|_[^:\n]+:|\|[^|\n]+\|)"
    r"|(?<![\w`]):(?:[a-z]+:)?[a-z][\w-]*:`[^`\n]+`"
    r"|^([=~^\"'`+*#-])\1{3,}[ \t]*$"
)


def syntax_of(source: str, text: str) -> Syntax:
    """reST for `.rst`-like names, markdown for `.md`-like ones, else sniffed from the text."""
    name = source.casefold()
    if name.endswith(_REST_SUFFIXES):
        return Syntax.REST
    if name.endswith(_MARKDOWN_SUFFIXES):
        return Syntax.MARKDOWN
    sniff = _REST_SNIFF.search(text)
    if sniff and not (sniff.group(1) in ("-", "=") and _looks_markdown(text)):
        return Syntax.REST
    return Syntax.MARKDOWN


def _looks_markdown(text: str) -> bool:
    return bool(_MARKDOWN_SNIFF.search(text))


_MARKDOWN_SNIFF = LazyPattern(r"(?m)^ {0,3}(?:#{1,6} |```|~~~)|\]\(")


# --- sentences ---------------------------------------------------------------------

_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "Dr.", "Mr.", "Ms.", "No.", "ex.")
_SENTENCE_END = LazyPattern(r"[.!?][\"')\]*_`]*(?=\s+[\"'(\[*_`<]*[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """Sentences of one block of text (abbreviations like `e.g.` do not end one)."""
    out: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        cut = match.end()
        if text[start:cut].endswith(_ABBREVIATIONS):
            continue
        piece = text[start:cut].strip()
        if piece:
            out.append(piece)
        start = cut
    piece = text[start:].strip()
    if piece:
        out.append(piece)
    return out


def chunk_sentences(text: str, syntax: Syntax, *, headings: bool = False) -> list[str]:
    """Prose sentences of a chunk, plus heading lines and defined terms if asked."""
    out: list[str] = []
    for block in blocks(text, syntax):
        if block.kind is BlockKind.HEADING:
            if headings:
                out.append(block.text)
            continue
        if block.kind is BlockKind.DEFINITION and headings:
            out.extend(block.terms)
        out.extend(split_sentences(block.text))
    return out


def blocks(text: str, syntax: Syntax) -> list[Block]:
    """The blocks of one chunk.

    A chunk may start inside a construct opened in an earlier chunk (a chunk plan cuts
    at blank lines): leading indented reST lines, or markdown lines before a bare fence
    that closes a block, are read as prose unless they look like code.
    """
    lines = text.splitlines()
    out: list[Block] = []
    # A chunk that does not start with a blank line may start inside a paragraph (a
    # plan cuts a long paragraph at a space): its first line is never a term.
    cut = not text.startswith(("\n", "\r"))
    if cut:  # the tail of a paragraph cut from an earlier chunk: dropped if it is code
        first = next((k for k, line in enumerate(lines) if not line.strip()), len(lines))
        fragment = lines[:first]
        if first < len(lines) and _looks_like_code(fragment) and not _opens(fragment, syntax):
            lines, cut = lines[first:], False
    if syntax is Syntax.REST:
        lead = _leading_indented(lines)
        if lead:
            region = _drop_leading_code(lines[:lead])
            _rest_parse(_dedent(region), out, cut=cut and len(region) == lead)
            lines, cut = lines[lead:], False
        _rest_parse(lines, out, cut=cut)
    else:
        closer = _leading_closing_fence(lines)
        if closer is not None:
            if lines[closer].strip().startswith(":"):  # a MyST directive's body: prose
                _md_directive_tail(lines[:closer], out)
            lines = lines[closer + 1 :]
        lead = _leading_indented(lines)
        if lead:
            region = _drop_leading_code(lines[:lead])
            _md_blocks(_dedent(region), out, cut=cut and len(region) == lead)
            lines, cut = lines[lead:], False
        _md_blocks(lines, out, cut=cut and closer is None)
    return [_pseudo_heading(b) for b in out if b.text or b.terms]


_WHOLE_STRONG = LazyPattern(r"\*\*[^*]+\*\*:?")


def _pseudo_heading(block: Block) -> Block:
    """A paragraph that is one bold span (`**Example**`) is a heading, not a term."""
    if block.kind is BlockKind.PROSE and _WHOLE_STRONG.fullmatch(block.text):
        return Block(BlockKind.HEADING, block.text.strip("*:"))
    return block


def _opens(fragment: list[str], syntax: Syntax) -> bool:
    """Whether a chunk's first paragraph is markup that starts a block (a title, say)."""
    head = fragment[0].lstrip() if fragment else ""
    if syntax is Syntax.REST:
        return (
            head.startswith("..")
            or _is_adornment(fragment[0])
            or any(True for _ in rest_heading_lines(fragment))
        )
    return bool(
        _MD_HEADING.match(fragment[0])
        or _MD_FENCE.match(fragment[0])
        or _MD_HTML.match(fragment[0])
        or _MD_BULLET.match(fragment[0])
        or head.startswith(("|", ">", "---", "[", "<!--"))
    )


def _drop_leading_code(region: list[str]) -> list[str]:
    """An indented chunk start without its first block if that block is code.

    The first paragraph decides: if it reads as code, it and the lines after it that
    are indented as deep (the rest of that code block) are dropped.
    """
    first = next((k for k, line in enumerate(region) if line.strip()), 0)
    end = next((k for k in range(first, len(region)) if not region[k].strip()), len(region))
    if not _looks_like_code(region[first:end]):
        return region
    depth = min(_indent(line) for line in region[first:end] if line.strip())
    k = end
    while k < len(region) and (not region[k].strip() or _indent(region[k]) >= depth):
        k += 1
    return region[k:]


def _leading_indented(lines: list[str]) -> int:
    """How many leading lines are blank or indented (0 if the first text line is not)."""
    for i, line in enumerate(lines):
        if line.strip() and _indent(line) == 0:
            return i if any(x.strip() for x in lines[:i]) else 0
    return len(lines) if any(x.strip() for x in lines) else 0


def _md_directive_tail(lines: list[str], out: list[Block]) -> None:
    """The end of a MyST `:::` directive opened in an earlier chunk.

    `term` lines directly followed by indented lines are read as glossary items (the
    shape of a `{glossary}` body), anything else as prose.
    """
    lead = _leading_indented(lines)
    if lead:
        _md_blocks(_dedent(lines[:lead]), out)
    rest = lines[lead:]
    shaped = any(
        rest[k].strip()
        and _indent(rest[k]) == 0
        and not _MD_BULLET.match(rest[k])
        and rest[k + 1].strip()
        and _indent(rest[k + 1]) >= 2
        for k in range(len(rest) - 1)
    )
    if shaped:
        _glossary_items(rest, out, _md_blocks, md_inline)
    else:
        _md_blocks(rest, out)


_TERM_LINE = LazyPattern(r"^[^\s.,;:!?][^.;:!?]{0,79}(?<![.,;:!?])$")


def _md_glossary_shaped(line: str, nxt: str) -> bool:
    """`term` then a line indented two more: a MyST glossary item cut from its `{glossary}`."""
    s = line.strip()
    return (
        _indent(nxt) >= _indent(line) + 2
        and len(s.split()) <= 6
        and bool(_TERM_LINE.match(s))
        and not _MD_BULLET.match(nxt)
        and not _MD_FENCE.match(nxt)
        and not _MD_BULLET.match(line)
    )


def _leading_closing_fence(lines: list[str]) -> int | None:
    """The index of a bare fence that closes a block opened in an earlier chunk.

    A bare ``` or ~~~ fence closes a code block when the lines before it look like
    code; a bare `:::` closes a MyST directive (prose) when nothing opened one here.
    """
    for i, line in enumerate(lines):
        fence = _MD_FENCE.match(line)
        if fence:
            if fence.group(2).strip():
                return None
            if fence.group(1)[0] == ":":
                return i
            before = lines[:i]
            if any(_MD_HEADING.match(x) for x in before):
                return None
            return i if _looks_like_code(before, share=2) else None
    return None


_CODE_LINE = LazyPattern(
    r"^(?:>>>|\.\.\.|\$ |#|@|//|/\*|\*/|[{}\[\]()]|\.\. )"
    r"|[=;{}]|->|\(\)|\)\)|\"\"\"|[:,(\\]$|^([!-/:-@\[-`{-~])\1{2,}$"
)


def _code_line(line: str) -> bool:
    if _CODE_LINE.search(line):
        return True
    symbols = sum(1 for c in line if not c.isalnum() and not c.isspace())
    return symbols * 4 >= len(line)


_STRONG_CODE = LazyPattern(
    r"^(?:>>> |\$ |(?:async )?def \w+\s*\(|class \w+\s*[(:]|from [\w.]+ import \w|import [\w.]+$)"
)


def _looks_like_code(lines: list[str], *, share: int = 3) -> bool:
    """Whether at least 1/`share` of these lines read as code, console or markup examples.

    A prompt, a `def`/`class`/`import` line or an indented title with its underline
    (a numpydoc section inside a literal block) decides alone.
    """
    text = [line.strip() for line in lines if line.strip()]
    if not text:
        return False
    if any(_STRONG_CODE.match(line) for line in text):
        return True
    for k in range(1, len(lines)):
        if (
            _indent(lines[k]) > 0
            and lines[k - 1].strip()
            and _ADORNMENT.match(lines[k].strip())
            and not _ADORNMENT.match(lines[k - 1].strip())
        ):
            return True
    code = sum(1 for line in text if _code_line(line))
    return code * share >= len(text)


# --- shared line helpers -----------------------------------------------------------


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _dedent(lines: list[str]) -> list[str]:
    width = min((_indent(line) for line in lines if line.strip()), default=0)
    return [line[width:] if line.strip() else "" for line in lines]


def _take_indented(lines: list[str], i: int, base: int) -> tuple[list[str], int]:
    """Lines from `i` on that are blank or indented deeper than `base` (trailing blanks off)."""
    j = i
    while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > base):
        j += 1
    end = j
    while end > i and not lines[end - 1].strip():
        end -= 1
    return lines[i:end], end


def _join(lines: list[str]) -> str:
    return "\n".join(line.strip() for line in lines if line.strip())


# Directive (reST) or MyST directive names whose content is code, data or layout, not
# prose. Anything else keeps its body as prose (admonitions, description directives
# such as `confval` or `py:function`, `only`, unknown extension directives).
_CODE_DIRECTIVES_TEXT = """
    code code-block sourcecode literalinclude highlight doctest testcode testsetup
    testcleanup testoutput math graphviz digraph graph productionlist toctree include
    image figure raw csv-table list-table table parsed-literal autosummary
    inheritance-diagram index default-role role contents sectnum header footer meta
    title class tabularcolumns code-cell ipython jupyter-execute mermaid plot
    literal click:example click:run eval-rst program currentmodule module
    moduleauthor sectionauthor codeauthor py:currentmodule py:module c:namespace
    cpp:namespace cpp:namespace-push cpp:namespace-pop js:module
    """
_CODE_DIRECTIVES = frozenset(_CODE_DIRECTIVES_TEXT.split())
_ARGUMENT_PROSE_TEXT = """
    note warning tip hint important attention caution danger error seealso todo
    admonition topic sidebar rubric centered versionadded versionchanged deprecated
    deprecated-removed
    """
_ARGUMENT_PROSE = frozenset(_ARGUMENT_PROSE_TEXT.split())
_VERSION_DIRECTIVES = frozenset(
    {"versionadded", "versionchanged", "deprecated", "deprecated-removed"}
)
_OPTION_LINE = LazyPattern(r"^:[\w-][\w .-]*:(?:\s.*)?$")


def _directive_kind(name: str) -> str:
    base = name.casefold()
    if base in _CODE_DIRECTIVES or base.startswith("auto") or base.endswith(":auto"):
        return "code"
    if base == "glossary":
        return "glossary"
    return "prose"


def _split_options(body: list[str]) -> list[str]:
    """Drop a directive's leading `:option: value` lines (and MyST `---` option blocks)."""
    i = 0
    if body and body[0].strip() == "---":
        for j in range(1, len(body)):
            if body[j].strip() == "---":
                return body[j + 1 :]
    while i < len(body) and body[i].strip() and _OPTION_LINE.match(body[i].strip()):
        i += 1
        while i < len(body) and body[i].strip() and _indent(body[i]) > 0:
            i += 1
    return body[i:]


def _definition_text(first: str) -> str:
    """A definition paragraph cut to whole sentences of at most 60 words."""
    kept: list[str] = []
    words = 0
    for sentence in split_sentences(first):
        n = len(sentence.split())
        if kept and words + n > 60:
            break
        kept.append(" ".join(sentence.split()))
        words += n
    return " ".join(kept)


_CLASSIFIER = LazyPattern(r"\s+:\s+")


def _term_text(line: str, inline: Callable[[str], str]) -> str:
    return inline(_CLASSIFIER.split(line.strip(), maxsplit=1)[0])


_TERM_LIST = LazyPattern(r"\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or)\s+")


def _split_terms(text: str) -> list[str]:
    """`htmlhelp, qthelp, devhelp` or `prev and next`: several terms of one item."""
    parts = [p for p in _TERM_LIST.split(text) if p]
    if len(parts) > 1 and all(len(p.split()) <= 3 for p in parts):
        return parts
    return [text]


def _definition_item(
    terms: list[str],
    body: list[str],
    out: list[Block],
    parse: Callable[[list[str], list[Block]], None],
    inline: Callable[[str], str],
    glossary: bool,
) -> None:
    inner: list[Block] = []
    parse(_dedent(body), inner)
    texts = tuple(t for term in terms for t in _split_terms(_term_text(term, inline)) if t)
    first = next((k for k, b in enumerate(inner) if b.kind is BlockKind.PROSE and b.text), None)
    if not texts or first is None:  # nothing to define: the lines are just prose
        if texts:
            out.append(Block(BlockKind.PROSE, " ".join(texts)))
        out.extend(inner)
        return
    out.extend(inner[:first])
    paragraph = inner[first].text
    out.append(Block(BlockKind.DEFINITION, paragraph, texts, glossary, _definition_text(paragraph)))
    out.extend(inner[first + 1 :])  # the rest of the body stays prose


def _glossary_items(
    lines: list[str],
    out: list[Block],
    parse: Callable[[list[str], list[Block]], None],
    inline: Callable[[str], str],
) -> None:
    """`term` lines (one or more) each followed by an indented definition body."""
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        base = _indent(lines[i])
        terms = []
        while i < len(lines) and lines[i].strip() and _indent(lines[i]) == base:
            terms.append(lines[i])
            i += 1
        body, i = _take_indented(lines, i, base)
        if body:
            _definition_item(terms, body, out, parse, inline, glossary=True)
        else:  # a term without a body: just prose
            out.append(Block(BlockKind.PROSE, inline(_join(terms))))


# --- reStructuredText --------------------------------------------------------------

_ADORNMENT = LazyPattern(r"^([!-/:-@\[-`{-~])\1+$")
_EXPLICIT = LazyPattern(r"^\.\.(?:\s|$)")
_DIRECTIVE = LazyPattern(r"^\.\.\s+(?:\|[^|]+\|\s+)?([\w][\w:.+-]*?)::(?:\s+(.*))?$")
_REST_BULLET = LazyPattern(
    r"^(?:[-*+\u2022\u2023\u2043]|\(?(?:\d+|#|[A-Za-z]|[ivxlcdm]+|[IVXLCDM]+)[.)])(?:\s+|$)"
)
_FIELD = LazyPattern(r"^:((?:[^:\\`]|\\.)+):(?:\s+(.*))?$")
_META_FIELDS = frozenset(
    {"orphan", "nocomments", "tocdepth", "nosearch", "no-search", "meta", "tags"}
)
_GRID_TABLE = LazyPattern(r"^\+[-=+:]+\+$")
_SIMPLE_TABLE = LazyPattern(r"^=+(?:\s+=+)+$")


def _is_adornment(line: str) -> bool:
    s = line.strip()
    return len(s) >= 3 and line == line.lstrip() and bool(_ADORNMENT.match(s))


def rest_heading_lines(lines: list[str]) -> Iterator[tuple[int, str, str]]:
    """(line index, title, adornment style) of each reST section title in `lines`.

    The style is the adornment character, doubled when there is an overline; levels are
    given by the order styles first appear in the document, which only a whole document
    knows (see `builtin.headings`).
    """
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        if (
            _is_adornment(line)
            and i + 2 < n
            and lines[i + 1].strip()
            and _is_adornment(lines[i + 2])
            and lines[i + 2].strip()[0] == line.strip()[0]
            and (i == 0 or not lines[i - 1].strip())
        ):
            yield i + 1, lines[i + 1].strip(), line.strip()[0] * 2
            i += 3
            continue
        if (
            line.strip()
            and line == line.lstrip()
            and not _is_adornment(line)
            and not _EXPLICIT.match(line)
            and i + 1 < n
            and _is_adornment(lines[i + 1])
            and len(lines[i + 1].strip()) >= min(len(line.strip()), 3)
            and (i == 0 or not lines[i - 1].strip())
        ):
            yield i, line.strip(), lines[i + 1].strip()[0]
            i += 2
            continue
        i += 1


def _rest_parse(lines: list[str], out: list[Block], *, cut: bool = False) -> None:
    """reST blocks; `cut`: the first line may continue a paragraph of an earlier chunk."""
    titles = {i: (title, style) for i, title, style in rest_heading_lines(lines)}
    i = 0
    n = len(lines)
    literal_next = False  # the previous paragraph ended with `::`
    literal_base = 0
    while i < n:
        line = lines[i]
        s = line.strip()
        if not s:
            i += 1
            continue
        base = _indent(line)
        if literal_next:
            literal_next = False
            if base > literal_base:  # the indented literal block after `::`
                _, i = _take_indented(lines, i, literal_base)
                continue
            if _ADORNMENT.match(s):  # a quoted literal block: up to a blank line
                while i < n and lines[i].strip():
                    i += 1
                continue
        if i in titles:  # the title line; an overline was skipped as an adornment
            out.append(Block(BlockKind.HEADING, rest_inline(titles[i][0])))
            i += 2
            continue
        if _is_adornment(line):
            i += 1  # a transition or an overline
            continue
        if _EXPLICIT.match(s):
            i = _rest_explicit(lines, i, base, out)
            continue
        if s.startswith("__ ") or s == "__":
            _, i = _take_indented(lines, i + 1, base)
            continue
        if s.startswith(">>>"):
            while i < n and lines[i].strip():
                i += 1
            continue
        if _GRID_TABLE.match(s) or _SIMPLE_TABLE.match(s):
            i = _skip_table(lines, i)
            continue
        if s.startswith("|") and (s == "|" or s[1:2].isspace()):
            j = i
            parts = []
            while j < n and lines[j].strip().startswith("|"):
                parts.append(lines[j].strip()[1:].strip())
                j += 1
            out.append(Block(BlockKind.PROSE, rest_inline(_join(parts))))
            i = j
            continue
        bullet = _REST_BULLET.match(s)
        if bullet and not _looks_like_sentence_start(s, bullet):
            width = base + bullet.end()
            body, j = _take_indented(lines, i + 1, base)
            first = s[bullet.end() :]
            inner = [first, *[b[width:] if b.strip() else "" for b in _dedent_to(body, width)]]
            _rest_parse(inner, out)
            i = j
            continue
        field = _FIELD.match(s)
        if field and not s.startswith(":`"):
            body, j = _take_indented(lines, i + 1, base)
            name = field.group(1).strip().casefold()
            if name not in _META_FIELDS and name.split(" ")[0] not in _META_FIELDS:
                _rest_parse([field.group(2) or "", *_dedent(body)], out)
            i = j
            continue
        # a definition-list item: one line, then (no blank line) deeper-indented lines
        if (
            i + 1 < n
            and lines[i + 1].strip()
            and _indent(lines[i + 1]) > base
            and not (cut and i == 0)
        ):
            body, j = _take_indented(lines, i + 1, base)
            if s.endswith("::"):  # `Term::` then indented code is a literal block
                text = _literal_intro(s)
                if text:
                    out.append(Block(BlockKind.PROSE, rest_inline(text)))
                i = j
                continue
            _definition_item([line], body, out, _rest_parse, rest_inline, glossary=False)
            i = j
            continue
        # a paragraph: lines of the same indentation up to a blank line
        j = i
        para: list[str] = []
        while j < n and lines[j].strip() and _indent(lines[j]) == base:
            if j > i and (j in titles or _EXPLICIT.match(lines[j].strip())):
                break
            para.append(lines[j])
            j += 1
        text = _join(para)
        if text.endswith("::"):
            literal_next, literal_base = True, base
            text = _literal_intro(text)
        if text:
            out.append(Block(BlockKind.PROSE, rest_inline(text)))
        if j < n and lines[j].strip() and _indent(lines[j]) > base:
            body, j = _take_indented(lines, j, base)  # unexpected indentation: a quote
            if literal_next:
                literal_next = False
            elif not _looks_like_code(body):
                _rest_parse(_dedent(body), out)
        i = j


def _dedent_to(body: list[str], width: int) -> list[str]:
    return [
        b if not b.strip() else (" " * width + b.lstrip()) if _indent(b) < width else b
        for b in body
    ]


def _looks_like_sentence_start(s: str, bullet: re.Match[str]) -> bool:
    """`A. Smith said` or `I. e.` are not list items: a one-letter enumerator needs `.`+space."""
    marker = bullet.group().strip()
    return len(marker) == 2 and marker[0].isalpha() and marker[1] == "." and s[2:3] != " "


def _literal_intro(text: str) -> str:
    """The paragraph before a literal block: `text::` -> `text:`, `text ::` -> `text`."""
    if text == "::":
        return ""
    if text.endswith(" ::"):
        return text[:-3].rstrip()
    return text[:-1]


_EQUALS = LazyPattern(r"=+")


def _skip_table(lines: list[str], i: int) -> int:
    n = len(lines)
    if _GRID_TABLE.match(lines[i].strip()):
        while i < n and lines[i].strip():
            i += 1
        return i
    borders = 0
    while i < n:
        s = lines[i].strip()
        if _SIMPLE_TABLE.match(s) or (borders and _EQUALS.fullmatch(s)):
            borders += 1
            if borders >= 3 or (borders >= 2 and (i + 1 >= n or not lines[i + 1].strip())):
                return i + 1
        i += 1
    return i


_FIRST_WORD = LazyPattern(r"^\S+\s*")


def _rest_explicit(lines: list[str], i: int, base: int, out: list[Block]) -> int:
    """A directive, comment, target, footnote or substitution definition at line `i`."""
    s = lines[i].strip()
    body, j = _take_indented(lines, i + 1, base)
    directive = _DIRECTIVE.match(s)
    if directive is None or s.startswith(".. |"):
        return j  # comment, `.. _target:`, `.. [1]` footnote, substitution: markup
    name = directive.group(1)
    argument = (directive.group(2) or "").strip()
    kind = _directive_kind(name)
    if kind == "code":
        return j
    content = _split_options(_dedent(body))
    if kind == "glossary":
        _glossary_items(content, out, _rest_parse, rest_inline)
        return j
    key = name.casefold()
    if key in _ARGUMENT_PROSE and argument:
        if key in _VERSION_DIRECTIVES:
            argument = _FIRST_WORD.sub("", argument)  # the version is not prose
        if argument:
            kind_of = BlockKind.HEADING if key in ("rubric", "topic", "sidebar") else None
            out.append(Block(kind_of or BlockKind.PROSE, rest_inline(argument)))
    _rest_parse(content, out)
    return j


# --- markdown ----------------------------------------------------------------------

_MD_FENCE = LazyPattern(r"^ {0,3}(`{3,}|~{3,}|:{3,})\s*(.*)$")
_MD_HEADING = LazyPattern(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_MD_SETEXT = LazyPattern(r"^ {0,3}(=+|-+)[ \t]*$")
_MD_RULE = LazyPattern(r"^ {0,3}(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})$")
_MD_BULLET = LazyPattern(r"^([ \t]*)(?:[-*+]|\d{1,9}[.)])(?:[ \t]+|$)")
_MD_QUOTE = LazyPattern(r"^[ \t]{0,3}>[ \t]?")
_MD_LINK_DEF = LazyPattern(r"^ {0,3}\[(?!\^)[^\]]+\]:\s*\S")
_MD_FOOTNOTE_DEF = LazyPattern(r"^ {0,3}\[\^[^\]]+\]:\s*")
_MD_HTML = LazyPattern(r"^ {0,3}<(?:[A-Za-z/!?])")
_MD_TABLE_DELIM = LazyPattern(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)+\|?\s*$")
_MD_DEF = LazyPattern(r"^ {0,3}:[ \t]+")
_MYST_TARGET = LazyPattern(r"^\([^()\s]+\)=$")  # `(label)=` before a heading
_MYST_NAME = LazyPattern(r"^\{([\w][\w:.+-]*)\}\s*(.*)$")
_FRONT_KEY = LazyPattern(r"^[\w-]+\s*:")


def _md_fence_end(lines: list[str], i: int, fence: str) -> int:
    """Index of the closing fence of an opening `fence` at `i - 1` (len(lines) if open)."""
    char, size = fence[0], len(fence)
    for j in range(i, len(lines)):
        m = _MD_FENCE.match(lines[j])
        if m and m.group(1)[0] == char and len(m.group(1)) >= size and not m.group(2):
            return j
    return len(lines)


def _md_blocks(lines: list[str], out: list[Block], *, cut: bool = False) -> None:
    """Markdown blocks; `cut`: the first line may continue a paragraph of an earlier chunk."""
    i = 0
    n = len(lines)
    if n and lines[0].strip() == "---":  # YAML front matter: `key: value` lines
        for j in range(1, n):
            if lines[j].strip() in ("---", "..."):
                if all(_FRONT_KEY.match(x) or not x.strip() or _indent(x) for x in lines[1:j]):
                    i = j + 1
                break
    previous = ""  # "", "list" or "block": what the last block of this text was
    while i < n:
        line = lines[i]
        s = line.strip()
        if not s:
            i += 1
            continue
        fence = _MD_FENCE.match(line)
        if fence:
            end = _md_fence_end(lines, i + 1, fence.group(1))
            info = fence.group(2).strip()
            myst = _MYST_NAME.match(info)
            if myst or (fence.group(1)[0] == ":" and info):
                name = myst.group(1) if myst else info.split()[0]
                argument = myst.group(2).strip() if myst else " ".join(info.split()[1:])
                kind = _directive_kind(name)
                if kind != "code":
                    content = _split_options(lines[i + 1 : end])
                    if kind == "glossary":
                        _glossary_items(content, out, _md_blocks, md_inline)
                    else:
                        key = name.casefold()
                        if key in _ARGUMENT_PROSE and argument:
                            out.append(Block(BlockKind.PROSE, md_inline(argument)))
                        _md_blocks(_dedent(content), out)
            i = end + 1
            previous = "block"
            continue
        if _indent(line) >= 4 and previous == "block":
            _, i = _take_indented(lines, i, 3)  # an indented code block
            continue
        previous = "block"
        heading = _MD_HEADING.match(line)
        if heading:
            out.append(Block(BlockKind.HEADING, md_inline(heading.group(2) or "")))
            i += 1
            continue
        if s.startswith("<!--"):
            while i < n and "-->" not in lines[i]:
                i += 1
            i += 1
            continue
        if _MD_HTML.match(line):
            while i < n and lines[i].strip():
                i += 1
            continue
        if _MD_LINK_DEF.match(line) or _MYST_TARGET.match(s):
            i += 1
            continue
        if _MD_RULE.match(line):
            i += 1
            continue
        if s.startswith("|") or ("|" in s and i + 1 < n and _MD_TABLE_DELIM.match(lines[i + 1])):
            while i < n and lines[i].strip():
                i += 1
            continue
        quote = _MD_QUOTE.match(line)
        if quote:
            inner = []
            while i < n and lines[i].strip():
                q = _MD_QUOTE.match(lines[i])
                inner.append(lines[i][q.end() :] if q else lines[i])
                i += 1
            _md_blocks(inner, out)
            continue
        bullet = _MD_BULLET.match(line)
        if bullet:
            width = bullet.end()
            inner = [line[width:]]
            j = i + 1
            while j < n:
                nxt = lines[j]
                if not nxt.strip():
                    k = j
                    while k < n and not lines[k].strip():
                        k += 1
                    if k < n and _indent(lines[k]) >= width:
                        inner.extend([""] * (k - j))
                        j = k
                        continue
                    break
                if _indent(nxt) >= width:
                    inner.append(nxt[width:])
                elif _MD_BULLET.match(nxt) or _MD_FENCE.match(nxt) or _MD_HEADING.match(nxt):
                    break
                else:
                    inner.append(nxt.strip())  # a lazy continuation line
                j += 1
            _md_blocks(inner, out)
            i = j
            previous = "list"
            continue
        footnote = _MD_FOOTNOTE_DEF.match(line)
        if footnote:
            line = line[footnote.end() :]
            s = line.strip()
        # a paragraph, which a setext underline makes a heading and `: ` a definition term
        para = [s]
        j = i + 1
        setext = False
        while j < n and lines[j].strip():
            nxt = lines[j]
            if len(para) == 1 and not (cut and i == 0) and _md_glossary_shaped(line, nxt):
                break
            if _MD_SETEXT.match(nxt) and (nxt.strip()[0] == "=" or len(para) >= 1):
                setext = True
                j += 1
                break
            if _MD_DEF.match(nxt) or _MD_FENCE.match(nxt) or _MD_HEADING.match(nxt):
                break
            if (_MD_QUOTE.match(nxt) or _MD_RULE.match(nxt) or _MD_BULLET.match(nxt)) and not (
                _MD_BULLET.match(nxt) and _indent(nxt) >= 4
            ):
                break
            para.append(nxt.strip())
            j += 1
        if setext:
            out.append(Block(BlockKind.HEADING, md_inline(" ".join(para))))
            i = j
            continue
        term_line = not (cut and i == 0)
        if term_line and len(para) == 1 and j < n and _md_glossary_shaped(line, lines[j]):
            body, j = _take_indented(lines, j, _indent(line))  # a `{glossary}` item
            _definition_item([line], body, out, _md_blocks, md_inline, glossary=True)
            i = j
            continue
        if term_line and j < n and _MD_DEF.match(lines[j]):  # `Term` / `: def` (MyST)
            body: list[str] = []
            while j < n and lines[j].strip() and _MD_DEF.match(lines[j]):
                marker = _MD_DEF.match(lines[j])
                body.append(" " * marker.end() + lines[j][marker.end() :])
                more, j = _take_indented(lines, j + 1, 0)
                body.extend(more)
                while j < n and not lines[j].strip():
                    k = j
                    while k < n and not lines[k].strip():
                        k += 1
                    if k < n and _MD_DEF.match(lines[k]):
                        j = k
                    break
            _definition_item(para, body, out, _md_blocks, md_inline, glossary=False)
            i = j
            continue
        out.append(Block(BlockKind.PROSE, md_inline("\n".join(para))))
        i = j


# --- inline markup -----------------------------------------------------------------

# Roles whose content is code, a name or a path (shown as a code span); `term`/`dfn`
# mark terms; the reference roles below show their title only.
_CODE_ROLES_TEXT = """
    func meth class mod attr obj data exc const type member var macro struct union
    enum enumerator envvar option confval program command file samp kbd code literal
    makevar keyword token regexp mimetype event setting dir role directive cmdoption
    manpage any expr texpr concept cfunc cmember cmacro ctype rst py c cpp js
    """
_CODE_ROLES = frozenset(_CODE_ROLES_TEXT.split())
_REF_ROLES = frozenset({"ref", "doc", "numref", "download", "external", "eq", "cite"})
_PLAIN_ROLES = frozenset(
    {
        "sub",
        "sup",
        "subscript",
        "superscript",
        "guilabel",
        "menuselection",
        "title",
        "title-reference",
        "t",
        "emphasis",
        "strong",
        "index",
        "abbr",
        "pep",
        "rfc",
    }
)
_PROTECT = "\x00"
_REST_LITERAL = LazyPattern(r"(?<![`\w\\])``(.+?)``(?![`\w])", re.S)
_ROLE = LazyPattern(
    r"(?<![\w`\\])(?::((?:[A-Za-z][\w+.-]*:)*[A-Za-z][\w+.-]*):|\{([A-Za-z][\w:.+-]*)\})"
    r"`((?:[^`\\]|\\.)+?)`(?!`)"
)
_PHRASE_REF = LazyPattern(r"(?<![\w`\\])`((?:[^`\\]|\\.)+?)`(__?)?(?![\w`])", re.S)
_INLINE_TARGET = LazyPattern(r"(?<![\w`])_`([^`]+)`")
_SIMPLE_REF = LazyPattern(r"(?<![\w_/.-])([A-Za-z][\w.-]*?[A-Za-z0-9])__?(?![\w])")
_FOOTNOTE_REF = LazyPattern(r"\s?\[(?:\d+|#[\w-]*|\*|[A-Za-z][\w.-]*)\]_")
_SUBSTITUTION = LazyPattern(r"(?<![\w|])\|(?=\S)[^|\n]+(?<=\S)\|(?:__?)?(?![\w|])")
_REST_ESCAPE = LazyPattern(r"\\(.)", re.S)
_TITLE_TARGET = LazyPattern(r"^(.*?)\s*<([^<>]+)>$", re.S)
_MD_CODE = LazyPattern(r"(`+)(.+?)\1", re.S)
_MD_FOOTNOTE_REF = LazyPattern(r"\[\^[^\]\s]+\]")
_HTML_COMMENT = LazyPattern(r"<!--.*?-->", re.S)
_SPACES = LazyPattern(r"[ \t]{2,}")
_URL_TARGET = LazyPattern(r"^(?:[a-z][a-z0-9+.-]*:|www\.|/|#|mailto:)", re.I)


_PROTECTED = LazyPattern(_PROTECT + r"(\d+)" + _PROTECT)
_NAME_LIKE = LazyPattern(r"[\w.:/()~-]+")


class _Protected:
    """Code spans kept out of later substitutions, restored as markdown code spans."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def code(self, text: str) -> str:
        text = " ".join(text.split())
        if not text:
            return ""
        fence = "``" if "`" in text else "`"
        pad = " " if fence == "``" else ""
        self.items.append(f"{fence}{pad}{text}{pad}{fence}")
        return f"{_PROTECT}{len(self.items) - 1}{_PROTECT}"

    def restore(self, text: str) -> str:
        return _PROTECTED.sub(lambda m: self.items[int(m.group(1))], text)


def _role_markdown(role: str, content: str, keep: _Protected) -> str:
    """The markdown-dialect text a role stands for."""
    name = role.casefold()
    domain, _, base = name.rpartition(":")
    content = _REST_ESCAPE.sub(r"\1", content) if "\\" in content else content
    titled = _TITLE_TARGET.match(content)
    title, target = (titled.group(1), titled.group(2)) if titled else ("", content)
    title = " ".join(title.split())
    if base in ("term",):
        return f"**{title or target}**"
    if base == "dfn":
        return f"<dfn>{title or target}</dfn>"
    if base in _REF_ROLES and not domain:
        return title
    if base == "abbr":
        return content.split(" (", 1)[0]
    if base in ("pep", "rfc") and not domain:
        return title or f"{base.upper()} {target.split('#')[0]}"
    if base == "math" and not domain:
        return keep.code(content)
    if base in ("menuselection", "guilabel"):
        return content.replace("-->", ">").replace("&&", "\0").replace("&", "").replace("\0", "&")
    if base in _PLAIN_ROLES and not domain:
        return f"*{title or target}*" if base in ("emphasis", "title", "t") else title or target
    if base in _CODE_ROLES or domain:
        if title:
            return keep.code(title)
        shown = target.lstrip("!")
        if shown.startswith("~"):
            shown = shown[1:].rsplit(".", 1)[-1]
        return keep.code(shown)
    return title or target  # an unknown role (an extlink, say): its text


def rest_inline(text: str) -> str:
    """reST inline markup as the markdown dialect of `blocks`."""
    keep = _Protected()
    text = _REST_LITERAL.sub(lambda m: keep.code(m.group(1)), text)
    text = _ROLE.sub(lambda m: _role_markdown(m.group(1) or m.group(2), m.group(3), keep), text)
    text = _INLINE_TARGET.sub(r"\1", text)
    text = _PHRASE_REF.sub(lambda m: _phrase_markdown(m.group(1), m.group(2), keep), text)
    text = _FOOTNOTE_REF.sub("", text)
    text = _SUBSTITUTION.sub("", text)
    text = _SIMPLE_REF.sub(r"\1", text)
    text = text.replace("\\ ", "")
    text = _REST_ESCAPE.sub(r"\1", text)
    return keep.restore(_SPACES.sub(" ", text)).strip()


def _phrase_markdown(content: str, suffix: str | None, keep: _Protected) -> str:
    content = " ".join(content.split())
    titled = _TITLE_TARGET.match(content)
    if suffix is None:  # interpreted text (the default role): a name, usually code
        if _NAME_LIKE.fullmatch(content):
            return keep.code(content.lstrip("~"))
        return f"*{content}*"
    if titled:
        title, target = titled.group(1) or titled.group(2), titled.group(2)
        if _URL_TARGET.match(target) and not target.endswith("_"):
            return f"[{title}]({target})"
        return title
    return content


def md_inline(text: str) -> str:
    """Markdown inline markup in the dialect of `blocks`: MyST roles, footnotes, comments."""
    keep = _Protected()
    text = _HTML_COMMENT.sub("", text)
    text = _ROLE.sub(lambda m: _role_markdown(m.group(1) or m.group(2), m.group(3), keep), text)
    text = _MD_CODE.sub(lambda m: keep.code(m.group(2).strip()), text)
    text = _MD_FOOTNOTE_REF.sub("", text)
    return keep.restore(text).strip()


def inline_markdown(text: str, syntax: Syntax) -> str:
    return rest_inline(text) if syntax is Syntax.REST else md_inline(text)
