"""The module API: what pipeline plugins implement and may rely on.

A module implements the three stages of a lane (extract per chunk, merge, normalize)
and declares an explicit semantic fingerprint and codec types, so checkpoints can be
validated and reused without ever hashing code. Modules get a context, never a path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final, Protocol

import msgspec
from runjournal.domain.llm import CallOptions
from runjournal.domain.redaction import is_credential_shaped

__all__ = [
    "CallOptions",
    "Chunk",
    "LLMRuntime",
    "Module",
    "ModuleContractError",
    "Normalized",
    "OutputFile",
    "StageContext",
    "TraceSink",
    "Validator",
]


class Chunk(msgspec.Struct, frozen=True):
    """One chunk of one source: byte offsets into the UTF-8 source and its text."""

    id: str
    source: str
    start: int
    end: int
    text: str
    sha256: str


class PlannedCall(msgspec.Struct, frozen=True):
    """One model call an extract stage would make, as `plan` forecasts it
    (`Module.planned_calls`, docs/modules.md "Forecasting LLM calls")."""

    prompt: str
    system: str | None = None


class Normalized(msgspec.Struct, frozen=True):
    """A lane's normalize result: the canonical value plus warnings for the operator."""

    value: Any
    warnings: list[str] = msgspec.field(default_factory=list)


class OutputFile(msgspec.Struct, frozen=True):
    """An extra logical output file; `name` is relative to the run directory."""

    name: str
    data: bytes


class LLMRuntime(Protocol):
    """What a module may ask of the LLM runtime (a stub raises without a profile).

    `complete` returns the reply text. `ask` returns a reply of `reply_type` (a msgspec
    type): the runtime sends its JSON Schema (or `schema`, when given) as the structured
    output format, decodes and validates the reply, and re-asks with the validation error
    a bounded number of times (docs/modules.md "Asking for structured output").
    A call that cannot produce a reply raises `LLMCallFailed` with a typed cause.
    """

    def complete(
        self, prompt: str, *, system: str | None = None, options: CallOptions | None = None
    ) -> str: ...

    def ask(
        self,
        prompt: str,
        reply_type: Any,
        *,
        system: str | None = None,
        options: CallOptions | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Any: ...


class TraceSink(Protocol):
    """Module-supplied trace material; a no-op unless `--debug trace` is on."""

    def record(self, name: str, data: Mapping[str, Any]) -> None: ...


class _NoTrace:
    def record(self, name: str, data: Mapping[str, Any]) -> None:
        return None


class _NoLLM:
    def complete(self, prompt: str, **_: Any) -> str:
        raise ModuleContractError("this step has no LLM profile; set `profile` on the step")

    def ask(self, prompt: str, reply_type: Any, **_: Any) -> Any:
        raise ModuleContractError("this step has no LLM profile; set `profile` on the step")


class StageContext(msgspec.Struct, frozen=True):
    """Everything a stage may read. `consumed` maps step id -> lane id -> decoded artifact."""

    step: str
    lane: str
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    references: dict[str, str] = msgspec.field(default_factory=dict)
    consumed: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    overrides: dict[str, str] = msgspec.field(default_factory=dict)
    llm: Any = msgspec.field(default_factory=_NoLLM)
    trace: Any = msgspec.field(default_factory=_NoTrace)


class ModuleContractError(Exception):
    """A module broke the API contract (missing declaration, wrong type)."""


class Module:
    """Base class for pipeline modules. Constructed with no arguments.

    Subclasses set the class attributes below and implement the three stages.
    `fingerprint` is the author's explicit semantic version: bump it whenever the
    module's behaviour changes, because reuse decisions trust it.

    `override_keys` declares which `--set` keys the module reads from `ctx.overrides`:
    a tuple of names (empty: it reads none), or None (the default: not declared, so it
    may read any). A declaring module sees only its keys in `ctx.overrides`, and only
    they enter its steps' identity; a `--set` key that no step reads is an error
    (docs/modules.md "Overrides").

    `known_params` declares the names of the step params the module reads (None: not
    declared); with `strict_params` an unknown name is an error before the run (the
    built-ins are strict), without it a warning. `check_params` types their values
    (docs/modules.md "Checking params").

    `llm_stages` declares which stages call `ctx.llm` (`("extract",)`, `()` for none),
    or None (the default: not declared, any may). `plan` estimates LLM calls only for
    stages that may call a model (docs/operations.md "`plan`").

    `merge_streams` declares that `merge` reads its parts once, in order, from any
    iterable: the runner then hands it an iterator that loads and decodes one part at a
    time (from the checkpoint store when it can) instead of a list of all of them, so a
    lane of many chunks never holds every extract value at once. The merged value must be
    the same as for the list (docs/modules.md "Streaming merge"). False (the default):
    `merge` is given a list.
    """

    name: ClassVar[str] = ""
    fingerprint: ClassVar[str] = ""
    artifact_kind: ClassVar[str] = ""
    schema: ClassVar[str] = ""
    media_type: ClassVar[str] = "application/json"
    chunk_type: ClassVar[Any] = Any
    merged_type: ClassVar[Any] = Any
    artifact_type: ClassVar[Any] = Any
    override_keys: ClassVar[tuple[str, ...] | None] = None
    llm_stages: ClassVar[tuple[str, ...] | None] = None
    known_params: ClassVar[tuple[str, ...] | None] = None
    strict_params: ClassVar[bool] = False
    merge_streams: ClassVar[bool] = False

    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> list[str]:
        """Problems with a step's `params`, found before the run (`runjournal check`,
        and the start of `run` and `plan`): one line each, empty when none. Raising an
        exception is one problem with its message. The default finds none; a module
        overrides it to type its params (docs/modules.md "Checking params")."""
        return []

    def extract(self, chunk: Chunk, ctx: StageContext) -> Any:
        raise NotImplementedError

    def merge(self, parts: list[Any], ctx: StageContext) -> Any:
        """The lane's value from its chunks' extract values, in chunk order: a list, or a
        one-pass iterator when the module declares `merge_streams`."""
        raise NotImplementedError

    def normalize(self, merged: Any, ctx: StageContext) -> Normalized:
        raise NotImplementedError

    def outputs(self, artifact: Any, ctx: StageContext) -> list[OutputFile]:
        return []

    def planned_calls(self, chunk: Chunk, ctx: StageContext) -> list[PlannedCall] | None:
        """The model calls `extract` would make for `chunk`, without making them: None,
        not known (the default; `plan` then counts one call of the chunk's size).

        `plan` prices these prompts and forecasts the provider's prompt-cache hits from
        the prefixes they share (docs/modules.md "Forecasting LLM calls"). It must not
        call `ctx.llm` nor do I/O.
        """
        return None

    def reads(self, stage: str, ctx: StageContext) -> Mapping[str, Mapping[str, Any]] | None:
        """What `stage` reads of `ctx.consumed`: None, all of it (the default).

        Otherwise the same shape (step -> lane -> value) holding only what the stage
        reads, each value a part of that lane's artifact. The stage then sees only
        these parts, and only they are its dependencies: an artifact whose part did not
        change keeps the stage's checkpoints (docs/modules.md "Declaring what a stage reads").
        """
        return None


class Validator:
    """An optional per-step check of a lane's artifact, with its own fingerprint.

    `check` returns warnings; raising fails the stage like a module error.
    """

    name: ClassVar[str] = ""
    fingerprint: ClassVar[str] = ""

    def check(self, artifact: Any, ctx: StageContext) -> list[str]:
        return []


# Declarations that reach the journal, checkpoint provenance and dependency fingerprints
# verbatim: they are never legitimately secrets, so a credential-shaped one is refused.
_MODULE_DECLARATIONS: Final = ("name", "fingerprint", "artifact_kind", "schema", "media_type")
_VALIDATOR_DECLARATIONS: Final = ("name", "fingerprint")


def _refuse_credential_shaped(cls: type, kind: str, attrs: tuple[str, ...]) -> None:
    """The message names the attribute only: the value itself must not be repeated."""
    for attr in attrs:
        value = getattr(cls, attr, "")
        if isinstance(value, str) and value and is_credential_shaped(value):
            raise ModuleContractError(
                f"{kind} {cls.__qualname__} declares a credential-shaped `{attr}`; "
                "declarations are recorded verbatim and must not hold secrets"
            )


def check_module_declarations(module: Module) -> None:
    """Refuse a module that does not declare what identity and codecs rely on."""
    cls = type(module)
    for attr in ("fingerprint", "artifact_kind", "schema", "media_type"):
        value = getattr(cls, attr, "")
        if not isinstance(value, str) or not value:
            raise ModuleContractError(f"module {cls.__qualname__} must declare `{attr}`")
    _refuse_credential_shaped(cls, "module", _MODULE_DECLARATIONS)
    keys = getattr(cls, "override_keys", None)
    if keys is not None and (
        not isinstance(keys, tuple) or not all(isinstance(k, str) and k.strip() for k in keys)
    ):
        raise ModuleContractError(
            f"module {cls.__qualname__} must declare `override_keys` as a tuple of names "
            "(or leave it None)"
        )
    if not isinstance(getattr(cls, "merge_streams", False), bool):
        raise ModuleContractError(
            f"module {cls.__qualname__} must declare `merge_streams` as True or False"
        )
    for stage in ("extract", "merge", "normalize"):
        if getattr(cls, stage) is getattr(Module, stage):
            raise ModuleContractError(f"module {cls.__qualname__} must implement `{stage}`")


def streams_merge(module: Any) -> bool:
    """Whether `module`'s merge is handed an iterator of its parts (`merge_streams`)."""
    return getattr(type(module), "merge_streams", False) is True


def reads_override(module: Module, key: str) -> bool:
    """Whether `module` may read `--set` key `key` (an undeclared module may read any)."""
    keys = type(module).override_keys
    return keys is None or key in keys


def overrides_for(module: Module, overrides: Mapping[str, str]) -> dict[str, str]:
    """The overrides a module sees and its steps' identity covers: its declared keys."""
    keys = type(module).override_keys
    if keys is None:
        return dict(overrides)
    return {k: v for k, v in overrides.items() if k in keys}


def check_validator_declarations(validator: Validator) -> None:
    cls = type(validator)
    if not isinstance(cls.fingerprint, str) or not cls.fingerprint:
        raise ModuleContractError(f"validator {cls.__qualname__} must declare `fingerprint`")
    _refuse_credential_shaped(cls, "validator", _VALIDATOR_DECLARATIONS)


def may_call_llm(module: Any, stage: str) -> bool:
    """Does `module`'s `stage` call a model? Yes unless its `llm_stages` says otherwise."""
    declared = getattr(type(module), "llm_stages", None)
    if not isinstance(declared, tuple):
        return True
    return stage in declared


def param_problems(module: Any, params: Mapping[str, Any]) -> list[str]:
    """What is wrong with a step's `params` for `module`, before the run: unknown names
    of a strict module (`known_params`, `strict_params`), then its `check_params`."""
    cls = type(module)
    problems: list[str] = []
    known = getattr(cls, "known_params", None)
    if isinstance(known, tuple) and getattr(cls, "strict_params", False):
        unknown = sorted(k for k in params if k not in known)
        if unknown:
            import difflib

            hints = [
                f"{k!r} (did you mean {close[0]!r}?)" if close else repr(k)
                for k in unknown
                for close in [difflib.get_close_matches(k, known, n=1)]
            ]
            listed = ", ".join(known) or "none"
            name = getattr(cls, "name", "") or cls.__qualname__
            problems.append(f"{name}: unknown params {', '.join(hints)}; known params: {listed}")
    check = getattr(cls, "check_params", None)
    if callable(check):
        try:
            problems.extend(str(p) for p in check(params) or ())
        except Exception as exc:
            problems.append(str(exc) or type(exc).__name__)
    return problems
