"""Steps as plain functions: `@runjournal.chunk_step` (docs/python-api.md "Steps as plain
functions").

The decorator turns a function of a chunk into a `Module` subclass with the full module
contract (docs/modules.md "The module API"): `extract` calls the function, `merge` and
`normalize` have defaults, the codec types come from the annotations, and the class is
named and placed where the function was, so the loader finds it by the same
`package.module:name` spec (or `path/file.py:name`) as any module class.

`fingerprint="source"` (the default) derives the fingerprint from the code: the code
objects of the function and of its `merge`, `normalize` and `outputs` (bytecode, constants,
names, nested functions) and the strings it closes over or reads as globals (its prompts),
so editing any of them re-executes exactly that step (docs/internals.md "Identity per
stage"). A different Python version compiles different bytecode: the step runs again.
"""

from __future__ import annotations

import hashlib
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from runjournal.domain.modules import Module, Normalized, OutputFile

SOURCE = "source"
_PROMPT_TYPES = (str, bytes)


def chunk_step(
    fn: Callable[..., Any] | None = None,
    *,
    merge: Callable[..., Any] | None = None,
    normalize: Callable[..., Any] | None = None,
    outputs: Callable[..., Any] | None = None,
    fingerprint: str = SOURCE,
    name: str | None = None,
    artifact_kind: str | None = None,
    schema: str | None = None,
    override_keys: tuple[str, ...] = (),
    llm_stages: tuple[str, ...] | None = None,
    chunk_type: Any = None,
    merged_type: Any = None,
    artifact_type: Any = None,
) -> Any:
    """`@chunk_step` or `@chunk_step(merge=..., normalize=..., fingerprint=...)`: a
    `Module` subclass whose `extract(chunk, ctx)` is `fn(chunk)` (or `fn(chunk, ctx)`).

    - `merge(parts[, ctx])`: default, the chunks' lists concatenated in chunk order when
      `fn` returns lists, else the list of the chunks' results;
    - `normalize(merged[, ctx])`: default, the merged value as is; a plain value or a
      `Normalized(value, warnings)`;
    - `outputs(artifact[, ctx])`: files of the run directory, a list of `OutputFile` or a
      mapping name -> bytes or str;
    - `fingerprint`: `"source"` (from the code and its prompt strings) or the author's own
      version string, bumped by hand (docs/modules.md "Fingerprints").
    """

    def build(function: Callable[..., Any]) -> type[Module]:
        return _module_class(
            function,
            merge=merge,
            normalize=normalize,
            outputs=outputs,
            fingerprint=fingerprint,
            name=name,
            artifact_kind=artifact_kind,
            schema=schema,
            override_keys=tuple(override_keys),
            llm_stages=llm_stages,
            types_=(chunk_type, merged_type, artifact_type),
        )

    return build(fn) if fn is not None else build


def _returns(function: Callable[..., Any] | None) -> Any:
    """The function's return annotation, resolved; None when it has none."""
    if function is None:
        return None
    try:
        return typing.get_type_hints(function).get("return")
    except Exception:  # an annotation naming what cannot be resolved: no type from it
        return None


def _takes_ctx(function: Callable[..., Any]) -> bool:
    """Whether `function` takes a second positional parameter (the StageContext)."""
    try:
        params = [
            p
            for p in inspect.signature(function).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return False
    return len(params) >= 2


def _caller(function: Callable[..., Any]) -> Callable[[Any, Any], Any]:
    if _takes_ctx(function):
        return lambda value, ctx: function(value, ctx)
    return lambda value, ctx: function(value)


def _is_list(tp: Any) -> bool:
    return tp is list or typing.get_origin(tp) is list


def _module_class(
    function: Callable[..., Any],
    *,
    merge: Callable[..., Any] | None,
    normalize: Callable[..., Any] | None,
    outputs: Callable[..., Any] | None,
    fingerprint: str,
    name: str | None,
    artifact_kind: str | None,
    schema: str | None,
    override_keys: tuple[str, ...],
    llm_stages: tuple[str, ...] | None,
    types_: tuple[Any, Any, Any],
) -> type[Module]:
    chunk_tp = types_[0] or _returns(function) or Any
    if types_[1] is not None:
        merged_tp = types_[1]
    elif merge is not None:
        merged_tp = _returns(merge) or Any
    else:
        merged_tp = chunk_tp if _is_list(chunk_tp) else list[chunk_tp]  # type: ignore[valid-type]
    artifact_tp = types_[2] or (_returns(normalize) if normalize is not None else merged_tp)
    if artifact_tp is None or artifact_tp is Normalized:
        artifact_tp = Any
    qualified = f"{function.__module__}.{function.__qualname__}"
    if fingerprint == SOURCE:
        parts = [f for f in (function, merge, normalize, outputs) if f is not None]
        fingerprint = f"{SOURCE}:{source_digest(*parts)[:24]}"

    extract_call = _caller(function)
    flatten = merge is None and _is_list(chunk_tp)
    merge_call = _caller(merge) if merge is not None else None
    normalize_call = _caller(normalize) if normalize is not None else None
    outputs_call = _caller(outputs) if outputs is not None else None

    def extract(self: Module, chunk: Any, ctx: Any) -> Any:
        return extract_call(chunk, ctx)

    def merge_stage(self: Module, parts: list[Any], ctx: Any) -> Any:
        if merge_call is not None:
            return merge_call(parts, ctx)
        if flatten:
            return [item for part in parts for item in part]
        return list(parts)

    def normalize_stage(self: Module, merged: Any, ctx: Any) -> Normalized:
        value = normalize_call(merged, ctx) if normalize_call is not None else merged
        return value if isinstance(value, Normalized) else Normalized(value)

    attrs: dict[str, Any] = {
        "__module__": function.__module__,
        "__qualname__": function.__qualname__,
        "__doc__": function.__doc__,
        "name": name or qualified,
        "fingerprint": fingerprint,
        "artifact_kind": artifact_kind or function.__name__,
        "schema": schema or f"{qualified}/1",
        "chunk_type": chunk_tp,
        "merged_type": merged_tp,
        "artifact_type": artifact_tp,
        "override_keys": override_keys,
        "llm_stages": llm_stages,
        "extract": extract,
        "merge": merge_stage,
        "normalize": normalize_stage,
        "function": staticmethod(function),  # the plain function, to call or test directly
    }
    if outputs_call is not None:

        def outputs_stage(self: Module, artifact: Any, ctx: Any) -> list[OutputFile]:
            made = outputs_call(artifact, ctx)
            if isinstance(made, Mapping):
                return [
                    OutputFile(n, d.encode("utf-8") if isinstance(d, str) else bytes(d))
                    for n, d in made.items()
                ]
            return list(made)

        attrs["outputs"] = outputs_stage
    return types.new_class(function.__name__, (Module,), {}, lambda ns: ns.update(attrs))


# --- source fingerprints ------------------------------------------------------------------


def source_digest(*functions: Callable[..., Any]) -> str:
    """sha256 over each function's code objects and the prompt strings it uses: the
    strings in its closure and the module globals its code names."""
    h = hashlib.sha256()
    for function in functions:
        code = getattr(function, "__code__", None)
        if code is None:  # a callable object: its class's __call__
            code = getattr(type(function).__call__, "__code__", None)
        if code is None:
            h.update(repr(function).encode("utf-8", "backslashreplace"))
            continue
        _code(h, code)
        cells = getattr(function, "__closure__", None) or ()
        for var, cell in zip(code.co_freevars, cells, strict=False):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            _prompt(h, "closure", var, value)
        scope = getattr(function, "__globals__", {})
        for global_name in sorted(_names(code)):
            if global_name in scope:
                _prompt(h, "global", global_name, scope[global_name])
    return h.hexdigest()


def _code(h: Any, code: types.CodeType) -> None:
    h.update(b"code\0" + code.co_code)
    h.update(("\0".join(code.co_names) + "\1").encode("utf-8"))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code(h, const)
        else:
            h.update(_canonical(const).encode("utf-8", "backslashreplace") + b"\0")


def _canonical(value: Any) -> str:
    """A repr that does not depend on hash seeds (frozenset constants are sorted)."""
    if isinstance(value, frozenset):
        return "frozenset(" + ",".join(sorted(_canonical(v) for v in value)) + ")"
    if isinstance(value, tuple):
        return "(" + ",".join(_canonical(v) for v in value) + ")"
    return repr(value)


def _names(code: types.CodeType) -> set[str]:
    """Every global name the code (and its nested functions) loads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _prompt(h: Any, kind: str, name: str, value: Any) -> None:
    """A string (a prompt) or a tuple/list of strings enters the digest; nothing else
    does (modules, functions and classes are not what a prompt edit changes)."""
    if isinstance(value, _PROMPT_TYPES) or (
        isinstance(value, (tuple, list)) and all(isinstance(v, _PROMPT_TYPES) for v in value)
    ):
        h.update(f"{kind}\0{name}\0{_canonical(value)}\0".encode("utf-8", "backslashreplace"))


def class_source_digest(cls: type) -> str:
    """sha256 over a module class's own code: the functions each class of its MRO up to
    `Module` defines (methods, static and class methods, properties), with the prompt
    strings they use, and its string class attributes (a prompt kept on the class). Two
    classes of one file have their own digests: editing one changes only its own."""
    h = hashlib.sha256()
    for klass in cls.__mro__:
        if klass is Module or klass is object or klass.__module__.startswith("runjournal."):
            continue
        h.update(f"class\0{klass.__qualname__}\0".encode())
        for attr, value in sorted(klass.__dict__.items()):
            function = _function_of(value)
            if function is not None:
                h.update(f"def\0{attr}\0".encode() + source_digest(function).encode())
            elif attr != "fingerprint" and not attr.startswith("__"):
                _prompt(h, "attribute", attr, value)
    return h.hexdigest()


def _function_of(value: Any) -> Callable[..., Any] | None:
    if isinstance(value, staticmethod | classmethod):
        value = value.__func__
    if isinstance(value, property):
        value = value.fget
    return value if isinstance(value, types.FunctionType) else None


def resolve_source_fingerprint(cls: type[Module], *, default: str = "") -> type[Module]:
    """A plugin class that declares `fingerprint = "source"` (or declares none, in a
    pipeline whose `plugin_fingerprint` is `default` = "source"): a subclass of it whose
    fingerprint is `source:<digest of its code>` (docs/modules.md "Fingerprints"), so an
    edit of its code or prompts recomputes its steps; any other class as it is."""
    if (getattr(cls, "fingerprint", None) or default) != SOURCE:
        return cls
    resolved = f"{SOURCE}:{class_source_digest(cls)[:24]}"
    return types.new_class(
        cls.__name__,
        (cls,),
        {},
        lambda ns: ns.update(
            {"__module__": cls.__module__, "__qualname__": cls.__qualname__,
             "__doc__": cls.__doc__, "fingerprint": resolved}
        ),
    )  # fmt: skip
