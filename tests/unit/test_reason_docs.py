"""docs/operations.md is the operator reference: it must agree with the code's table."""

from __future__ import annotations

import re

from runjournal.domain.decisions import DECISION_ORDER
from runjournal.domain.reasons import CATEGORY_OF, DESCRIPTIONS, ReasonCode
from support.paths import DOCS

DOC = DOCS / "operations.md"


def _doc_rows() -> list[tuple[str, str, str]]:
    text = DOC.read_text()
    block = text.split("<!-- reason-codes:begin -->")[1].split("<!-- reason-codes:end -->")[0]
    rows = []
    for line in block.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append((cells[0].strip("`"), cells[1], cells[2]))
    return rows


def test_operations_reference_matches_code_exactly():
    expected = [(c.value, CATEGORY_OF[c].value, DESCRIPTIONS[c]) for c in ReasonCode]
    assert _doc_rows() == expected


def test_decision_order_in_docs_matches_code_order():
    text = DOC.read_text()
    order_text = text.split("Decisions are taken in this order")[1].split("<!--")[0]
    named = re.findall(r"`([a-z_]+)`", order_text)
    assert named == [code.value for code in DECISION_ORDER]
