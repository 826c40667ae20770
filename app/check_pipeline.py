"""`runjournal check PIPELINE`, and the same checks at the start of `run` and `plan`.

What a run would otherwise find only once it is under way, found in phase P1 with
nothing allocated (no journal opened, no run id, no directory): every step's module and
validators load, its params are known and typed (`Module.known_params`,
`strict_params`, `check_params`), every step whose module calls a model has a profile,
and the profiles load (a `base_url` that is not a URL is refused there). Every problem
is one line; the caller exits 2 when there is any (docs/operations.md "`check`").
`--online` also asks each profile's endpoint for its models (adapters/llm/probe.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runjournal.adapters.module_loader import ModuleLoadError, load_module, load_validator
from runjournal.adapters.profiles import Profile, ProfileError, ProfileRegistry
from runjournal.app.errors import UsageError
from runjournal.domain.modules import Module, param_problems
from runjournal.domain.pipeline_spec import PipelineSpec


class PipelineCheckError(UsageError):
    """Problems found before the run (exit 2); `problems` holds one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)


@dataclass
class CheckResult:
    problems: list[str] = field(default_factory=list)
    modules: dict[str, Module] = field(default_factory=dict)  # step id -> loaded module
    profiles: dict[str, Profile] = field(default_factory=dict)  # step id -> its profile


def _calls_a_model(module: Module) -> bool:
    """A module that declares stages calling `ctx.llm` (undeclared: not judged here)."""
    declared = getattr(type(module), "llm_stages", None)
    return isinstance(declared, tuple) and bool(declared)


def check_pipeline(
    spec: PipelineSpec,
    *,
    pipeline_dir: str,
    default_profile: str | None,
    load_profiles: Callable[[], ProfileRegistry],
    modules: Mapping[str, Module] | None = None,
    where: str = "",
) -> CheckResult:
    """Every problem of the pipeline a run would meet in resolution, one line each
    (prefixed with `where`, the pipeline file as the user named it), and the modules
    loaded on the way (handed on to resolution, so each is constructed once)."""
    prefix = f"{where}: " if where else ""
    result = CheckResult()
    registry: ProfileRegistry | None = None
    try:
        registry = load_profiles()
    except ProfileError as exc:
        result.problems.append(f"{prefix}{exc}")
    for step in spec.steps:
        key = step.key
        try:
            module = (modules or {}).get(step.id) or load_module(
                step.module,
                pipeline_dir=pipeline_dir,
                default_fingerprint=spec.plugin_fingerprint,
            )
        except ModuleLoadError as exc:
            result.problems.append(f"{prefix}{key}.module: {exc}")
            continue
        result.modules[step.id] = module
        for spec_text in step.validators:
            try:
                load_validator(spec_text, pipeline_dir=pipeline_dir)
            except ModuleLoadError as exc:
                result.problems.append(f"{prefix}{key}.validators: {exc}")
        for problem in param_problems(module, step.params):
            result.problems.append(f"{prefix}{key}.params: {problem}")
        profile_id = step.profile or default_profile
        if profile_id is None:
            if _calls_a_model(module):
                result.problems.append(
                    f"{prefix}{key}: step '{step.id}' ({step.module}) calls an LLM but has "
                    "no profile: set `profile` on the step or in [runjournal], or pass "
                    '--profile ID (docs/configuration.md "LLM profiles")'
                )
            continue
        if registry is None:
            continue
        try:
            result.profiles[step.id] = registry.get(profile_id)
        except ProfileError as exc:
            name = f"{key}.profile" if step.profile else "profile"
            result.problems.append(f"{prefix}{name}: {str(exc).split(': ', 1)[-1]}")
    return result


def raise_problems(result: CheckResult) -> None:
    """PipelineCheckError with each distinct problem once (a `profile` setting that names
    no profile is one problem, not one per step)."""
    if result.problems:
        raise PipelineCheckError(list(dict.fromkeys(result.problems)))


def profiles_to_probe(result: CheckResult) -> list[Profile]:
    """The distinct profiles the steps use that talk to a server (not a cassette, not
    the built-in `offline`), in step order."""
    seen: dict[str, Profile] = {}
    for profile in result.profiles.values():
        if profile.replay is None and profile.provider != "offline":
            seen.setdefault(profile.id, profile)
    return list(seen.values())


def describe(result: CheckResult, spec: PipelineSpec) -> dict[str, Any]:
    """The `check --json` document's body (besides `problems`)."""
    return {
        "pipeline": spec.name,
        "steps": [
            {
                "id": step.id,
                "module": step.module,
                "profile": result.profiles[step.id].id if step.id in result.profiles else None,
            }
            for step in spec.steps
        ],
    }
