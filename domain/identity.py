"""Identity and fingerprints: every component is its own digest, so a mismatch can be named.

All digests are sha256 over canonical bytes (msgspec JSON with deterministic order);
never a Python repr, a set in iteration order, or a path of this machine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec
from runjournal.domain.redaction import SECRET_MARKER, is_credential_shaped, is_secret_key

if TYPE_CHECKING:  # both import this module: only their types are needed here
    from runjournal.domain.decisions import Stage
    from runjournal.domain.modules import Module

_encoder = msgspec.json.Encoder(order="deterministic")

EMPTY = ""


def canonical_bytes(value: Any) -> bytes:
    """The one canonical encoding used wherever a digest is taken."""
    return _encoder.encode(value)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest_of(value: Any) -> str:
    return sha256_hex(canonical_bytes(value))


def chunk_id(source: str, chunk_bytes: bytes) -> str:
    """sha256(source logical name ‖ 0x00 ‖ chunk bytes): position-independent."""
    h = hashlib.sha256(source.encode("utf-8"))
    h.update(b"\x00")
    h.update(chunk_bytes)
    return h.hexdigest()


def sequence_digest(digests: Iterable[str]) -> str:
    """Digest over an ordered list of digests (e.g. the lane's extract results)."""
    h = hashlib.sha256()
    for d in digests:
        h.update(d.encode("ascii"))
        h.update(b"\n")
    return h.hexdigest()


class DependencyFingerprint(msgspec.Struct, frozen=True, array_like=True):
    """What a consumer records of one producer artifact it read."""

    step: str
    lane: str
    kind: str
    schema: str
    media_type: str
    sha256: str
    size: int


def dependencies_digest(deps: Iterable[DependencyFingerprint]) -> str:
    """D: digest over the fingerprints sorted by (step, lane); empty when nothing is consumed."""
    ordered = sorted(deps, key=lambda d: (d.step, d.lane))
    if not ordered:
        return EMPTY
    return digest_of(ordered)


class LaneComponents(msgspec.Struct, frozen=True):
    """S: the lane's identity components, each a separate digest (empty when absent)."""

    config: str
    module: str
    validators: str
    references: str
    overrides: str
    profile: str
    profile_source: str


# The decision order of docs/operations.md "Decision order" for the S components.
COMPONENT_ORDER: tuple[str, ...] = (
    "config",
    "module",
    "validators",
    "references",
    "overrides",
    "profile",
    "profile_source",
)


def lane_identity(components: LaneComponents, source_digests: Iterable[str]) -> str:
    """The invocation identity (docs/internals.md "Identity per stage"): S plus the lane's sorted
    source digests."""
    return digest_of(
        {
            "components": [getattr(components, name) for name in COMPONENT_ORDER],
            "sources": sorted(source_digests),
        }
    )


def invocation_identity(lane_identities: Iterable[str]) -> str:
    """The run's invocation identity: sha256 over the sorted lane identities."""
    return digest_of(sorted(lane_identities))


def config_digest(
    *,
    module: str,
    params: Mapping[str, Any],
    scope: str,
    consumes: Iterable[str],
    chunking: Mapping[str, Any],
) -> str:
    """The step's semantic settings; never roots, cache mode, debug, jobs or formatting.

    Validators and the profile are their own components, so a change there is named
    `validator_changed` / `profile_changed` rather than hidden behind `config_changed`.
    """
    return digest_of(
        {
            "module": module,
            "params": identity_value(params),
            "scope": scope,
            "consumes": list(consumes),
            "chunking": chunking,
        }
    )


def fingerprints_digest(fingerprints: Iterable[str]) -> str:
    items = list(fingerprints)
    return digest_of(items) if items else EMPTY


def references_digest(references: Mapping[str, str]) -> str:
    """references: logical name -> content digest."""
    return digest_of(dict(references)) if references else EMPTY


def identity_value(value: Any, key: str | None = None) -> Any:
    """A value as it enters identity: secrets (by key or by shape) become a constant marker.

    So no secret is ever hashed, and rotating a key in `params` is not a cache miss.
    """
    if key is not None and is_secret_key(key):
        return SECRET_MARKER
    if isinstance(value, Mapping):
        return {k: identity_value(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [identity_value(v) for v in value]
    if isinstance(value, str) and is_credential_shaped(value):
        return SECRET_MARKER
    return value


def identity_overrides(overrides: Mapping[str, str]) -> dict[str, str]:
    """Overrides as they enter identity: secret keys and credential-shaped values as a marker."""
    return {
        key: SECRET_MARKER if is_secret_key(key) or is_credential_shaped(value) else value
        for key, value in overrides.items()
    }


def overrides_digest(overrides: Mapping[str, str]) -> str:
    return digest_of(identity_overrides(overrides)) if overrides else EMPTY


_CODEC_IDS: dict[tuple[type, str], str] = {}


def codec_id(module: Module, stage: Stage) -> str:
    """Identity of the codec type a stage's payload is encoded with (in every envelope)."""
    key = (type(module), stage.value)
    cached = _CODEC_IDS.get(key)
    if cached is None:
        tp = {
            "extract": module.chunk_type,
            "merge": module.merged_type,
            "normalize": module.artifact_type,
        }[stage.value]
        try:
            schema: Any = msgspec.json.schema(tp)
        except Exception:  # a type msgspec cannot describe: fall back to its name
            schema = repr(tp)
        cached = sha256_hex(canonical_bytes({"stage": stage.value, "type": schema}))[:32]
        _CODEC_IDS[key] = cached
    return cached
