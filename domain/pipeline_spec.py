"""The pipeline file's contract: parse and validate its TOML document (phase P1).

Pure: it receives the decoded TOML text and returns a typed `PipelineSpec`, or raises
`PipelineSpecError` naming the file and the key. Nothing is allocated before this passes.
Steps may be listed in any order: they are sorted by `consumes` (stably, so a file
already in dependency order keeps its order), and a cycle is an error naming it. An
unknown key, at any level, gets the closest known key as a suggestion (docs/pipeline.md).
"""

from __future__ import annotations

import difflib
import heapq
import tomllib
from collections.abc import Iterable
from typing import Any

import msgspec
from runjournal.domain.chunking import ChunkingSettings, ChunkStrategy
from runjournal.domain.names import is_valid_pipeline_name, is_valid_step_id
from runjournal.domain.pipeline import Scope


class PipelineSpecError(ValueError):
    """One line: `<file>: <key>: <problem>`."""

    def __init__(self, file: str, key: str, problem: str) -> None:
        super().__init__(f"{file}: {key}: {problem}" if key else f"{file}: {problem}")
        self.file = file
        self.key = key
        self.problem = problem


class StepSpec(msgspec.Struct, frozen=True):
    id: str
    module: str
    scope: Scope = Scope.DOCUMENT
    consumes: tuple[str, ...] = ()
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    profile: str | None = None
    validators: tuple[str, ...] = ()
    # a corpus step that may run, under --keep-going, on the documents whose producer
    # lanes succeeded (docs/pipeline.md "`partial`")
    partial: bool = False
    index: int = 0  # position of its [[steps]] table in the file, for `steps[N]` keys
    # how its LLM requests are sent, over its profile's `mode` (docs/pipeline.md "`mode`");
    # not identity: it changes how requests travel, not what is asked
    mode: str | None = None

    @property
    def key(self) -> str:
        return f"steps[{self.index}]"


class PipelineSpec(msgspec.Struct, frozen=True):
    name: str
    inputs: tuple[str, ...]
    steps: tuple[StepSpec, ...]
    chunking: ChunkingSettings = ChunkingSettings()
    references: tuple[str, ...] = ()
    description: str = ""
    settings: dict[str, Any] = msgspec.field(default_factory=dict)
    # "source": a plugin class that declares no `fingerprint` gets `fingerprint = "source"`
    # (docs/pipeline.md "`plugin_fingerprint`"); "" (the default): it must declare one
    plugin_fingerprint: str = ""

    @property
    def step_ids(self) -> tuple[str, ...]:
        """Step ids in execution order (every producer before its consumers)."""
        return tuple(s.id for s in self.steps)


_TOP_KEYS = {
    "name",
    "description",
    "inputs",
    "references",
    "chunking",
    "steps",
    "runjournal",
    "plugin_fingerprint",
}
_STEP_KEYS = {
    "id",
    "module",
    "scope",
    "consumes",
    "params",
    "profile",
    "validators",
    "partial",
    "mode",
}
_CHUNK_KEYS = {"strategy", "max_chars"}


def parse_pipeline_text(text: str, *, file: str) -> PipelineSpec:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PipelineSpecError(file, "", f"not valid TOML ({exc})") from None
    return parse_pipeline(doc, file=file)


def _str_list(value: Any, file: str, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PipelineSpecError(file, key, "must be a list of non-empty strings")
    return tuple(value)


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`; did you mean 'x'?` for the closest known word, or nothing."""
    by_lower = {k.lower(): k for k in sorted(known)}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1)
    return f"; did you mean '{by_lower[close[0]]}'?" if close else ""


def _unknown(doc: dict[str, Any], allowed: set[str], file: str, prefix: str) -> None:
    """The message names the key in quotes, never as `key: …`: an unknown `api_key` must
    not read as an assignment whose value redaction hides (issue #27 defect 11)."""
    for key in doc:
        if key not in allowed:
            where = f" in {prefix.removesuffix('.')}" if prefix else ""
            raise PipelineSpecError(
                file, "", f"unknown key {str(key)!r}{where}" + did_you_mean(str(key), allowed)
            )


def parse_pipeline(doc: dict[str, Any], *, file: str) -> PipelineSpec:
    _unknown(doc, _TOP_KEYS, file, "")
    name = doc.get("name")
    if not isinstance(name, str) or not is_valid_pipeline_name(name):
        raise PipelineSpecError(file, "name", "required; 1-64 characters of [A-Za-z0-9_-]")
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise PipelineSpecError(file, "description", "must be a string")
    inputs = _str_list(doc.get("inputs", []), file, "inputs")
    references = _str_list(doc.get("references", []), file, "references")
    chunking = _parse_chunking(doc.get("chunking", {}), file)
    plugin_fingerprint = doc.get("plugin_fingerprint", "")
    if plugin_fingerprint not in ("", "source"):
        raise PipelineSpecError(
            file, "plugin_fingerprint", 'must be "source" (or left out: plugins declare their own)'
        )
    settings = doc.get("runjournal", {})
    if not isinstance(settings, dict):
        raise PipelineSpecError(file, "runjournal", "must be a table")
    raw_steps = doc.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise PipelineSpecError(file, "steps", "at least one [[steps]] table is required")
    steps: list[StepSpec] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_steps):
        step = _parse_step(raw, i, seen, file)
        seen.add(step.id)
        steps.append(step)
    for step in steps:
        for producer in step.consumes:
            if producer not in seen:
                raise PipelineSpecError(
                    file,
                    f"{step.key}.consumes",
                    f"'{producer}' is not a step" + did_you_mean(producer, seen),
                )
    return PipelineSpec(
        name=name,
        inputs=inputs,
        steps=_in_dependency_order(steps, file),
        chunking=chunking,
        references=references,
        description=description,
        settings=dict(settings),
        plugin_fingerprint=plugin_fingerprint,
    )


def _parse_chunking(raw: Any, file: str) -> ChunkingSettings:
    if not isinstance(raw, dict):
        raise PipelineSpecError(file, "chunking", "must be a table")
    _unknown(raw, _CHUNK_KEYS, file, "chunking.")
    strategy = raw.get("strategy", ChunkStrategy.PARAGRAPHS.value)
    try:
        strategy = ChunkStrategy(strategy)
    except ValueError:
        choices = ", ".join(s.value for s in ChunkStrategy)
        raise PipelineSpecError(file, "chunking.strategy", f"must be one of {choices}") from None
    max_chars = raw.get("max_chars", 2000)
    if (
        not isinstance(max_chars, int)
        or isinstance(max_chars, bool)
        or not (1 <= max_chars <= 10_000_000)
    ):
        raise PipelineSpecError(file, "chunking.max_chars", "must be an integer from 1 to 10000000")
    return ChunkingSettings(strategy=strategy, max_chars=max_chars)


def _in_dependency_order(steps: list[StepSpec], file: str) -> tuple[StepSpec, ...]:
    """Producers before consumers; among steps that are ready, the one listed first.

    Kahn's algorithm with the file position as the tie-break, so the order is unique and a
    file already in dependency order is returned unchanged.
    """
    by_id = {step.id: step for step in steps}
    waiting = {step.id: set(step.consumes) for step in steps}
    consumers: dict[str, list[str]] = {step.id: [] for step in steps}
    for step in steps:
        for producer in step.consumes:
            consumers[producer].append(step.id)
    ready = [step.index for step in steps if not waiting[step.id]]
    heapq.heapify(ready)
    ordered: list[StepSpec] = []
    while ready:
        step = steps[heapq.heappop(ready)]
        ordered.append(step)
        for consumer in consumers[step.id]:
            waiting[consumer].discard(step.id)
            if not waiting[consumer]:
                heapq.heappush(ready, by_id[consumer].index)
    if len(ordered) == len(steps):
        return tuple(ordered)
    raise PipelineSpecError(file, "steps", f"dependency cycle: {_cycle(steps, waiting)}")


def _cycle(steps: list[StepSpec], waiting: dict[str, set[str]]) -> str:
    """One cycle among the steps left waiting, from the first one listed: 'a' consumes 'b' …"""
    start = next(step.id for step in steps if waiting[step.id])
    path = [start]
    position = {start: 0}
    current = start
    while True:
        # A step still waiting waits for at least one producer that is also still waiting.
        producer = next(p for p in _listed(steps, waiting[current]) if waiting[p])
        if producer in position:
            cycle = [*path[position[producer] :], producer]
            return " consumes ".join(f"'{s}'" for s in cycle)
        position[producer] = len(path)
        path.append(producer)
        current = producer


def _listed(steps: list[StepSpec], ids: set[str]) -> list[str]:
    return [step.id for step in steps if step.id in ids]


def _parse_step(raw: Any, i: int, earlier: set[str], file: str) -> StepSpec:
    where = f"steps[{i}]"
    if not isinstance(raw, dict):
        raise PipelineSpecError(file, where, "must be a table")
    _unknown(raw, _STEP_KEYS, file, f"{where}.")
    step_id = raw.get("id")
    if not isinstance(step_id, str) or not is_valid_step_id(step_id):
        raise PipelineSpecError(file, f"{where}.id", "required; 1-64 characters of [A-Za-z0-9_-]")
    if step_id in earlier:
        raise PipelineSpecError(file, f"{where}.id", f"duplicate step id '{step_id}'")
    module = raw.get("module")
    if not isinstance(module, str) or not module.strip():
        raise PipelineSpecError(file, f"{where}.module", "required; a module name")
    try:
        scope = Scope(raw.get("scope", Scope.DOCUMENT.value))
    except ValueError:
        raise PipelineSpecError(file, f"{where}.scope", "must be 'document' or 'corpus'") from None
    consumes = _str_list(raw.get("consumes", []), file, f"{where}.consumes")
    if len(set(consumes)) != len(consumes):
        raise PipelineSpecError(file, f"{where}.consumes", "names a step twice")
    params = raw.get("params", {})
    if not isinstance(params, dict):
        raise PipelineSpecError(file, f"{where}.params", "must be a table")
    profile = raw.get("profile")
    if profile is not None and (not isinstance(profile, str) or not profile):
        raise PipelineSpecError(file, f"{where}.profile", "must be a profile id")
    validators = _str_list(raw.get("validators", []), file, f"{where}.validators")
    partial = raw.get("partial", False)
    if not isinstance(partial, bool):
        raise PipelineSpecError(file, f"{where}.partial", "must be true or false")
    if partial and scope is not Scope.CORPUS:
        raise PipelineSpecError(
            file, f"{where}.partial", 'only a step with scope = "corpus" can run on part of them'
        )
    mode = raw.get("mode")
    if mode is not None and mode not in ("online", "batch"):
        raise PipelineSpecError(file, f"{where}.mode", "must be 'online' or 'batch'")
    return StepSpec(
        id=step_id,
        module=module,
        scope=scope,
        consumes=consumes,
        params=_plain(params),
        profile=profile,
        validators=validators,
        partial=partial,
        index=i,
        mode=mode,
    )


def _plain(value: Any) -> Any:
    """TOML dates/times become ISO strings so params always encode canonically."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str | int | float | bool):
        return value
    return str(value)
