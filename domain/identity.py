"""Identity and fingerprints: every component is its own digest, so a mismatch can be named.

All digests are sha256 over canonical bytes (msgspec JSON with deterministic order);
never a Python repr, a set in iteration order, or a path of this machine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec
from runjournal.domain.chunking import PLANNER_FINGERPRINT, ChunkingSettings
from runjournal.domain.lazy_pattern import LazyPattern

# The redaction shapes are imported by the two functions that need them, not here:
# `runjournal --help` imports this module through plan_keys, and start-up stays lean
# (docs/performance.md "Start-up").

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
    return chunk_ids(source)(chunk_bytes)


def chunk_ids(source: str) -> Callable[[bytes], str]:
    """`chunk_id` of one source's chunks: the name and separator are hashed once and the
    hash state copied per chunk (a resume plans every chunk of every source again)."""
    prefix = hashlib.sha256(source.encode("utf-8"))
    prefix.update(b"\x00")

    def of(chunk_bytes: bytes) -> str:
        h = prefix.copy()
        h.update(chunk_bytes)
        return h.hexdigest()

    return of


def sequence_digest(digests: Iterable[str]) -> str:
    """Digest over an ordered list of digests (e.g. the lane's extract results)."""
    h = hashlib.sha256()
    for d in digests:
        h.update(d.encode("ascii"))
        h.update(b"\n")
    return h.hexdigest()


class ArtifactRef(msgspec.Struct, frozen=True, array_like=True):
    """The identity of one generated artifact: which lane made it, what it is, its bytes' digest.

    The one definition of these fields (docs/internals.md "Identity per stage"). A consumer
    records the refs of the producer artifacts it read (`LaneResolved.dependencies`, and D
    is their digest); `ArtifactGenerated` and a checkpoint's `Provenance` keep the same
    fields flat on the wire and return them as `.artifact`. Encoded as an array: the
    field order is part of D and of the journal, so never reorder or rename them.
    """

    step: str
    lane: str
    kind: str
    schema: str
    media_type: str
    sha256: str
    size: int

    @classmethod
    def of_flat(cls, holder: object) -> ArtifactRef:
        """The ref of a struct that keeps these fields flat (an event, a provenance)."""
        return cls(*(getattr(holder, name) for name in cls.__struct_fields__))


# What a consumer records of one producer artifact it read: an `ArtifactRef` (the name
# the journal's `LaneResolved.dependencies` and its readers know).
DependencyFingerprint = ArtifactRef


def dependencies_digest(deps: Iterable[ArtifactRef]) -> str:
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


def step_identity(components: LaneComponents) -> str:
    """What a step's checkpoints are stored under: a digest of S alone (32 hex).

    docs/internals.md "Checkpoint store": with the consumed artifacts' D and the lane
    identity it names where a stage's checkpoint lives, so a parameter switched back finds
    its earlier results instead of overwriting them.
    """
    return digest_of([getattr(components, name) for name in COMPONENT_ORDER])[:32]


def scope_dependencies(stage_digests: Iterable[str]) -> str:
    """The D a stage's checkpoint is stored under: its own D and those of the stages before
    it in the lane (extract, merge, normalize), since its input came from them.

    Empty when the lane consumes nothing; the extract stage's own D when it is the only one
    (docs/internals.md "Checkpoint store").
    """
    digests = list(stage_digests)
    if not any(digests):
        return EMPTY
    if len(digests) == 1:
        return digests[0]
    return digest_of(digests)


def invocation_identity(lane_identities: Iterable[str]) -> str:
    """The run's invocation identity: sha256 over the sorted lane identities."""
    if isinstance(lane_identities, LaneIdentities):
        return lane_identities.identity()
    return digest_of(sorted(lane_identities))


class LaneIdentities:
    """A run's lane identities, for its invocation identity and their count: each held as
    its 32 bytes in one buffer, not as a 64-character string in a list (about 120 B a
    lane, in every fold that held them; issue 29: peak RSS). An identity that is not a
    sha256 in lowercase hex is kept as it is."""

    __slots__ = ("_other", "_raw")

    def __init__(self, identities: Iterable[str] = ()) -> None:
        self._raw = bytearray()
        self._other: list[str] = []
        for identity in identities:
            self.append(identity)

    def append(self, identity: str) -> None:
        if len(identity) == 64:
            try:
                raw = bytes.fromhex(identity)
            except ValueError:
                raw = b""
            if raw.hex() == identity:
                self._raw += raw
                return
        self._other.append(identity)

    def __len__(self) -> int:
        return len(self._raw) // 32 + len(self._other)

    def identity(self) -> str:
        """`invocation_identity` of the identities: sha256 of the canonical encoding of
        their sorted list, streamed (lowercase hex sorts as its bytes do)."""
        raw = self._raw
        digests = sorted(raw[at : at + 32] for at in range(0, len(raw), 32))
        if self._other:
            return digest_of(sorted([*self._other, *(d.hex() for d in digests)]))
        h = hashlib.sha256(b"[")
        for at in range(0, len(digests), 4096):
            part = b'","'.join(d.hex().encode("ascii") for d in digests[at : at + 4096])
            h.update((b'"' if at == 0 else b',"') + part + b'"')
        h.update(b"]")
        return h.hexdigest()


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


def module_digest(fingerprint: str) -> str:
    """module component: sha256 of the module's declared fingerprint."""
    return sha256_hex(fingerprint.encode("utf-8"))


def profile_digest(non_secret: Mapping[str, Any]) -> str:
    """profile component: the profile's observed non-secret fields."""
    return digest_of(non_secret)


def profile_source_digest(source_kind: str, table: Mapping[str, Any]) -> str:
    """profile_source component: where the profile was defined and its non-secret table."""
    return digest_of({"origin": source_kind, "table": table})


def lane_components(
    *,
    module: str,
    module_fingerprint: str,
    params: Mapping[str, Any],
    scope: str,
    consumes: Iterable[str],
    chunking: Mapping[str, Any],
    validators: Iterable[str],
    references: Mapping[str, str],
    overrides: Mapping[str, str],
    profile: str = EMPTY,
    profile_source: str = EMPTY,
) -> LaneComponents:
    """S for one step, every component its own digest.

    `validators` are the `spec=fingerprint` strings of the step's validators,
    `references` the reference logical names with their content digests, `overrides`
    only those the module reads; `profile` and `profile_source` are the digests of
    `profile_digest` and `profile_source_digest` (empty without a profile).
    """
    return LaneComponents(
        config=config_digest(
            module=module, params=params, scope=scope, consumes=consumes, chunking=chunking
        ),
        module=module_digest(module_fingerprint),
        validators=fingerprints_digest(validators),
        references=references_digest(references),
        overrides=overrides_digest(overrides),
        profile=profile,
        profile_source=profile_source,
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
    from runjournal.domain.redaction import SECRET_MARKER, is_credential_shaped, is_secret_key

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
    from runjournal.domain.redaction import SECRET_MARKER, is_credential_shaped, is_secret_key

    return {
        key: SECRET_MARKER if is_secret_key(key) or is_credential_shaped(value) else value
        for key, value in overrides.items()
    }


def overrides_digest(overrides: Mapping[str, str]) -> str:
    return digest_of(identity_overrides(overrides)) if overrides else EMPTY


_CODEC_IDS: dict[tuple[type, str], str] = {}


def codec_id(module: Module, stage: Stage) -> str:
    """Identity of the codec type a stage's payload is encoded with (in every envelope)."""
    key = (type(module), str(stage))  # `str` of the StrEnum: its value, without `.value`
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


_HEX64 = LazyPattern(r"[0-9a-f]{64}")


def is_sha256_hex(value: object) -> bool:
    """A 64-character lowercase hex digest (the only form keys and digests take)."""
    return isinstance(value, str) and _HEX64.fullmatch(value) is not None


def raw_sha256(value: str) -> bytes | None:
    """The 32 bytes of a lowercase hex sha256, or None for any other string: digests held
    raw take half the memory of their text and come back as the same text (issue 29)."""
    if len(value) != 64:
        return None
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return None
    return raw if raw.hex() == value else None


class _PlanKeyMaterial(msgspec.Struct, frozen=True):
    """What a plan key hashes; field names are part of the key, so never rename them."""

    planner_fingerprint: str
    settings: ChunkingSettings
    source_sha256: str


def plan_key(
    source_sha256: str,
    settings: ChunkingSettings,
    planner_fingerprint: str = PLANNER_FINGERPRINT,
) -> str:
    """A chunk plan's key: sha256 over the canonical JSON of the three facts that determine it."""
    if not is_sha256_hex(source_sha256):
        raise ValueError("source_sha256 must be 64 lowercase hex characters")
    if not isinstance(settings, ChunkingSettings):
        raise TypeError("settings must be ChunkingSettings")
    if not isinstance(planner_fingerprint, str) or not planner_fingerprint:
        raise ValueError("planner_fingerprint must be a non-empty string")
    settings.validate()
    return digest_of(_PlanKeyMaterial(planner_fingerprint, settings, source_sha256))
