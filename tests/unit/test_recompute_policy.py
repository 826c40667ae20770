"""Selective recomputation policy: forced steps and required predecessors (docs/operations.md)."""

from __future__ import annotations

import pytest
from runjournal.domain.recompute import UnknownStepError, plan_recompute


def policy(order, consumes, selected):
    return plan_recompute(order, consumes, selected)


def test_chain():
    p = policy(["a", "b", "c"], {"b": ["a"], "c": ["b"]}, ["b"])
    assert p.forced == ("b", "c") and p.required == ("a",)


def test_diamond():
    p = policy(["a", "b", "c", "d"], {"b": ["a"], "c": ["a"], "d": ["b", "c"]}, ["b"])
    assert p.forced == ("b", "d") and p.required == ("a", "c")


def test_fan_out():
    p = policy(["a", "b", "c", "d"], {"b": ["a"], "c": ["a"], "d": ["a"]}, ["a"])
    assert p.forced == ("a", "b", "c", "d") and p.required == ()


def test_several_selected():
    p = policy(["a", "b", "c", "d"], {"b": ["a"], "d": ["c"]}, ["d", "b", "b"])
    assert p.selected == ("b", "d") and p.forced == ("b", "d") and p.required == ("a", "c")


def test_leaf_and_first_step():
    order, consumes = ["a", "b", "c"], {"b": ["a"], "c": ["b"]}
    assert policy(order, consumes, ["c"]).required == ("a", "b")
    assert policy(order, consumes, ["a"]).forced == ("a", "b", "c")


def test_no_selection_is_inactive():
    p = policy(["a"], {}, [])
    assert not p.active and p.forced == () and p.required == ()


def test_unknown_step():
    with pytest.raises(UnknownStepError, match="nope"):
        policy(["a"], {}, ["nope"])
