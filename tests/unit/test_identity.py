"""Identity: stable across processes and dict orderings, sensitive to every component."""

from __future__ import annotations

import datetime
import hashlib
import os
import subprocess
import sys
import uuid

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.domain import plan_keys, runner
from runjournal.domain.chunking import ChunkingSettings
from runjournal.domain.decisions import Stage
from runjournal.domain.events import ArtifactGenerated
from runjournal.domain.identity import (
    COMPONENT_ORDER,
    ArtifactRef,
    DependencyFingerprint,
    LaneComponents,
    chunk_id,
    chunk_ids,
    codec_id,
    config_digest,
    dependencies_digest,
    fingerprints_digest,
    identity_overrides,
    lane_components,
    lane_identity,
    module_digest,
    overrides_digest,
    plan_key,
    profile_digest,
    profile_source_digest,
    references_digest,
)
from runjournal.domain.ports import Provenance

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


def test_chunk_ids_of_one_source_are_its_chunk_ids_each_on_its_own():
    """The shared prefix state is copied, never updated: each id is of its own bytes."""
    ids = chunk_ids("docs/a.md")
    parts = [b"first", b"second", b"", "caf\u00e9".encode()]
    assert [ids(p) for p in parts] == [chunk_id("docs/a.md", p) for p in parts]
    assert ids(b"first") == hashlib.sha256(b"docs/a.md\x00first").hexdigest()


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


# --- one ArtifactRef, identity built in one module (docs/internals.md "Identity per stage") ---

REF = ArtifactRef("s", "a", "k", "sch", "application/json", "0" * 64, 10)
REF_ARRAY = b'["s","a","k","sch","application/json","' + b"0" * 64 + b'",10]'


def test_artifact_ref_encodes_as_the_dependency_array_journals_hold():
    # LaneResolved.dependencies and D were written as this array before ArtifactRef existed.
    assert msgspec.json.encode(REF) == REF_ARRAY
    assert msgspec.json.decode(REF_ARRAY, type=ArtifactRef) == REF
    assert dependencies_digest([REF]) == hashlib.sha256(b"[" + REF_ARRAY + b"]").hexdigest()
    assert DependencyFingerprint is ArtifactRef


def test_provenance_keeps_its_flat_envelope_fields_and_gives_the_ref_back():
    prov = Provenance.of(REF, "mod/1")
    assert prov.artifact == REF
    assert prov.module_fingerprint == "mod/1"
    # the envelope header on disk holds these flat keys; old envelopes decode unchanged
    flat = msgspec.json.decode(msgspec.json.encode(prov))
    assert flat == {
        "step": "s",
        "lane": "a",
        "module_fingerprint": "mod/1",
        "kind": "k",
        "schema": "sch",
        "media_type": "application/json",
        "sha256": "0" * 64,
        "size": 10,
    }
    assert msgspec.json.decode(msgspec.json.encode(flat), type=Provenance) == prov


def test_artifact_generated_keeps_flat_fields_and_gives_the_ref_back():
    fields = ArtifactGenerated.fields_of(REF)
    assert set(fields) == {"step", "lane", "kind", "schema", "media_type", "sha256", "size"}
    event = ArtifactGenerated(
        originator_id=uuid.UUID(int=1),
        originator_version=3,
        timestamp=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        warnings=[],
        **fields,
    )
    assert event.artifact == REF


def test_lane_components_builds_each_component_with_its_own_digest():
    kwargs = dict(
        module="builtin.terms",
        module_fingerprint="builtin.terms/2",
        params={"b": 1, "api_key": "x"},
        scope="document",
        consumes=["p"],
        chunking={"strategy": "paragraphs", "max_chars": 10},
        validators=["v=fp/1"],
        references={"r.md": "1" * 64},
        overrides={"lang": "en"},
        profile="p" * 64,
        profile_source="q" * 64,
    )
    got = lane_components(**kwargs)
    assert got == LaneComponents(
        config=config_digest(
            module="builtin.terms",
            params={"b": 1, "api_key": "x"},
            scope="document",
            consumes=["p"],
            chunking={"strategy": "paragraphs", "max_chars": 10},
        ),
        module=hashlib.sha256(b"builtin.terms/2").hexdigest(),
        validators=fingerprints_digest(["v=fp/1"]),
        references=references_digest({"r.md": "1" * 64}),
        overrides=overrides_digest({"lang": "en"}),
        profile="p" * 64,
        profile_source="q" * 64,
    )
    assert module_digest("builtin.terms/2") == got.module
    bare = lane_components(**{**kwargs, "validators": [], "references": {}, "overrides": {}})
    assert (bare.validators, bare.references, bare.overrides, bare.profile) == (
        "",
        "",
        "",
        "p" * 64,
    )


def test_profile_digests_are_digests_of_their_fields():
    assert profile_digest({"model": "m"}) == hashlib.sha256(b'{"model":"m"}').hexdigest()
    assert (
        profile_source_digest("builtin", {"model": "m"})
        == hashlib.sha256(b'{"origin":"builtin","table":{"model":"m"}}').hexdigest()
    )


def test_plan_key_is_unchanged_by_its_move_to_identity():
    # values computed before plan_key moved from domain/plan_keys.py
    assert plan_key("b" * 64, ChunkingSettings()) == (
        "5c400eb2ceae527d8aa39ee80bbcd5bafc42fd2526f936b88163e6f5c0f3b083"
    )
    assert plan_key("c" * 64, ChunkingSettings(), "fp") == (
        "a505c1df4c6bfe3824d4cb862fb9e213729f0546c1b8c3d9a45f6516ab06c3a0"
    )
    assert plan_keys.plan_key is plan_key


class _CodecModule:
    chunk_type = list[str]
    merged_type = dict[str, int]
    artifact_type = dict[str, int]


def test_codec_id_differs_per_stage_and_is_the_runner_reexport():
    ids = {stage: codec_id(_CodecModule(), stage) for stage in Stage}
    assert len(set(ids.values())) == len(ids)
    assert all(len(v) == 32 for v in ids.values())
    assert runner.codec_id is codec_id
