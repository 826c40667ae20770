"""The plan use-case: every stage decision a run would take, predicted; nothing is run.

P1 (the caller's `RunSettings`) and P3 of a run (docs/internals.md "One run, phase by
phase") without P2: no journal is opened, no run id allocated, no module stage called, no
LLM called, and the cache root is read through a read-only view (docs/operations.md
"`plan`"). A configuration error is a `UsageError`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runjournal.adapters.fsroot import FsError
from runjournal.adapters.module_stdout import module_stdout_to_stderr
from runjournal.adapters.pipeline_resolver import ResolutionError, resolve_pipeline
from runjournal.adapters.profiles import ProfileError
from runjournal.app.errors import UsageError
from runjournal.app.run_pipeline import RunSettings
from runjournal.domain.planner import Plan, Planner, StepPricing
from runjournal.domain.prompt_cache import CacheKind
from runjournal.domain.redaction import safe_error_text


@dataclass(frozen=True)
class PlanPorts:
    """What `plan` is wired with (cli/compose.py `plan_ports`)."""

    load_profiles: Callable[..., Any]
    cache_view: Callable[[Any, str], Any]  # (config, pipeline) -> a read-only CacheView


@dataclass
class PlanResult:
    """The prediction and its `plan --json` document (docs/operations.md "JSON documents")."""

    plan: Plan
    document: dict[str, Any]

    @property
    def decisions(self) -> dict[str, Any]:
        return self.document["decisions"]

    @property
    def stages(self) -> list[dict[str, Any]]:
        return self.document["stages"]


def _llm_mode(config: Any, spec: Any, step: str, profile: Any) -> str:
    """How the run would send the step's requests: the `llm_mode` setting, else the step's
    `mode`, else its profile's (docs/operations.md "Batch runs")."""
    setting = config.llm_mode.value
    if setting != "profile":
        return str(setting)
    own = next((s.mode for s in spec.steps if s.id == step), None)
    return own or profile.client.mode.value


def _pricing(profile: Any, mode: str) -> StepPricing:
    """How the run prices the step's requests (the same `Prices` and `batch_discount`): a
    replayed profile or the offline provider sends no batch and caches nothing."""
    sends = profile.replay is None and profile.provider != "offline"
    cache = {"openai": CacheKind.AUTOMATIC, "anthropic": CacheKind.MARKED}.get(profile.provider)
    return StepPricing(
        prices=profile.client.prices,
        batch_discount=profile.client.batch_discount if sends else 1.0,
        batched=sends and mode == "batch",
        cache=cache if sends and cache is not None else CacheKind.NONE,
        endpoint=f"{profile.provider} {profile.base_url or ''} {profile.model}",
    )


def plan(settings: RunSettings, ports: PlanPorts) -> PlanResult:
    """Resolve the pipeline and predict each stage's decision with its reason code."""
    spec, config, policy = settings.spec, settings.config, settings.policy
    try:
        profiles = ports.load_profiles(config.profiles_file, user_profiles=settings.user_profiles)
        resolved, resolution = resolve_pipeline(
            spec,
            pipeline_dir=os.path.dirname(settings.pipeline_path),
            inputs_override=settings.inputs or None,
            cwd=os.getcwd(),
            overrides=settings.overrides,
            default_profile=config.profile,
            profiles=profiles,
            modules=settings.modules,
        )
    except (ResolutionError, ProfileError) as exc:
        raise UsageError(safe_error_text(f"{settings.pipeline_path}: {exc}")) from None
    prices = {
        step: _pricing(p, _llm_mode(config, spec, step, p))
        for step, p in resolution.profiles.items()
    }
    with contextlib.ExitStack() as stack:
        try:
            view = ports.cache_view(config, spec.name)
        except FsError as exc:
            raise UsageError(
                f"cache root {config.cache_remote or config.cache_root}: {exc}"
            ) from None
        stack.callback(view.close)
        resumed = config.resume or policy.active
        with module_stdout_to_stderr():  # a module's `reads` may print: never on stdout
            predicted = Planner(
                loader=view if resumed else None,
                cache=view,
                plan_store=view.plans,
                policy=policy,
                prices=prices,
                scopes=view,
                references=resolved.references,
            ).plan(resolved)
    return PlanResult(
        predicted,
        {
            "pipeline": spec.name,
            "resume": config.resume,
            "recompute": {"selected": list(policy.selected), "forced": list(policy.forced)},
            "roots": {
                "output": config.output_root,
                "cache": config.cache_remote or config.cache_root,
                "debug": config.debug_root,
            },
            "decisions": predicted.decisions(),
            "stages": [p.view() for p in predicted.predictions],
            "stopped": predicted.stopped.view() if predicted.stopped else None,
            "estimate": predicted.estimate(),
        },
    )
