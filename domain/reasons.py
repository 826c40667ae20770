"""Typed reason codes and categories for every stage decision.

Codes are assigned at the validation site, never classified from prose afterwards.
Descriptions are code-owned: a decision's detail is chosen by its code, then NFC
normalized and bounded, so callers cannot inject free text into the journal.
"""

from __future__ import annotations

import enum
import unicodedata

DETAIL_LIMIT_BYTES = 240


class Category(enum.StrEnum):
    REUSE = "reuse"
    EXECUTION = "execution"
    MISS = "miss"
    INVALID = "invalid"
    CORRUPT = "corrupt"
    FORCED = "forced"
    PREDECESSOR_FAILURE = "predecessor_failure"
    FAILURE = "failure"


class ReasonCode(enum.StrEnum):
    REUSED = "reused"
    PREDECESSOR_REUSED = "predecessor_reused"
    NOT_RESUMED = "not_resumed"
    CHECKPOINT_MISSING = "checkpoint_missing"
    CHECKPOINT_CORRUPT = "checkpoint_corrupt"
    CODEC_MISMATCH = "codec_mismatch"
    SCHEMA_UNSUPPORTED = "schema_unsupported"
    CONFIG_CHANGED = "config_changed"
    MODULE_CHANGED = "module_changed"
    VALIDATOR_CHANGED = "validator_changed"
    REFERENCES_CHANGED = "references_changed"
    OVERRIDES_CHANGED = "overrides_changed"
    PROFILE_CHANGED = "profile_changed"
    PROFILE_SOURCE_CHANGED = "profile_source_changed"
    INPUT_CHANGED = "input_changed"
    STAGE_INPUT_CHANGED = "stage_input_changed"
    DEPENDENCY_INVALIDATED = "dependency_invalidated"
    FORCED_RECOMPUTE = "forced_recompute"
    PREDECESSOR_MISSING = "predecessor_missing"
    PREDECESSOR_IDENTITY_MISMATCH = "predecessor_identity_mismatch"
    PREDECESSOR_CORRUPT = "predecessor_corrupt"
    PREDECESSOR_PROVENANCE_INVALID = "predecessor_provenance_invalid"
    STAGE_FAILED = "stage_failed"


_C = Category
_R = ReasonCode

CATEGORY_OF: dict[ReasonCode, Category] = {
    _R.REUSED: _C.REUSE,
    _R.PREDECESSOR_REUSED: _C.REUSE,
    _R.NOT_RESUMED: _C.EXECUTION,
    _R.CHECKPOINT_MISSING: _C.MISS,
    _R.CONFIG_CHANGED: _C.INVALID,
    _R.MODULE_CHANGED: _C.INVALID,
    _R.VALIDATOR_CHANGED: _C.INVALID,
    _R.REFERENCES_CHANGED: _C.INVALID,
    _R.OVERRIDES_CHANGED: _C.INVALID,
    _R.PROFILE_CHANGED: _C.INVALID,
    _R.PROFILE_SOURCE_CHANGED: _C.INVALID,
    _R.INPUT_CHANGED: _C.INVALID,
    _R.STAGE_INPUT_CHANGED: _C.INVALID,
    _R.DEPENDENCY_INVALIDATED: _C.INVALID,
    _R.CHECKPOINT_CORRUPT: _C.CORRUPT,
    _R.CODEC_MISMATCH: _C.CORRUPT,
    _R.SCHEMA_UNSUPPORTED: _C.CORRUPT,
    _R.FORCED_RECOMPUTE: _C.FORCED,
    _R.PREDECESSOR_MISSING: _C.PREDECESSOR_FAILURE,
    _R.PREDECESSOR_IDENTITY_MISMATCH: _C.PREDECESSOR_FAILURE,
    _R.PREDECESSOR_CORRUPT: _C.PREDECESSOR_FAILURE,
    _R.PREDECESSOR_PROVENANCE_INVALID: _C.PREDECESSOR_FAILURE,
    _R.STAGE_FAILED: _C.FAILURE,
}

DESCRIPTIONS: dict[ReasonCode, str] = {
    _R.REUSED: "A valid checkpoint matched every recorded component; its result was reused.",
    _R.PREDECESSOR_REUSED: (
        "The step was not selected for recomputation; its accepted normalize artifact "
        "was restored from the workspace."
    ),
    _R.NOT_RESUMED: "Not a --resume or --recompute invocation: no checkpoint was consulted.",
    _R.CHECKPOINT_MISSING: "No checkpoint exists for this stage scope.",
    _R.CHECKPOINT_CORRUPT: (
        "The checkpoint could not be read: its envelope, digest or payload is damaged."
    ),
    _R.CODEC_MISMATCH: "The checkpoint was written with a different codec for this stage.",
    _R.SCHEMA_UNSUPPORTED: (
        "The checkpoint or workspace uses a schema version this tool cannot read."
    ),
    _R.CONFIG_CHANGED: (
        "The step's semantic settings (module, params, scope, consumes, chunking) changed."
    ),
    _R.MODULE_CHANGED: "The module's declared semantic fingerprint changed.",
    _R.VALIDATOR_CHANGED: "A validator was added, removed, or its declared fingerprint changed.",
    _R.REFERENCES_CHANGED: "The content of the reference files changed.",
    _R.OVERRIDES_CHANGED: "The runtime overrides (--set) changed.",
    _R.PROFILE_CHANGED: "The observed LLM profile (provider, model, parameters) changed.",
    _R.PROFILE_SOURCE_CHANGED: (
        "The definition of the LLM profile changed where it is defined, even though the "
        "profile id is the same."
    ),
    _R.INPUT_CHANGED: "The chunk's content changed: no checkpoint exists for these bytes.",
    _R.STAGE_INPUT_CHANGED: "The stage's input (the previous stage's result) changed.",
    _R.DEPENDENCY_INVALIDATED: (
        "A consumed producer artifact (kind, schema, media type, digest or size), or the "
        "part of it the stage reads, differs from the one recorded."
    ),
    _R.FORCED_RECOMPUTE: ("Selected by --recompute, or a transitive consumer of a selected step."),
    _R.PREDECESSOR_MISSING: "A required producer artifact is missing from the workspace.",
    _R.PREDECESSOR_IDENTITY_MISMATCH: (
        "A required producer artifact was recorded under a different invocation identity."
    ),
    _R.PREDECESSOR_CORRUPT: (
        "A required producer artifact is damaged or cannot be decoded by the module's codec."
    ),
    _R.PREDECESSOR_PROVENANCE_INVALID: (
        "A required producer artifact's recorded provenance does not match the producer."
    ),
    _R.STAGE_FAILED: "The module raised an error or returned a value its codec refused.",
}


def category_of(code: ReasonCode) -> Category:
    return CATEGORY_OF[code]


def bound_utf8(text: str, limit: int = DETAIL_LIMIT_BYTES) -> str:
    """NFC-normalize and cut to at most `limit` UTF-8 bytes on a character boundary."""
    text = unicodedata.normalize("NFC", text)
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", errors="ignore")


def detail_for(code: ReasonCode) -> str:
    """The decision detail for a code: code-owned, normalized and bounded."""
    return _DETAILS[code]


_DETAILS = {code: bound_utf8(text) for code, text in DESCRIPTIONS.items()}
