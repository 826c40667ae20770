"""`runjournal check PIPELINE`: the pipeline's problems before any run, one line each.

P1 of `run` (the pipeline file, settings, `--set`) and the checks `run` and `plan` make
before anything is allocated (app/check_pipeline.py): modules load, params are known
and typed, every LLM step has a profile, the profiles load. With `--online`, each
profile that talks to a server is asked for its models and whether it honours a
`json_schema` response format (adapters/llm/schema_probe.py). Opens no journal, writes
nothing; exit 0 when there is no problem, 2 otherwise (docs/operations.md "`check`").
"""

from __future__ import annotations

import os
from typing import Any

import click
from runjournal.app.check_pipeline import PipelineCheckError, describe, profiles_to_probe
from runjournal.cli.exit_codes import ExitCode
from runjournal.cli.output import emit_json
from runjournal.cli.run_cmd import parse_run
from runjournal.cli.settings.click_options import settings_flags


def check(opts: dict[str, Any], *, pipeline: str, inputs: tuple[str, ...]) -> int:
    from runjournal.app.check_pipeline import check_pipeline
    from runjournal.cli.compose import factories
    from runjournal.cli.pipeline_input import load_pipeline_spec

    settings = parse_run(  # PipelineCheckError: every problem, one line each (exit 2)
        pipeline,
        flags=settings_flags(opts),
        inputs=inputs,
        overrides=opts["overrides"],
        recompute=opts["recompute"],
        with_llm=False,
    )
    spec, path = load_pipeline_spec(pipeline)
    config = settings.config
    result = check_pipeline(
        spec,
        pipeline_dir=os.path.dirname(path),
        default_profile=config.profile,
        load_profiles=lambda: factories().load_profiles(
            config.profiles_file, user_profiles=settings.user_profiles
        ),
        modules=settings.modules,
        where=path,
    )
    body = {**describe(result, spec), "probed": []}
    if opts["online"]:
        from runjournal.adapters.llm.probe import probe_profile
        from runjournal.adapters.llm.schema_probe import probe_json_schema

        problems = []
        for profile in profiles_to_probe(result):
            problem = probe_profile(profile, os.environ)
            # the models route answered: does the endpoint honour `json_schema`?
            schema = probe_json_schema(profile, os.environ) if problem is None else None
            body["probed"].append(
                {
                    "profile": profile.id,
                    "ok": problem is None and (schema is None or schema.problem is None),
                    "json_schema": schema.verdict if schema is not None else "unknown",
                }
            )
            for line in (problem, schema.problem if schema is not None else None):
                if line is not None:
                    problems.append(f"{path}: {line}")
        if problems:
            raise PipelineCheckError(problems)
    if opts["as_json"]:
        emit_json(body)
    else:
        honoured = sum(1 for p in body["probed"] if p["json_schema"] == "honoured")
        online = (
            f", {len(body['probed'])} endpoint(s) answered, {honoured} honour json_schema"
            if opts["online"]
            else ""
        )
        click.echo(f"{pipeline}: ok ({len(spec.steps)} step(s) checked{online}); nothing was run")
    return int(ExitCode.OK)
