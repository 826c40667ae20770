"""Summary writing: `summary/*.json`, and the payloads of `command.json` and
`resolution.json` (docs/internals.md "Layout" of "Debug bundles").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from runjournal.adapters.debug_bundle.bundle_failures import PersistenceFailure, failure_of
from runjournal.adapters.debug_bundle.layout import FORMAT_VERSION, SUMMARY_FILES, SUMMARY_TARGET
from runjournal.adapters.debug_bundle.redacted import encoder, redacted_json
from runjournal.adapters.fsroot import FsRoot
from runjournal.domain.identity import identity_overrides
from runjournal.domain.pipeline import ResolvedPipeline
from runjournal.domain.redaction import redact_argv


class SummaryWriter:
    """Writes the summary documents, each atomically, each through `redact_obj`."""

    def __init__(self, root: FsRoot) -> None:
        self._root = root
        self.failures: list[PersistenceFailure] = []
        self.written: list[str] = []

    def write(self, name: str, payload: Mapping[str, Any]) -> bool:
        """Persist one summary document; a failure is recorded, never raised."""
        if name not in SUMMARY_FILES:
            raise ValueError(f"not a summary document: {name!r}")
        body = {"format_version": FORMAT_VERSION, "document": name.removesuffix(".json")}
        body.update(payload)
        try:
            data = msgspec.json.format(encoder.encode(redacted_json(body)), indent=2) + b"\n"
            self._root.write_bytes(name, data)
        except (OSError, ValueError, msgspec.EncodeError) as exc:
            self.failures.append(failure_of(SUMMARY_TARGET, name, exc))
            return False
        if name not in self.written:
            self.written.append(name)
        return True


def command_payload(
    *,
    argv: list[str],
    run_id: str,
    tool_version: str,
    pipeline: str,
    pipeline_file: str,
    overrides: Mapping[str, str],
    resume: bool,
    recompute: Iterable[str],
    inputs: Iterable[str],
    debug: str,
) -> dict[str, Any]:
    """`command.json`: the invocation; `--set` values as they enter identity (markers)."""
    return {
        "run_id": run_id,
        "tool_version": tool_version,
        "argv": redact_argv(list(argv)),
        "pipeline": pipeline,
        "pipeline_file": pipeline_file,
        "overrides": identity_overrides(overrides),
        "resume": resume,
        "recompute": list(recompute),
        "inputs": list(inputs),
        "debug": debug,
    }


def _profile_view(profile: Any) -> dict[str, Any]:
    return {
        "id": getattr(profile, "id", None),
        "source_kind": getattr(profile, "source_kind", None),
        "api_key_env": getattr(profile, "api_key_env", None),
        "profile": getattr(profile, "digest", None),
        "profile_source": getattr(profile, "source_digest", None),
        **(profile.non_secret() if hasattr(profile, "non_secret") else {}),
    }


def resolution_payload(
    settings: list[dict[str, object]],
    *,
    pipeline: ResolvedPipeline | None = None,
    profiles: Mapping[str, Any] | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """`resolution.json`: settings with origins, then what P3 resolved (identities only).

    Sources and references appear as name, sha256 and size: never their bytes.
    """
    doc: dict[str, Any] = {
        "status": "failed" if error is not None else "resolved",
        "settings": settings,
        "error": error,
        "pipeline": None,
    }
    if pipeline is not None:
        used = profiles or {}
        doc["pipeline"] = {
            "name": pipeline.name,
            "chunking": msgspec.to_builtins(pipeline.chunking),
            "sources": [
                {"name": s.name, "sha256": s.sha256, "size": s.size} for s in pipeline.sources
            ],
            "references": [
                {
                    "name": name,
                    "sha256": digest,
                    "size": len(pipeline.references.get(name, "").encode("utf-8")),
                }
                for name, digest in sorted(pipeline.reference_digests.items())
            ],
            "overrides": identity_overrides(pipeline.overrides),
            "steps": [
                {
                    "id": step.id,
                    "module": {
                        "name": type(step.module).name or type(step.module).__qualname__,
                        "fingerprint": step.module.fingerprint,
                        "artifact_kind": step.module.artifact_kind,
                        "schema": step.module.schema,
                    },
                    "validators": [type(v).fingerprint for v in step.validators],
                    "scope": step.scope.value,
                    "consumes": list(step.consumes),
                    "params": dict(step.params),
                    "components": msgspec.to_builtins(step.components),
                    "profile": _profile_view(used[step.id]) if step.id in used else None,
                }
                for step in pipeline.steps
            ],
        }
    return doc
