"""The built-ins on real reStructuredText and markdown: markup is markup, not terms.

Excerpts, verbatim:
- reST from the Sphinx 7.3.7 documentation (BSD-2-Clause, Copyright 2007-2024 by the
  Sphinx team; the pages are in examples/real-docs/docs with the licence beside them);
- reST from the Jinja 3.1.4 documentation, docs/templates.rst (BSD-3-Clause,
  Copyright 2007 Pallets);
- MyST markdown from the attrs 23.2.0 documentation, docs/glossary.md, docs/init.md and
  README.md (MIT, Copyright 2015 Hynek Schlawack and the attrs contributors).
Each test drives extract, merge and normalize through the canonical codec as the
runner does, over the chunks of a paragraph chunk plan.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.adapters.builtin_modules.definitions import Definition, DefinitionsModule
from runjournal.adapters.builtin_modules.glossary import (
    Glossary,
    GlossaryModule,
    LiteralCounter,
)
from runjournal.adapters.builtin_modules.headings import HeadingsModule
from runjournal.adapters.builtin_modules.markup import (
    BlockKind,
    Syntax,
    blocks,
    chunk_sentences,
    syntax_of,
)
from runjournal.adapters.builtin_modules.terms import Term, TermKind, TermsModule
from runjournal.adapters.builtin_modules.text import STOPWORDS, usable_term_key
from runjournal.domain.chunking import ChunkingSettings, plan_chunks
from runjournal.domain.modules import Chunk, Module, StageContext

# --- a tiny runner -----------------------------------------------------------------


def chunks_of(source: str, text: str, max_chars: int = 1200) -> list[Chunk]:
    """The chunks the runner's own paragraph planner cuts."""
    data = text.encode()
    out = []
    for span in plan_chunks(data, ChunkingSettings(max_chars=max_chars)):
        piece = data[span.start : span.end]
        chunk_id = hashlib.sha256(source.encode() + b"\0" + piece).hexdigest()
        digest = hashlib.sha256(piece).hexdigest()
        out.append(Chunk(chunk_id, source, span.start, span.end, piece.decode(), digest))
    return out


def canonical(value: Any) -> bytes:
    return msgspec.json.encode(value, order="deterministic")


def round_trip(value: Any, declared: Any) -> Any:
    return msgspec.json.decode(canonical(value), type=declared)


def run_lane(module: Module, chunks: list[Chunk], ctx: StageContext) -> Any:
    parts = [round_trip(module.extract(c, ctx), module.chunk_type) for c in chunks]
    merged = round_trip(module.merge(parts, ctx), module.merged_type)
    return round_trip(module.normalize(merged, ctx).value, module.artifact_type)


def terms_of(source: str, text: str, max_chars: int = 1200, **params: Any) -> list[Term]:
    ctx = StageContext(step="terms", lane=source, params=params)
    return run_lane(TermsModule(), chunks_of(source, text, max_chars), ctx)


def definitions_of(source: str, text: str, max_chars: int = 1200) -> list[Definition]:
    terms = terms_of(source, text, max_chars)
    ctx = StageContext(step="definitions", lane=source, consumed={"terms": {source: terms}})
    return run_lane(DefinitionsModule(), chunks_of(source, text, max_chars), ctx)


def glossary_of(docs: dict[str, str], max_chars: int = 1200) -> Glossary:
    terms = {s: terms_of(s, t, max_chars) for s, t in docs.items()}
    definitions = {}
    for source, text in docs.items():
        ctx = StageContext(step="d", lane=source, consumed={"terms": {source: terms[source]}})
        definitions[source] = run_lane(DefinitionsModule(), chunks_of(source, text), ctx)
    chunks = [c for s in sorted(docs) for c in chunks_of(s, docs[s], max_chars)]
    ctx = StageContext(
        step="glossary", lane="corpus", consumed={"terms": terms, "definitions": definitions}
    )
    return run_lane(GlossaryModule(), chunks, ctx)


def keys(terms: list[Term]) -> set[str]:
    return {t.key for t in terms}


# Role names of the corpus that are not also words its authors use as terms.
ROLE_NAMES = {"func", "meth", "ref", "dfn", "duref", "dudir", "durole", "confval", "rst:dir"}


def markup_only_role_names(docs: dict[str, str]) -> set[str]:
    """Role names used as `:name:` markup and never written as a word anywhere else."""
    used = set()
    for text in docs.values():
        used |= {n.rsplit(":", 1)[-1] for n in re.findall(r":((?:[\w-]+:)?[\w-]+):`", text)}
    rest = re.sub(r":(?:[\w-]+:)?[\w-]+:`", " ", " ".join(docs.values()))
    return {n for n in used if not re.search(rf"(?<![\w:-]){re.escape(n)}(?![\w:-])", rest)}


def assert_no_markup_terms(terms: list[Term]) -> None:
    for term in terms:
        assert usable_term_key(term.key), term
        assert term.key not in STOPWORDS and len(term.key) >= 2, term
        assert not re.search(r"(^|\s):?[\w-]+:`|`|^\.\.|::|\{\w+\}", term.text), term


# --- reStructuredText --------------------------------------------------------------

# usage/quickstart.rst (Sphinx): roles, `dfn`, a sidebar, code blocks, a literal block.
QUICKSTART = """\
Let's assume you've run :program:`sphinx-quickstart`.  It created a source
directory with :file:`conf.py` and a root document, :file:`index.rst`.  The
main function of the :term:`root document` is to serve as a welcome page, and
to contain the root of the "table of contents tree" (or *toctree*).  This is one
of the main things that Sphinx adds to reStructuredText, a way to connect
multiple files to a single hierarchy of documents.

.. sidebar:: reStructuredText directives

   ``toctree`` is a reStructuredText :dfn:`directive`, a very versatile piece
   of markup.  Directives can have arguments, options and content.

   *Arguments* are given directly after the double colon following the
   directive's name.  Each directive decides whether it can have arguments, and
   how many.

.. todo:: Move this whole section into a guide on rST or directives

Documenting objects
-------------------

One of Sphinx's main objectives is easy documentation of :dfn:`objects` (in a
very general sense) in any :dfn:`domain`.  A domain is a collection of object
types that belong together, complete with markup to create and reference
descriptions of these objects.

The most prominent domain is the Python domain. For example, to document
Python's built-in function ``enumerate()``, you would add this to one of your
source files.

.. code-block:: rst

   .. py:function:: enumerate(sequence[, start=0])

      Return an iterator that yields tuples of an index and an item of the
      *sequence*. (And so on.)

This is rendered like this:

.. py:function:: enumerate(sequence[, start=0])

   Return an iterator that yields tuples of an index and an item of the
   *sequence*. (And so on.)

The argument of the directive is the :dfn:`signature` of the object you
describe, the content is the documentation for it.  Multiple signatures can be
given, each in its own line.

There are several more directives for documenting other types of Python
objects, for example :rst:dir:`py:class` or :rst:dir:`py:method`.  There is
also a cross-referencing :dfn:`role` for each of these object types.  This
markup will create a link to the documentation of ``enumerate()``.

::

   The :py:func:`enumerate` function can be used for ...

And here is the proof: A link to :func:`enumerate`.
"""


def test_rest_roles_become_code_or_terms_and_role_names_never_terms() -> None:
    sentences = chunk_sentences(QUICKSTART, Syntax.REST)
    text = " ".join(sentences)
    assert ":program:" not in text and ":term:" not in text and ":dfn:" not in text
    assert "`sphinx-quickstart`" in text and "`conf.py`" in text  # code roles: code
    assert "**root document**" in text  # :term: marks a term
    assert "And here is the proof: A link to `enumerate`." in sentences
    terms = terms_of("usage/quickstart.rst", QUICKSTART, min_count=1)
    found = {t.key: t for t in terms}
    assert not keys(terms) & ROLE_NAMES
    assert_no_markup_terms(terms)
    assert found["root document"].kind is TermKind.EMPHASIS
    assert found["enumerate"].kind is TermKind.CODE
    for defined in ("directive", "object", "domain", "signature", "role"):
        assert found[defined].kind is TermKind.DEFINED, defined


def test_rest_dfn_defines_and_directives_are_never_definitions() -> None:
    definitions = {d.key: d for d in definitions_of("usage/quickstart.rst", QUICKSTART)}
    assert definitions["signature"].pattern == "dfn"
    assert definitions["signature"].text.startswith("The argument of the directive is the")
    assert definitions["signature"].section == "Documenting objects"
    assert definitions["directive"].markdown.startswith(
        "`toctree` is a reStructuredText <dfn>directive</dfn>"
    )
    for definition in definitions.values():
        assert not definition.markdown.startswith(".."), definition
        assert "::" not in definition.markdown, definition
        assert not re.search(r":\w+:`", definition.markdown), definition


def test_rest_code_blocks_literal_blocks_and_directive_lines_are_not_prose() -> None:
    text = " ".join(chunk_sentences(QUICKSTART, Syntax.REST))
    assert "py:function::" not in text and "enumerate(sequence" not in text
    assert "can be used for" not in text  # the `::` literal block
    assert "Move this whole section" in text  # a todo's argument is prose
    assert "Directives can have arguments, options and content." in text  # sidebar body
    # a description directive's body is prose, its signature is not
    assert text.count("Return an iterator that yields tuples") == 1
    assert "This is rendered like this:" in text  # `like this::` -> `like this:`


# usage/restructuredtext/basics.rst (Sphinx): targets, an overlined title, a
# hyperlink in an admonition, roles with explicit titles, a literal block.
BASICS = """\
.. highlight:: rst

.. _rst-primer:

=======================
reStructuredText Primer
=======================

reStructuredText is the default plaintext markup language used by Sphinx.  This
section is a brief introduction to reStructuredText (reST) concepts and syntax,
intended to provide authors with enough information to author documents
productively.  Since reST was designed to be a simple, unobtrusive markup
language, this will not take too long.

.. seealso::

   The authoritative `reStructuredText User Documentation
   <https://docutils.sourceforge.io/rst.html>`_.  The "ref" links in this
   document link to the description of the individual constructs in the reST
   reference.


Paragraphs
----------

The paragraph (:duref:`ref <paragraphs>`) is the most basic block in a reST
document.  Paragraphs are simply chunks of text separated by one or more blank
lines.  As in Python, indentation is significant in reST, so all lines of the
same paragraph must be left-aligned to the same level of indentation.


.. _rst-inline-markup:

Inline markup
-------------

The standard reST inline markup is quite simple: use

* one asterisk: ``*text*`` for emphasis (italics),
* two asterisks: ``**text**`` for strong emphasis (boldface), and
* backquotes: ````text```` for code samples.

It is also possible to replace or expand upon some of this inline markup with
roles. Refer to :ref:`rst-roles-alt` for more information.
"""


def test_rest_link_targets_titles_and_hyperlinks() -> None:
    found = blocks(BASICS, Syntax.REST)
    headings = [b.text for b in found if b.kind is BlockKind.HEADING]
    assert headings == ["reStructuredText Primer", "Paragraphs", "Inline markup"]
    text = " ".join(chunk_sentences(BASICS, Syntax.REST))
    assert "_rst-primer" not in text and "rst-inline-markup" not in text
    assert "rst-roles-alt" not in text and "highlight" not in text
    assert "[reStructuredText User Documentation](https://docutils.sourceforge.io/rst.html)" in text
    assert "The paragraph (ref) is the most basic block" in text
    assert "for strong emphasis" in text  # list items stay prose
    assert "`` ``text`` `` for code samples" in text
    terms = terms_of("usage/restructuredtext/basics.rst", BASICS, min_count=1)
    assert_no_markup_terms(terms)
    assert not keys(terms) & (ROLE_NAMES | {"seealso", "highlight", "rst-primer"})
    outline = run_lane(
        HeadingsModule(),
        chunks_of("basics.rst", BASICS),
        StageContext(step="h", lane="basics.rst"),
    )
    assert [(h.level, h.text) for h in outline] == [
        (1, "reStructuredText Primer"),
        (2, "Paragraphs"),
        (2, "Inline markup"),
    ]
    data = BASICS.encode()
    for heading in outline:
        assert data[heading.offset :].split(b"\n", 1)[0].decode() == heading.text


# glossary.rst (Sphinx): a `.. glossary::` block.
GLOSSARY = """\
.. _glossary:

Glossary
========

.. glossary::

   builder
      A class (inheriting from :class:`~sphinx.builders.Builder`) that takes
      parsed documents and performs an action on them.  Normally, builders
      translate the documents to an output format, but it is also possible to
      use builders that e.g. check for broken links in the documentation, or
      build coverage information.

      See :doc:`/usage/builders/index` for an overview over Sphinx's built-in
      builders.

   configuration directory
      The directory containing :file:`conf.py`.  By default, this is the same as
      the :term:`source directory`, but can be set differently with the **-c**
      command-line option.

   directive
      A reStructuredText markup element that allows marking a block of content
      with special meaning.  Directives are supplied not only by docutils, but
      Sphinx and custom extensions can add their own.  The basic directive
      syntax looks like this:

      .. sourcecode:: rst

         .. directivename:: argument ...
            :option: value

            Content of the directive.

      See :ref:`rst-directives` for more information.

   master document
      The document that contains the root :rst:dir:`toctree` directive.

   root document
      Same as :term:`master document`.

   source directory
      The directory which, including its subdirectories, contains all source
      files for one Sphinx project.
"""


@pytest.mark.parametrize("max_chars", [400, 1200, 100_000])
def test_rest_glossary_blocks_are_definitions_however_chunked(max_chars: int) -> None:
    """Cut into small chunks, most entries sit in chunks without the directive line."""
    assert (len(chunks_of("glossary.rst", GLOSSARY, max_chars)) > 3) is (max_chars == 400)
    definitions = {d.key: d for d in definitions_of("glossary.rst", GLOSSARY, max_chars)}
    assert set(definitions) == {
        "builder",
        "configuration directory",
        "directive",
        "master document",
        "root document",
        "source directory",
    }
    assert all(d.section == "Glossary" for d in definitions.values())
    # entries in a chunk that does not hold the `.. glossary::` line read as a
    # definition list: still definitions, one rank less trusted
    patterns = {d.pattern for d in definitions.values()}
    assert (
        patterns == {"glossary"}
        if max_chars == 100_000
        else patterns
        <= {
            "glossary",
            "definition_list",
        }
    )
    assert definitions["builder"].pattern == ("definition_list" if max_chars == 400 else "glossary")
    assert definitions["builder"].markdown == (
        "A class (inheriting from `Builder`) that takes parsed documents and performs an "
        "action on them. Normally, builders translate the documents to an output format, "
        "but it is also possible to use builders that e.g. check for broken links in the "
        "documentation, or build coverage information."
    )
    assert definitions["root document"].markdown == "Same as **master document**."
    assert definitions["directive"].text.startswith("A reStructuredText markup element")
    assert "directivename" not in " ".join(d.markdown for d in definitions.values())
    terms = terms_of("glossary.rst", GLOSSARY, max_chars)
    assert_no_markup_terms(terms)
    assert {t.key for t in terms if t.kind is TermKind.DEFINED} == set(definitions)


# usage/theming.rst (Sphinx): a definition list with nested bullet lists.
THEMES = """\
These themes are:

**basic**
  This is a basically unstyled layout used as the base for the
  other themes, and usable as the base for custom themes as well.  The HTML
  contains all important elements like sidebar and relation bar.  There are
  these options (which are inherited by the other themes):

  - **nosidebar** (true or false): Don't include the sidebar.  Defaults to
    ``False``.

  - **sidebarwidth** (int or str): Width of the sidebar in pixels.
    This can be an int, which is interpreted as pixels or a valid CSS
    dimension string such as '70em' or '50%'.  Defaults to 230 pixels.

**alabaster**
  `Alabaster theme`_ is a modified "Kr" Sphinx theme from @kennethreitz
  (especially as used in his Requests project), which was itself originally
  based on @mitsuhiko's theme used for Flask & related projects.

.. _Alabaster theme: https://alabaster.readthedocs.io/
"""


def test_rest_definition_lists_are_definitions() -> None:
    definitions = {d.key: d for d in definitions_of("usage/theming.rst", THEMES)}
    assert definitions["basic"].pattern == "definition_list"
    assert definitions["basic"].text.startswith("This is a basically unstyled layout")
    assert definitions["alabaster"].markdown.startswith(
        'Alabaster theme is a modified "Kr" Sphinx theme'
    )
    assert "alabaster.readthedocs.io" not in " ".join(
        chunk_sentences(THEMES, Syntax.REST, headings=True)
    )


# docs/templates.rst (Jinja): operators defined in a definition list of code terms.
JINJA_LOGIC = """\
Logic
~~~~~

For ``if`` statements, ``for`` filtering, and ``if`` expressions, it can be useful to
combine multiple expressions:

``and``
    Return true if the left and the right operand are true.

``or``
    Return true if the left or the right operand are true.

``not``
    negate a statement (see below).

``(expr)``
    Parentheses group an expression.

.. admonition:: Note

    The ``is`` and ``in`` operators support negation using an infix notation,
    too: ``foo is not bar`` and ``foo not in bar`` instead of ``not foo is bar``
    and ``not foo in bar``.  All other expressions require a prefix notation:
    ``not (foo and bar).``
"""


def test_stopwords_and_single_letters_are_never_terms() -> None:
    text = JINJA_LOGIC + "\nThe ``A`` and ``C`` columns, and ``x`` or ``s``, are not terms.\n"
    terms = terms_of("templates.rst", text, min_count=1)
    assert_no_markup_terms(terms)
    assert not keys(terms) & {"and", "or", "not", "if", "for", "is", "in", "a", "c", "x", "s"}
    assert not [d for d in definitions_of("templates.rst", text) if d.key in STOPWORDS]
    # C++ and C# keep their one letter
    assert usable_term_key("c++") and usable_term_key("c#") and not usable_term_key("c")


# --- markdown (MyST) ---------------------------------------------------------------

# docs/glossary.md (attrs): a MyST glossary with roles, links and a footnote reference.
ATTRS_GLOSSARY = """\
# Glossary

:::{glossary}
dunder methods
  "Dunder" is a contraction of "double underscore".

  It's methods like `__init__` or `__eq__` that are sometimes also called *magic methods* or it's said that they implement an *object protocol*.

  In spoken form, you'd call `__init__` just "dunder init".

  Its first documented use is a [mailing list posting](https://mail.python.org/pipermail/python-list/2002-September/155836.html) by Mark Jackson from 2002.

dict classes
  A regular class whose attributes are stored in the {attr}`object.__dict__` attribute of every single instance.
  This is quite wasteful especially for objects with very few data attributes and the space consumption can become significant when creating large numbers of instances.

  This is the type of class you get by default both with and without *attrs* (except with the next APIs {func}`attrs.define()`, [`attrs.mutable()`](attrs.mutable), and [`attrs.frozen()`](attrs.frozen)).

slotted classes
  A class whose instances have no {attr}`object.__dict__` attribute and [define](https://docs.python.org/3/reference/datamodel.html#slots) their attributes in a `object.__slots__` attribute instead.
  In *attrs*, they are created by passing `slots=True` to `@attr.s` (and are on by default in {func}`attrs.define()`, [`attrs.mutable()`](attrs.mutable), and [`attrs.frozen()`](attrs.frozen)).

  Their main advantage is that they use less memory on CPython[^pypy] and are slightly faster.

  - Slotted classes don't allow for any other attribute to be set except for those defined in one of the class' hierarchies `__slots__`:

    ```{doctest}
    >>> from attr import define
    >>> @define
    ... class Coordinates:
    ...     x: int
    ...     y: int
    ...
    >>> c = Coordinates(x=1, y=2)
    >>> c.z = 3
    Traceback (most recent call last):
        ...
    AttributeError: 'Coordinates' object has no attribute 'z'
    ```
:::

[^pypy]: On PyPy, there is no memory advantage in using slotted classes.
"""  # noqa: E501 - verbatim


@pytest.mark.parametrize("max_chars", [300, 1200, 100_000])
def test_myst_glossary_roles_links_and_code_fences(max_chars: int) -> None:
    definitions = {d.key: d for d in definitions_of("glossary.md", ATTRS_GLOSSARY, max_chars)}
    assert {"dunder method", "dict class", "slotted class"} <= set(definitions)
    assert definitions["dunder method"].pattern == "glossary"
    assert definitions["dunder method"].text == '"Dunder" is a contraction of "double underscore".'
    assert definitions["dict class"].markdown.startswith(
        "A regular class whose attributes are stored in the `object.__dict__` attribute"
    )
    text = " ".join(chunk_sentences(ATTRS_GLOSSARY, Syntax.MARKDOWN))
    assert "{attr}" not in text and "{func}" not in text and "[^pypy]" not in text
    assert ">>>" not in text and "Coordinates" not in text  # the doctest fence
    assert "mailing list posting" in text
    assert "On PyPy, there is no memory advantage" in text  # a footnote is prose
    terms = terms_of("glossary.md", ATTRS_GLOSSARY, max_chars, min_count=1)
    assert_no_markup_terms(terms)
    found = {t.key: t for t in terms}
    assert found["attrs.define"].kind is TermKind.CODE
    assert not keys(terms) & {"attr", "func", "https", "doctest", "glossary", "python-list"}


# README.md and docs/init.md (attrs): HTML blocks, comments, MyST targets, admonitions.
ATTRS_README = """\
<p align="center">
   <a href="https://www.attrs.org/">
      <picture>
         <img src="https://raw.githubusercontent.com/python-attrs/attrs/main/docs/_static/attrs_logo.svg" width="35%" alt="attrs" />
      </picture>
   </a>
</p>

<!-- teaser-begin -->

*attrs* is the Python package that will bring back the **joy** of **writing classes** by relieving you from the drudgery of implementing object protocols (aka [dunder methods](https://www.attrs.org/en/latest/glossary.html#term-dunder-methods)).

(private-attributes)=

## Private Attributes and Aliases

:::{warning}
Please note that the decorator based defaults have one gotcha:
they are executed when the attribute is set, that means depending on the order of attributes, the `self` object may not be fully initialized when they're called.
:::
"""  # noqa: E501 - verbatim


def test_markdown_html_comments_targets_and_admonitions() -> None:
    found = blocks(ATTRS_README, syntax_of("README.md", ATTRS_README))
    text = " ".join(chunk_sentences(ATTRS_README, Syntax.MARKDOWN, headings=True))
    assert "<p" not in text and "picture" not in text and "teaser" not in text
    assert "(private-attributes)=" not in text
    assert "bring back the **joy**" in text
    assert "decorator based defaults have one gotcha" in text  # admonition body
    assert [b.text for b in found if b.kind is BlockKind.HEADING] == [
        "Private Attributes and Aliases"
    ]
    terms = terms_of("README.md", ATTRS_README, min_count=1)
    assert_no_markup_terms(terms)
    assert not keys(terms) & {"https", "www", "center", "warning", "teaser-begin"}


def test_markdown_definition_list_and_code_span_stopwords() -> None:
    """Pandoc/MyST `term` / `: definition` lists (constructed: no such list above)."""
    text = (
        "Operators\n\n`and`\n: true if both operands are true.\n\n"
        "early cutoff\n: A re-executed stage whose output is unchanged lets the next stage "
        "reuse its result.\n"
    )
    definitions = {d.key: d for d in definitions_of("ops.md", text)}
    assert set(definitions) == {"early cutoff"}
    assert definitions["early cutoff"].pattern == "definition_list"
    assert definitions["early cutoff"].text.startswith("A re-executed stage")


def test_syntax_follows_the_name_then_the_text() -> None:
    assert syntax_of("a.rst", "# x") is Syntax.REST
    assert syntax_of("a.md", ".. note::") is Syntax.MARKDOWN
    assert syntax_of("a.txt", "Title\n~~~~~\n\nSee :ref:`x`.") is Syntax.REST
    assert syntax_of("a.txt", "# Title\n\nSee [x](y).\n\nSub\n---\n") is Syntax.MARKDOWN


def test_real_docs_glossary_in_process() -> None:
    """The whole reST corpus through all three modules: the quality rules hold."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "examples" / "real-docs"
    docs = {
        str(p.relative_to(root)): p.read_text(encoding="utf-8")
        for p in sorted((root / "docs").rglob("*.rst"))
    }
    assert 20 <= len(docs) <= 60
    glossary = glossary_of(docs)
    by_key = {e.key: e for e in glossary.entries}
    markup_roles = markup_only_role_names(docs)
    assert {"dudir", "duref", "confval"} <= markup_roles
    for entry in glossary.entries:
        assert usable_term_key(entry.key) and entry.key not in markup_roles, entry.term
        assert not re.search(r":[\w-]+:`|^\.\. |::$", entry.term), entry.term
    defined = {k: e for k, e in by_key.items() if e.definition is not None}
    for key in ("builder", "directive", "role", "domain", "source directory", "root document"):
        assert defined[key].defined_at is not None
        assert defined[key].defined_at.source == "docs/glossary.rst", key
    assert defined["alabaster"].definition.startswith("Alabaster theme is a modified")


# --- position independence and the compiled matchers -------------------------------


def test_artifacts_do_not_change_when_an_edit_moves_text() -> None:
    """A one-space edit or an inserted paragraph leaves terms and definitions unchanged."""
    source = "glossary.rst"
    edited_space = GLOSSARY.replace("performs an action", "performs  an action")
    edited_para = GLOSSARY.replace(
        "Glossary\n========\n", "Glossary\n========\n\nThe entries below are sorted.\n"
    )
    assert len(chunks_of(source, GLOSSARY, 300)) > 2
    for max_chars in (300, 1200):
        terms = canonical(terms_of(source, GLOSSARY, max_chars))
        definitions = canonical(definitions_of(source, GLOSSARY, max_chars))
        for edited in (edited_space, edited_para):
            assert canonical(terms_of(source, edited, max_chars)) == terms
            assert canonical(definitions_of(source, edited, max_chars)) == definitions


def _findall_counts(plain: str, keys: list[str]) -> dict[str, int]:
    """The old way: one pattern per key (compiled per call) and findall."""
    counts = {}
    for key in keys:
        found = len(re.findall(r"(?<![\w.])" + re.escape(key) + r"(?![\w])", plain))
        if found:
            counts[key] = found
    return counts


_KEY_ALPHABET = st.sampled_from(list("ab.-_(): "))


@settings(max_examples=300, deadline=None)
@given(
    keys=st.lists(st.text(_KEY_ALPHABET, min_size=1, max_size=6), min_size=1, max_size=8),
    plain=st.text(st.sampled_from(list("ab.-_(): x")), max_size=60),
)
def test_literal_counter_counts_like_one_findall_per_key(keys: list[str], plain: str) -> None:
    keys = sorted({k.strip() for k in keys if k.strip()})
    if keys:
        assert LiteralCounter(keys).count(plain) == _findall_counts(plain, keys)


def test_glossary_extract_compiles_no_pattern_per_chunk(monkeypatch) -> None:
    """Past 512 keys the old per-key `re` calls thrashed the pattern cache."""
    terms = [Term(f"cfg_{i}.opt", f"cfg_{i}.opt", 2, TermKind.CODE) for i in range(600)]
    terms += [Term(f"word{i} thing", f"word{i} thing", 2, TermKind.BIGRAM) for i in range(600)]
    text = "".join(
        f"Set `cfg_{i}.opt` for the word{i} thing, see :confval:`cfg_{i + 1}.opt`.\n\n"
        for i in range(300)
    )
    chunks = chunks_of("conf.rst", text, 400)
    assert len(chunks) > 20
    ctx = StageContext(step="g", lane="corpus", consumed={"terms": {"conf.rst": terms}})
    module = GlossaryModule()
    module.extract(chunks[0], ctx)  # builds the lane's matchers once
    calls = []
    real = re._compile

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(re, "_compile", counting)
    parts = [module.extract(chunk, ctx) for chunk in chunks]
    assert calls == []
    counts: dict[str, int] = {}
    for part in parts:
        for key, n in part.counts.items():
            counts[key] = counts.get(key, 0) + n
    assert counts["cfg_7.opt"] == 2 and counts["word7 thing"] == 1
    assert counts["cfg_300.opt"] == 1 and "cfg_301.opt" not in counts
