"""`@chunk_step` (adapters/function_steps.py): a function of a chunk is a module with the
full contract, and `fingerprint="source"` follows its code and its prompt strings only."""

from __future__ import annotations

import pytest
from runjournal.adapters.function_steps import chunk_step, source_digest
from runjournal.domain.modules import (
    Chunk,
    Module,
    ModuleContractError,
    Normalized,
    StageContext,
    check_module_declarations,
)

PROMPT = "List the terms:"


def _chunk(text: str) -> Chunk:
    return Chunk(id="0" * 64, source="docs/a.md", start=0, end=len(text), text=text, sha256="")


@chunk_step
def terms(chunk: Chunk) -> list[str]:
    return [f"{PROMPT} {w}" for w in chunk.text.split()]


def test_a_decorated_function_is_a_module_with_the_full_contract() -> None:
    assert issubclass(terms, Module)
    module = terms()
    check_module_declarations(module)  # what the loader checks
    ctx = StageContext(step="terms", lane="docs/a.md")
    parts = [module.extract(_chunk("a b"), ctx), module.extract(_chunk("c"), ctx)]
    merged = module.merge(parts, ctx)  # lists are concatenated in chunk order
    assert merged == [f"{PROMPT} a", f"{PROMPT} b", f"{PROMPT} c"]
    assert module.normalize(merged, ctx) == Normalized(merged)
    assert terms.chunk_type == terms.merged_type == terms.artifact_type == list[str]
    assert terms.fingerprint.startswith("source:") and terms.__qualname__ == "terms"
    assert terms.function(_chunk("x")) == [f"{PROMPT} x"]  # the plain function


def test_merge_normalize_and_outputs_take_the_context_when_they_ask_for_it() -> None:
    @chunk_step(
        merge=lambda parts, ctx: sum(parts) + int(ctx.params["bonus"]),
        normalize=lambda total: Normalized(total, ["checked"]),
        outputs=lambda total, ctx: {f"{ctx.lane}.txt": str(total)},
        fingerprint="count/1",
    )
    def count(chunk: Chunk, ctx: StageContext) -> int:
        return len(chunk.text) * int(ctx.params["scale"])

    module = count()
    ctx = StageContext(step="count", lane="all", params={"scale": 2, "bonus": 1})
    total = module.merge([module.extract(_chunk("abc"), ctx)], ctx)
    assert total == 7 and module.normalize(total, ctx) == Normalized(7, ["checked"])
    [page] = module.outputs(7, ctx)
    assert (page.name, page.data) == ("all.txt", b"7")
    assert count.fingerprint == "count/1"


def _digest_of(source: str, **scope: object) -> str:
    namespace: dict[str, object] = dict(scope)
    exec(compile(source, "<step>", "exec"), namespace)
    return source_digest(namespace["step"])  # type: ignore[arg-type]


STEP = "def step(chunk):\n    return PROMPT + chunk.text\n"


def test_the_source_fingerprint_follows_code_and_prompt_strings_only() -> None:
    base = _digest_of(STEP, PROMPT="Summarise:", OTHER="x")
    assert _digest_of(STEP, PROMPT="Summarise:", OTHER="y") == base  # not read
    assert _digest_of(STEP, PROMPT="Summarise briefly:", OTHER="x") != base
    assert _digest_of(STEP.replace("+", "+ ' ' +"), PROMPT="Summarise:", OTHER="x") != base


def test_a_prompt_closed_over_enters_the_fingerprint() -> None:
    def make(prompt: str) -> type:
        @chunk_step
        def ask(chunk: Chunk) -> str:
            return prompt + chunk.text

        return ask

    assert make("a").fingerprint == make("a").fingerprint != make("b").fingerprint


def test_a_declaration_the_contract_refuses_is_still_refused() -> None:
    @chunk_step(fingerprint="")
    def empty(chunk: Chunk) -> int:
        return 0

    with pytest.raises(ModuleContractError, match="fingerprint"):
        check_module_declarations(empty())
