"""`--set KEY=VALUE` checked against what the pipeline's steps declare they read (phase P1).

A module declares the override keys it reads (`Module.override_keys`, docs/modules.md
"Overrides"); a module that declares nothing may read any key. A `--set` key that no
step may read would change nothing but every checkpoint's identity, so it is a usage
error (exit 2) before anything is allocated, naming each step and its keys.

The modules are loaded here only when `--set` is given, and handed on to resolution so
each is constructed once. A module that cannot be loaded is left to resolution, which
reports it (and records the failed run) as it always does.
"""

from __future__ import annotations

import difflib

from runjournal.adapters.module_loader import ModuleLoadError, load_module
from runjournal.cli.exit_codes import CliError
from runjournal.domain.modules import Module, reads_override
from runjournal.domain.pipeline_spec import PipelineSpec


def _keys(module: Module) -> str:
    keys = type(module).override_keys
    if keys is None:
        return "any key"
    return ", ".join(sorted(keys)) or "none"


def check_overrides(
    spec: PipelineSpec, pipeline_dir: str, overrides: dict[str, str]
) -> dict[str, Module]:
    """The loaded modules (step id -> instance); CliError for a key no step reads."""
    if not overrides:
        return {}
    modules: dict[str, Module] = {}
    for step in spec.steps:
        try:
            modules[step.id] = load_module(
                step.module,
                pipeline_dir=pipeline_dir,
                default_fingerprint=spec.plugin_fingerprint,
            )
        except ModuleLoadError:
            return {}  # resolution reports it; the keys cannot be judged without it
    for key in overrides:
        if any(reads_override(module, key) for module in modules.values()):
            continue
        declared = sorted({k for m in modules.values() for k in (type(m).override_keys or ())})
        close = difflib.get_close_matches(key, declared, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        steps = "; ".join(f"{step_id}: {_keys(m)}" for step_id, m in modules.items())
        raise CliError(
            f"--set {key!r} is read by no step{hint} (the override keys each step reads: {steps})"
        )
    return modules
