"""How much of a run one small edit re-executes, with the built-in glossary pipeline.

Generates DOCS markdown documents in a temp dir (a heading, a defining sentence, and
paragraphs mentioning shared and per-document terms), runs the built-in pipeline
(terms, definitions, headings, glossary) cold, then applies one edit to one document
at a time and resumes after each. For every edit it prints what `run --json` reports:
executed stages (`module_calls`) over all decided stages, and the steps they were in
(from `explain --json`). Nothing here is typed in; every figure is measured.

    python bench/bench_edit_locality.py [--docs 500] [--paras 4]

Target (issue "built-ins that scale and cut off early"): a one-paragraph edit in one of
500 documents re-executes <= 2% of the run's stages.

Edits, each in a different document:
- `one-space`: one space doubled inside a paragraph;
- `reworded-paragraph`: one paragraph's filler sentence rewritten, term mentions kept;
- `new-term-mention`: one paragraph gains a mention of a shared term (the document's
  term counts change, so its terms artifact changes).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

SCRIPT = Path(sys.executable).parent / "runjournal"
PIPELINE = """name = "edit-locality"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 400
[[steps]]
id = "terms"
module = "builtin.terms"
[[steps]]
id = "definitions"
module = "builtin.definitions"
consumes = ["terms"]
[[steps]]
id = "headings"
module = "builtin.headings"
[[steps]]
id = "glossary"
module = "builtin.glossary"
scope = "corpus"
consumes = ["terms", "definitions"]
"""
SHARED = ["checkpoint store", "event journal", "stage decision", "chunk plan", "cutoff rule"]
VERBS = ["meet", "align", "differ", "agree", "change", "settle", "connect", "diverge"]
ENDS = ["follows", "waits", "rests", "returns", "ends", "pauses", "starts", "turns"]
# Filler words are used at most once per document, so they never repeat into a term.
_FILLER_TEXT = """
    amber basin cedar dune ember fjord grove harbor island jungle kettle lagoon meadow
    nectar orchard pebble quarry ridge summit thicket upland valley willow yarrow zephyr
    acorn bramble canyon delta estuary fern glacier heath inlet juniper knoll ledge marsh
    nettle oasis prairie quill reef spruce tundra umber vale wharf yew alder birch clover
    dale elm furrow gorse hollow iris jasper kelp lichen moss
"""
FILLER = _FILLER_TEXT.split()


def make_corpus(root: Path, docs: int, paras: int) -> None:
    rng = random.Random(11)
    (root / "docs").mkdir(parents=True)
    for d in range(docs):
        own = f"widget{d:04} frame"
        shared = rng.sample(SHARED, 2)
        words = rng.sample(FILLER, 10 * paras)
        lines = [
            f"# Notes {d}",
            "",
            f"A **{own}** is the part of document {d} that holds its **{shared[0]}**.",
        ]
        for p in range(paras):
            lines += [
                "",
                f"The {own} and the {shared[p % 2]} {VERBS[p % len(VERBS)]} here. "
                f"{' '.join(words[10 * p : 10 * p + 10]).capitalize()}. "
                f"Then the {shared[1]} {ENDS[p % len(ENDS)]}.",
            ]
        (root / "docs" / f"d{d:04}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "pipeline.toml").write_text(PIPELINE, encoding="utf-8")


def cli(root: Path, *args: str) -> tuple[dict, float, float]:
    """Run the console script; (its --json document, wall seconds, cpu seconds)."""
    before = os.times()
    start = time.perf_counter()
    proc = subprocess.run(
        [str(SCRIPT), *args, "--json"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    after = os.times()
    if proc.returncode != 0:
        raise SystemExit(f"runjournal {' '.join(args)} failed: {proc.stderr.strip()}")
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return json.loads(proc.stdout), wall, cpu


ROOTS = ("--output-root", "out", "--cache-root", "cache")


def executed_by_step(root: Path) -> Counter:
    doc, _, _ = cli(root, "explain", "latest", "--output-root", "out")
    out: Counter = Counter()
    for step in doc["steps"]:
        for lane in step["lanes"]:
            for decision in lane["decisions"]:
                if decision["code"] not in ("reused", "predecessor_reused"):
                    out[(step["step"], decision["code"])] += 1
    return out


def edit(path: Path, kind: str) -> None:
    text = path.read_text(encoding="utf-8")
    paragraphs = text.split("\n\n")
    target = paragraphs[2]
    if kind == "one-space":
        new = target.replace(" here", "  here", 1)
    elif kind == "reworded-paragraph":
        sentences = target.split(". ")
        sentences[1] = "Someone rewrote this sentence completely without naming anything new"
        new = ". ".join(sentences)
    else:  # one more mention of a term of this document
        term = re.search(r"that holds its \*\*([a-z ]+)\*\*", text).group(1)
        new = target + f" Another {term} appears."
    assert new != target
    paragraphs[2] = new
    path.write_text("\n\n".join(paragraphs), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--paras", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_corpus(root, args.docs, args.paras)
        doc, wall, cpu = cli(root, "run", "pipeline.toml", *ROOTS)
        total = sum(doc["decisions"].values())
        print(f"corpus: {args.docs} documents x {args.paras + 1} paragraphs, {total} stages")
        print(
            f"cold run: {doc['module_calls']}/{total} executed, {wall:.1f} s wall, {cpu:.1f} s cpu"
        )
        docs = sorted((root / "docs").glob("*.md"))
        kinds = ("one-space", "reworded-paragraph", "new-term-mention")
        for n, kind in enumerate(kinds):
            edit(docs[(n + 1) * len(docs) // 4], kind)
            doc, wall, cpu = cli(root, "run", "pipeline.toml", *ROOTS, "--resume")
            total = sum(doc["decisions"].values())
            executed = doc["module_calls"]
            steps = executed_by_step(root)
            where = ", ".join(f"{s} {c} {k}" for (s, c), k in sorted(steps.items()))
            verdict = "meets" if executed <= 0.02 * total else "misses"
            print(
                f"{kind:<20} {executed:>6}/{total} executed = {executed / total:7.2%} "
                f"({verdict} <= 2%), resume {wall:.1f} s wall, {cpu:.1f} s cpu"
            )
            print(f"{'':<20} {where}")


if __name__ == "__main__":
    main()
