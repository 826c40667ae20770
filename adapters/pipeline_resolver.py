"""Phase P3: turn a parsed pipeline spec into a `ResolvedPipeline`.

Loads modules and validators, expands and reads inputs and references, loads
profiles, and computes every identity component of every step. Any failure here is
still the user's configuration (exit 2), raised as `ResolutionError` naming the key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
from runjournal.adapters.module_loader import (
    ModuleLoadError,
    load_module,
    load_validator,
    module_shipment,
)
from runjournal.adapters.profiles import (
    Profile,
    ProfileError,
    ProfileRegistry,
    runtime_for,
)
from runjournal.adapters.sources import SourceResolutionError, load_sources
from runjournal.domain.identity import EMPTY, lane_components
from runjournal.domain.modules import Module, overrides_for
from runjournal.domain.pipeline import ResolvedPipeline, ResolvedStep
from runjournal.domain.pipeline_spec import PipelineSpec

if TYPE_CHECKING:
    from runjournal.adapters.input_stats import InputStats
    from runjournal.adapters.sources import SourceFiles


class ResolutionError(Exception):
    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


class Resolution(msgspec.Struct, frozen=True):
    """What P3 observed, for the journal: profiles used per step."""

    profiles: dict[str, Profile]


def resolve_pipeline(
    spec: PipelineSpec,
    *,
    pipeline_dir: str,
    inputs_override: Sequence[str] | None,
    cwd: str,
    overrides: Mapping[str, str],
    default_profile: str | None,
    profiles: ProfileRegistry,
    modules: Mapping[str, Module] | None = None,
    runtimes: Callable[[Profile], Any] = runtime_for,
    input_stats: InputStats | None = None,
    source_files: SourceFiles | None = None,
) -> tuple[ResolvedPipeline, Resolution]:
    """The resolved pipeline; `modules` (step id -> instance) are modules loaded already.

    Modules loaded while checking `--set` keys in phase P1 are passed in, so a plugin is
    constructed once per run. `runtimes` builds each step's LLM runtime (the run's
    `LLMServices.runtime_for`). `input_stats`: the input stat cache, when the
    `input_check` setting is `stat` (docs/configuration.md). `source_files`: the inputs
    are kept as their names, sizes and digests, read again through it (a run's, issue 29).
    """
    try:
        if inputs_override:
            sources = load_sources(
                inputs_override,
                base_dir=cwd,
                key="--input",
                name_dir=pipeline_dir,
                stats=input_stats,
                files=source_files,
            )
        else:
            if not spec.inputs:
                raise ResolutionError("inputs", "no inputs: set `inputs` or pass --input")
            sources = load_sources(
                spec.inputs,
                base_dir=pipeline_dir,
                key="inputs",
                stats=input_stats,
                files=source_files,
            )
        references = (
            load_sources(
                spec.references, base_dir=pipeline_dir, key="references", stats=input_stats
            )
            if spec.references
            else []
        )
    except SourceResolutionError as exc:
        raise ResolutionError(exc.key, str(exc).split(": ", 1)[1]) from None
    ref_text = {r.name: r.data.decode("utf-8") for r in references}
    ref_digests = {r.name: r.sha256 for r in references}
    chunking = {"strategy": spec.chunking.strategy.value, "max_chars": spec.chunking.max_chars}

    steps: list[ResolvedStep] = []
    used_profiles: dict[str, Profile] = {}
    for step in spec.steps:  # in dependency order; `step.key` names its place in the file
        where = step.key
        try:
            module = (modules or {}).get(step.id) or load_module(
                step.module,
                pipeline_dir=pipeline_dir,
                default_fingerprint=spec.plugin_fingerprint,
            )
            validators = tuple(
                load_validator(v, pipeline_dir=pipeline_dir) for v in step.validators
            )
        except ModuleLoadError as exc:
            raise ResolutionError(f"{where}.module", str(exc)) from None
        profile_id = step.profile or default_profile
        profile: Profile | None = None
        if profile_id is not None:
            try:
                profile = profiles.get(profile_id)
            except ProfileError as exc:
                # Name where the id came from: the step's own key, or the `profile` setting.
                key = f"{where}.profile" if step.profile else "profile"
                raise ResolutionError(key, str(exc).split(": ", 1)[1]) from None
            used_profiles[step.id] = profile
        # Only the overrides the module declares it reads enter identity (all when it
        # declares nothing), so an unrelated `--set` does not invalidate its checkpoints.
        seen = overrides_for(module, overrides)
        components = lane_components(
            module=step.module,
            module_fingerprint=module.fingerprint,
            params=step.params,
            scope=step.scope.value,
            consumes=step.consumes,
            chunking=chunking,
            validators=(
                f"{spec}={type(v).fingerprint}"
                for spec, v in zip(step.validators, validators, strict=True)
            ),
            references=ref_digests,
            overrides=seen,
            profile=profile.digest if profile else EMPTY,
            profile_source=profile.source_digest if profile else EMPTY,
        )
        steps.append(
            ResolvedStep(
                id=step.id,
                module=module,
                scope=step.scope,
                consumes=step.consumes,
                params=step.params,
                components=components,
                validators=validators,
                llm=(
                    _runtime(runtimes, _with_mode(profile, step.mode), f"{where}.profile")
                    if profile
                    else None
                ),
                overrides=None if type(module).override_keys is None else seen,
                shipment=module_shipment(
                    step.module,
                    module,
                    pipeline_dir=pipeline_dir,
                    default_fingerprint=spec.plugin_fingerprint,
                ),
                partial=step.partial,
            )
        )
    resolved = ResolvedPipeline(
        name=spec.name,
        steps=tuple(steps),
        sources=tuple(sources),
        chunking=spec.chunking,
        references=ref_text,
        reference_digests=ref_digests,
        overrides=dict(overrides),
    )
    return resolved, Resolution(profiles=used_profiles)


def _with_mode(profile: Profile, mode: str | None) -> Profile:
    """The step's `mode` over its profile's (docs/pipeline.md "`mode`"): how the step's
    requests travel, not part of the profile's identity."""
    if mode is None or mode == profile.client.mode:
        return profile
    from runjournal.adapters.llm.client_options import LLMMode

    client = msgspec.structs.replace(profile.client, mode=LLMMode(mode))
    return msgspec.structs.replace(profile, client=client)


def _runtime(runtimes: Callable[[Profile], Any], profile: Profile, key: str) -> Any:
    from runjournal.adapters.llm.cassette import CassetteError  # only for steps with a profile

    try:
        return runtimes(profile)
    except CassetteError as exc:  # a profile's cassette that cannot be read: configuration
        raise ResolutionError(key, f"profile '{profile.id}': {exc}") from None
