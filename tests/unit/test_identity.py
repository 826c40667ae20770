"""Identity: stable across processes and dict orderings, sensitive to every component."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.domain.identity import (
    COMPONENT_ORDER,
    DependencyFingerprint,
    LaneComponents,
    chunk_id,
    config_digest,
    dependencies_digest,
    identity_overrides,
    lane_identity,
    overrides_digest,
)

BASE = LaneComponents(*(f"{name}-1" for name in COMPONENT_ORDER))

SNIPPET = """
from runjournal.domain.identity import config_digest, lane_identity, LaneComponents
c = config_digest(module="m", params={"b": 1, "a": [1, 2], "z": {"y": 1, "x": 2}},
                  scope="document", consumes=["p"], chunking={"max_chars": 5, "strategy": "lines"})
print(c, lane_identity(LaneComponents(c, "m", "", "", "", "", ""), ["s2", "s1"]))
"""


def test_stable_across_processes_and_hash_seeds():
    outputs = set()
    for seed in ("0", "1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        proc = subprocess.run(
            [sys.executable, "-c", SNIPPET],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            timeout=60,
        )
        outputs.add(proc.stdout)
    assert len(outputs) == 1


@given(st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8), max_size=8))
@settings(max_examples=100, deadline=None)
def test_param_order_does_not_matter(params):
    reordered = dict(reversed(list(params.items())))
    common = {"module": "m", "scope": "document", "consumes": [], "chunking": {"max_chars": 1}}
    assert config_digest(params=params, **common) == config_digest(params=reordered, **common)


@pytest.mark.parametrize("component", COMPONENT_ORDER)
def test_lane_identity_is_sensitive_to_each_component(component):
    changed = LaneComponents(
        **{
            name: getattr(BASE, name) + ("x" if name == component else "")
            for name in COMPONENT_ORDER
        }
    )
    assert lane_identity(changed, ["s"]) != lane_identity(BASE, ["s"])


def test_lane_identity_sources_are_a_set_but_content_matters():
    assert lane_identity(BASE, ["a", "b"]) == lane_identity(BASE, ["b", "a"])
    assert lane_identity(BASE, ["a"]) != lane_identity(BASE, ["a", "b"])


@pytest.mark.parametrize(
    "change",
    [
        {"module": "m2"},
        {"params": {"k": 2}},
        {"scope": "corpus"},
        {"consumes": ["q"]},
        {"chunking": {"max_chars": 2}},
    ],
)
def test_config_digest_is_sensitive_to_each_setting(change):
    base = {
        "module": "m",
        "params": {"k": 1},
        "scope": "document",
        "consumes": ["p"],
        "chunking": {"max_chars": 1},
    }
    assert config_digest(**{**base, **change}) != config_digest(**base)


def test_chunk_id_depends_on_source_and_bytes_not_position():
    assert chunk_id("a.md", b"text") == chunk_id("a.md", b"text")
    assert chunk_id("a.md", b"text") != chunk_id("b.md", b"text")
    assert chunk_id("a.md", b"text") != chunk_id("a.md", b"text!")


def test_dependencies_digest_sorted_and_each_field_counts():
    d1 = DependencyFingerprint("s", "a", "k", "sch", "application/json", "0" * 64, 10)
    d2 = DependencyFingerprint("s", "b", "k", "sch", "application/json", "1" * 64, 11)
    assert dependencies_digest([d1, d2]) == dependencies_digest([d2, d1])
    assert dependencies_digest([]) == ""
    for field in ("kind", "schema", "media_type", "sha256", "size"):
        value = getattr(d1, field)
        other = DependencyFingerprint(
            **{
                **{f: getattr(d1, f) for f in d1.__struct_fields__},
                field: value + 1 if isinstance(value, int) else value + "x",
            }
        )
        assert dependencies_digest([other, d2]) != dependencies_digest([d1, d2])


def test_secret_overrides_enter_identity_as_a_marker():
    token = "gh" + "p_" + "A" * 36
    assert identity_overrides({"api_key": "one", "tone": token, "n": "3"}) == {
        "api_key": "[REDACTED]",
        "tone": "[REDACTED]",
        "n": "3",
    }
    assert overrides_digest({"api_key": "one"}) == overrides_digest({"api_key": "two"})
    assert overrides_digest({"tone": "a"}) != overrides_digest({"tone": "b"})


def test_secret_params_never_enter_the_config_digest():
    common = {"module": "m", "scope": "document", "consumes": [], "chunking": {}}
    token = "sk-" + "proj-" + "A" * 40
    a = config_digest(params={"api_key": "one", "nested": {"password": "x"}, "n": 1}, **common)
    b = config_digest(params={"api_key": "two", "nested": {"password": "y"}, "n": 1}, **common)
    assert a == b
    assert config_digest(params={"note": token}, **common) == config_digest(
        params={"note": "sk-" + "proj-" + "B" * 40}, **common
    )
    assert config_digest(params={"n": 1}, **common) != config_digest(params={"n": 2}, **common)
