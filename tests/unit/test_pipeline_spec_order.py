"""domain/pipeline_spec.py: steps in any order, cycles named, did you mean for every key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
from runjournal.domain.pipeline_spec import PipelineSpecError, parse_pipeline

BASE = {"name": "p", "inputs": ["docs/*.md"]}


def _doc(steps: list[dict]) -> dict:
    return {**BASE, "steps": steps}


def _step(step_id: str, *consumes: str) -> dict:
    return {"id": step_id, "module": "builtin.terms", "consumes": list(consumes)}


def _order(steps: list[dict]) -> list[str]:
    return [s.id for s in parse_pipeline(_doc(steps), file="p.toml").steps]


@st.composite
def dags(draw):
    """A random DAG as steps listed in a random order: (listed steps, a topological order)."""
    n = draw(st.integers(min_value=1, max_value=9))
    ids = [f"s{i}" for i in range(n)]  # s_i may consume only s_j with j < i: acyclic
    consumes = {
        step: draw(st.lists(st.sampled_from(ids[:i]), unique=True)) if i else []
        for i, step in enumerate(ids)
    }
    listed = draw(st.permutations(ids))
    return [_step(s, *consumes[s]) for s in listed], consumes


@hyp_settings(max_examples=200, deadline=None)
@given(dags())
def test_any_listing_order_gives_a_dependency_order(case) -> None:
    listed, consumes = case
    order = _order(listed)
    assert sorted(order) == sorted(consumes)
    position = {step: i for i, step in enumerate(order)}
    for step, producers in consumes.items():
        assert all(position[p] < position[step] for p in producers)
    # Stable: a listing already in dependency order is kept as listed.
    assert _order([next(s for s in listed if s["id"] == step) for step in order]) == order


@hyp_settings(max_examples=100, deadline=None)
@given(dags())
def test_the_order_is_the_first_listed_ready_step_each_time(case) -> None:
    listed, _ = case
    order = _order(listed)
    remaining = list(listed)
    done: set[str] = set()
    for expected in order:
        ready = [s for s in remaining if set(s["consumes"]) <= done]
        assert ready[0]["id"] == expected
        remaining.remove(ready[0])
        done.add(expected)


def test_file_positions_are_kept_for_error_keys() -> None:
    spec = parse_pipeline(_doc([_step("b", "a"), _step("a")]), file="p.toml")
    assert [(s.id, s.index, s.key) for s in spec.steps] == [
        ("a", 1, "steps[1]"),
        ("b", 0, "steps[0]"),
    ]


@pytest.mark.parametrize(
    ("steps", "cycle"),
    [
        ([_step("a", "a")], "'a' consumes 'a'"),
        ([_step("a", "b"), _step("b", "a")], "'a' consumes 'b' consumes 'a'"),
        (
            [_step("x"), _step("a", "c"), _step("b", "a"), _step("c", "b")],
            "'a' consumes 'c' consumes 'b' consumes 'a'",
        ),
        (
            [_step("t"), _step("u", "t", "w"), _step("v", "u"), _step("w", "v")],
            "'u' consumes 'w' consumes 'v' consumes 'u'",
        ),
    ],
    ids=["self", "two", "three", "behind-a-good-producer"],
)
def test_a_cycle_is_an_error_naming_it(steps, cycle) -> None:
    with pytest.raises(PipelineSpecError) as caught:
        parse_pipeline(_doc(steps), file="p.toml")
    assert str(caught.value) == f"p.toml: steps: dependency cycle: {cycle}"


def test_an_unknown_producer_gets_a_suggestion() -> None:
    with pytest.raises(PipelineSpecError) as caught:
        parse_pipeline(_doc([_step("terms"), _step("d", "trems")]), file="p.toml")
    assert str(caught.value) == (
        "p.toml: steps[1].consumes: 'trems' is not a step; did you mean 'terms'?"
    )
    with pytest.raises(PipelineSpecError) as caught:
        parse_pipeline(_doc([_step("terms"), _step("d", "zzz")]), file="p.toml")
    assert str(caught.value) == "p.toml: steps[1].consumes: 'zzz' is not a step"


TYPOS = [
    ({"nmae": "p"}, "nmae", "name"),
    ({"descripton": ""}, "descripton", "description"),
    ({"reference": []}, "reference", "references"),
    ({"chunkin": {}}, "chunkin", "chunking"),
    ({"step": []}, "step", "steps"),
    ({"runjournl": {}}, "runjournl", "runjournal"),
    ({"chunking": {"strategie": "lines"}}, "chunking.strategie", "strategy"),
    ({"chunking": {"max_char": 5}}, "chunking.max_char", "max_chars"),
]
STEP_TYPOS = [
    ("modul", "module"),
    ("scop", "scope"),
    ("consume", "consumes"),
    ("param", "params"),
    ("profle", "profile"),
    ("validator", "validators"),
    ("ID", "id"),
]


@pytest.mark.parametrize(("extra", "key", "suggestion"), TYPOS, ids=[t[1] for t in TYPOS])
def test_top_level_and_chunking_typos(extra, key, suggestion) -> None:
    doc = {**_doc([_step("t")]), **extra}
    with pytest.raises(PipelineSpecError) as caught:
        parse_pipeline(doc, file="p.toml")
    table, _, name = key.rpartition(".")
    where = f" in {table}" if table else ""
    assert str(caught.value) == f"p.toml: unknown key '{name}'{where}; did you mean '{suggestion}'?"


@pytest.mark.parametrize(("key", "suggestion"), STEP_TYPOS, ids=[t[0] for t in STEP_TYPOS])
def test_step_key_typos(key, suggestion) -> None:
    step = {**_step("t"), key: "x"}
    with pytest.raises(PipelineSpecError) as caught:
        parse_pipeline(_doc([_step("a"), step]), file="p.toml")
    assert (
        str(caught.value)
        == f"p.toml: unknown key '{key}' in steps[1]; did you mean '{suggestion}'?"
    )


def test_an_unknown_key_like_nothing_gets_no_suggestion() -> None:
    with pytest.raises(PipelineSpecError) as caught:
        parse_pipeline({**_doc([_step("t")]), "zzzz": 1}, file="p.toml")
    assert str(caught.value) == "p.toml: unknown key 'zzzz'"


def test_a_steps_llm_mode_is_online_or_batch() -> None:
    """docs/pipeline.md "`mode`": how the step's LLM requests travel."""
    parsed = parse_pipeline(_doc([{**_step("t"), "mode": "batch"}]), file="p.toml")
    assert parsed.steps[0].mode == "batch"
    assert parse_pipeline(_doc([_step("t")]), file="p.toml").steps[0].mode is None
    with pytest.raises(PipelineSpecError) as caught:
        parse_pipeline(_doc([{**_step("t"), "mode": "later"}]), file="p.toml")
    assert str(caught.value) == "p.toml: steps[0].mode: must be 'online' or 'batch'"
