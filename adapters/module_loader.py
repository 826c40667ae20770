"""Turn a pipeline's `module = "..."` spec into a checked module or validator instance.

Spec forms, tried in this order:
- a built-in name (`builtin.terms`);
- `path/file.py:Class`, a file relative to the pipeline directory (any spec whose left
  part ends in `.py` or contains `/`);
- `pkg.mod:Class`, an importable module;
- an entry point name in group `runjournal.modules` (`runjournal.validators`).

Whatever a plugin does while being imported or constructed, the caller sees either an
instance that passed the declaration checks or a `ModuleLoadError` with a one-line
message: plugin code is not trusted to fail politely.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import re
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from runjournal.adapters.builtin_modules import BUILTINS, is_builtin_class
from runjournal.adapters.module_stdout import module_stdout_to_stderr
from runjournal.domain.lazy_pattern import LazyPattern
from runjournal.domain.modules import (
    Module,
    ModuleContractError,
    Validator,
    check_module_declarations,
    check_validator_declarations,
)
from runjournal.domain.pipeline import ModuleShipment
from runjournal.domain.redaction import redact_text
from runjournal.domain.runner.boundary import exception_text

__all__ = [
    "MODULE_ENTRY_POINT_GROUP",
    "VALIDATOR_ENTRY_POINT_GROUP",
    "ModuleLoadError",
    "load_module",
    "load_shipped_module",
    "load_validator",
    "module_shipment",
    "module_source",
    "plugin_module_name",
]

MODULE_ENTRY_POINT_GROUP = "runjournal.modules"
VALIDATOR_ENTRY_POINT_GROUP = "runjournal.validators"
_MAX_MESSAGE = 400
_CONTROL = LazyPattern(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _one_line(text: str) -> str:
    """Plugin-supplied text made safe for a one-line error: no newlines or escapes."""
    flat = redact_text(" ".join(text.split()))  # before cutting: a cut token would not match
    flat = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", flat)
    return flat if len(flat) <= _MAX_MESSAGE else flat[: _MAX_MESSAGE - 1] + "\u2026"


class ModuleLoadError(Exception):
    """A module or validator spec could not be turned into a checked instance."""

    def __init__(self, spec: str, message: str, *, kind: str = "module") -> None:
        self.spec = spec
        self.message = _one_line(message)
        self.kind = kind
        super().__init__(f"cannot load {kind} {_one_line(repr(spec))}: {self.message}")


@dataclass(frozen=True)
class _Kind:
    """What differs between loading a module and loading a validator."""

    name: str
    base: type
    group: str
    builtins: Mapping[str, type]


_MODULE = _Kind("module", Module, MODULE_ENTRY_POINT_GROUP, BUILTINS)
_VALIDATOR = _Kind("validator", Validator, VALIDATOR_ENTRY_POINT_GROUP, {})
_MISSING = object()
_DOTTED = LazyPattern(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def load_module(spec: str, *, pipeline_dir: str, default_fingerprint: str = "") -> Module:
    """A checked, freshly constructed module for `spec` (see the module docstring);
    `default_fingerprint` is the pipeline's `plugin_fingerprint` ("source" or "")."""
    instance = _load(spec, pipeline_dir, _MODULE, default_fingerprint)
    assert isinstance(instance, Module)
    return instance


def load_validator(spec: str, *, pipeline_dir: str) -> Validator:
    """A checked, freshly constructed validator for `spec`."""
    instance = _load(spec, pipeline_dir, _VALIDATOR)
    assert isinstance(instance, Validator)
    return instance


def _load(spec: str, pipeline_dir: str, kind: _Kind, default_fingerprint: str = "") -> Any:
    def fail(message: str) -> ModuleLoadError:
        return ModuleLoadError(spec, message, kind=kind.name)

    if not isinstance(spec, str) or not spec.strip() or spec != spec.strip():
        raise fail("the spec must be a non-empty string without surrounding spaces")
    if spec in kind.builtins:
        target: object = kind.builtins[spec]
    elif ":" in spec:
        where, _, attribute = spec.rpartition(":")
        if not where or not attribute:
            raise fail("expected 'path/file.py:Class' or 'package.module:Class'")
        if where.endswith(".py") or "/" in where:
            namespace = _import_file(Path(pipeline_dir), where, fail)
        else:
            namespace = _import_dotted(where, fail)
        target = _attribute(namespace, attribute, fail)
    elif spec.endswith(".py") or "/" in spec:
        raise fail("a file needs a class name: 'path/file.py:Class'")
    elif spec.startswith("builtin."):
        known = ", ".join(sorted(kind.builtins)) or "none"
        raise fail(f"no built-in {kind.name} has this name (built-ins: {known})")
    else:
        target = _entry_point(spec, kind, fail)
    return _instantiate(target, kind, fail, default_fingerprint)


def _import_file(
    pipeline_dir: Path, relative: str, fail: Callable[[str], ModuleLoadError]
) -> types.ModuleType:
    path = Path(pipeline_dir, relative).absolute()
    try:
        if not path.exists():
            raise fail("file not found")
        if not path.is_file():
            raise fail("not a regular file")
        source = path.read_bytes()
    except OSError as exc:
        raise fail(f"cannot read file: {exc.strerror or exc}") from None
    return _exec_plugin(path, source, fail)


def _exec_plugin(
    path: Path, source: bytes, fail: Callable[[str], ModuleLoadError]
) -> types.ModuleType:
    """The plugin's namespace: `source` executed as the file at `path` (cached by digest)."""
    name = plugin_module_name(path)
    cached = sys.modules.get(name)
    digest = hashlib.sha256(source).hexdigest()
    if cached is not None and getattr(cached, "__runjournal_source_sha256__", None) == digest:
        return cached

    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise fail("not importable as a Python file")
    module = importlib.util.module_from_spec(spec)
    module.__runjournal_source_sha256__ = digest  # type: ignore[attr-defined]
    module.__runjournal_source__ = source  # type: ignore[attr-defined]  # shipped to workers
    # Compiled here rather than by the loader so no __pycache__ lands in the pipeline dir.
    sys.modules[name] = module
    try:
        with _plugin_code(fail):
            code = compile(source, str(path), "exec", dont_inherit=True)
            exec(code, module.__dict__)
    except BaseException:
        if sys.modules.get(name) is module:
            del sys.modules[name]
        if cached is not None:
            sys.modules[name] = cached
        raise
    return module


def module_shipment(
    spec: str, module: Module, *, pipeline_dir: str, default_fingerprint: str = ""
) -> ModuleShipment:
    """How a worker finds `module`, loaded from `spec` (docs/internals.md "Executors").

    A path plugin carries the bytes this process executed, so a worker runs the same
    code whatever its own disk holds; every other spec is loaded by name on the worker.
    """
    namespace = sys.modules.get(type(module).__module__)
    source = getattr(namespace, "__runjournal_source__", None)
    filename = getattr(namespace, "__file__", None)
    if isinstance(source, bytes) and isinstance(filename, str):
        return ModuleShipment(
            spec,
            pipeline_dir,
            plugin_path=filename,
            plugin_source=source,
            default_fingerprint=default_fingerprint,
        )
    return ModuleShipment(spec, pipeline_dir, default_fingerprint=default_fingerprint)


def load_shipped_module(shipment: ModuleShipment) -> Module:
    """On a worker: a checked module for `shipment`, a path plugin from its shipped bytes."""
    spec = shipment.spec
    if shipment.plugin_source is None or shipment.plugin_path is None:
        return load_module(
            spec,
            pipeline_dir=shipment.pipeline_dir,
            default_fingerprint=shipment.default_fingerprint,
        )

    def fail(message: str) -> ModuleLoadError:
        return ModuleLoadError(spec, message)

    namespace = _exec_plugin(Path(shipment.plugin_path), shipment.plugin_source, fail)
    target = _attribute(namespace, spec.rpartition(":")[2], fail)
    instance = _instantiate(target, _MODULE, fail, shipment.default_fingerprint)
    assert isinstance(instance, Module)
    return instance


def module_source(module: Module) -> tuple[str, str] | None:
    """(file, `class:<sha256>` of the class's own code) for the class defining `module`.

    The digest is over the class's own functions, the prompt strings they read and its
    string attributes (adapters/function_steps.py `class_source_digest`), so an edit of
    another class of the same file changes nothing here. None for the built-ins (their
    fingerprints are kept with runjournal's own version) and for a class whose file
    cannot be found (docs/modules.md "Fingerprints").
    """
    from runjournal.adapters.function_steps import class_source_digest

    cls = type(module)
    if is_builtin_class(cls):
        return None
    namespace = sys.modules.get(cls.__module__)
    filename = getattr(namespace, "__file__", None)
    if not isinstance(filename, str) or not filename.endswith(".py"):
        return None
    try:
        return filename, CLASS_DIGEST + class_source_digest(cls)
    except Exception:  # an odd class: no digest, no comparison
        return None


# `ModuleObserved.source_sha256` of a class's own code; older runs digested the whole file
# (no prefix), and the two are never compared.
CLASS_DIGEST = "class:"


def plugin_module_name(path: Path) -> str:
    """A stable `sys.modules` name for a plugin file, unique per absolute path.

    msgspec resolves a Struct's postponed annotations through `sys.modules`, so a
    plugin must be registered there; two `terms.py` in two directories must not clash.
    """
    absolute = str(Path(path).absolute())
    stem = re.sub(r"\W", "_", Path(absolute).stem) or "plugin"
    digest = hashlib.sha256(absolute.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f"_runjournal_plugin_{stem}_{digest}"


def _import_dotted(name: str, fail: Callable[[str], ModuleLoadError]) -> types.ModuleType:
    if not _DOTTED.fullmatch(name):
        raise fail(f"{name!r} is not a dotted module name")
    with _plugin_code(fail, missing=name):
        module = importlib.import_module(name)
    return module


def _attribute(namespace: object, attribute: str, fail: Callable[[str], ModuleLoadError]) -> Any:
    if not _DOTTED.fullmatch(attribute):
        raise fail(f"{attribute!r} is not a class name")
    target = namespace
    for part in attribute.split("."):
        with _plugin_code(fail, f"looking up {attribute!r}"):
            target = getattr(target, part, _MISSING)
        if target is _MISSING:
            raise fail(f"has no attribute {attribute!r}")
    return target


def _entry_point(name: str, kind: _Kind, fail: Callable[[str], ModuleLoadError]) -> Any:
    import importlib.metadata  # only for entry-point names: not at start-up

    try:
        found = [ep for ep in importlib.metadata.entry_points(group=kind.group) if ep.name == name]
    except Exception as exc:
        raise fail(f"cannot read installed entry points: {type(exc).__name__}: {exc}") from None
    values = sorted({ep.value for ep in found})
    if not values:
        raise fail(
            f"not a built-in name, not 'file.py:Class' or 'package.module:Class', and no "
            f"installed package provides an entry point {name!r} in group {kind.group!r}"
        )
    if len(values) > 1:
        raise fail(f"several entry points named {name!r} in group {kind.group!r}: {values}")
    entry = next(ep for ep in found if ep.value == values[0])
    with _plugin_code(fail, f"loading entry point {entry.value!r}"):
        target = entry.load()
    return target


def _instantiate(
    target: object,
    kind: _Kind,
    fail: Callable[[str], ModuleLoadError],
    default_fingerprint: str = "",
) -> Any:
    if not isinstance(target, type) or not issubclass(target, kind.base):
        what = (
            f"class {target.__qualname__!r}"
            if isinstance(target, type)
            else f"an object of type {type(target).__name__!r}"
        )
        raise fail(
            f"{what} is not a runjournal {kind.base.__name__} "
            f"(a subclass of runjournal.domain.modules.{kind.base.__name__})"
        )
    if kind is _MODULE:
        from runjournal.adapters.function_steps import resolve_source_fingerprint

        with _plugin_code(fail, "computing its source fingerprint"):
            # fingerprint = "source", or none in a `plugin_fingerprint = "source"` pipeline
            target = resolve_source_fingerprint(target, default=default_fingerprint)
    with _plugin_code(fail, "constructing it"):
        instance = target()
    with _plugin_code(fail, "checking its declarations"):
        try:
            if kind is _MODULE:
                check_module_declarations(instance)
            else:
                check_validator_declarations(instance)
        except ModuleContractError as exc:
            raise fail(str(exc)) from None
    if kind is _MODULE:
        _check_codecs(instance, fail)
    return instance


def _check_codecs(module: Module, fail: Callable[[str], ModuleLoadError]) -> None:
    """Refuse codec types msgspec cannot decode now, not at the first checkpoint."""
    for attr in ("chunk_type", "merged_type", "artifact_type"):
        declared = getattr(type(module), attr)
        with _plugin_code(fail, f"checking `{attr}`", prefix=f"`{attr}` is not a msgspec type"):
            msgspec.json.Decoder(declared)


@contextlib.contextmanager
def _plugin_code(
    fail: Callable[[str], ModuleLoadError],
    doing: str | None = None,
    *,
    missing: str | None = None,
    prefix: str | None = None,
) -> Iterator[None]:
    """Run plugin code with stdout sent to stderr and every failure turned into one line.

    KeyboardInterrupt still propagates: an operator's Ctrl-C is not a plugin error.
    """
    try:
        with module_stdout_to_stderr():
            yield
    except ModuleLoadError:
        raise
    except SyntaxError as exc:
        where = f" at line {exc.lineno}" if exc.lineno else ""
        raise fail(f"syntax error{where}: {exc.msg}") from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit and BaseException subclasses are plugin errors
        if (
            isinstance(exc, ModuleNotFoundError)
            and missing is not None
            and exc.name is not None
            and _is_prefix(exc.name, missing)
        ):
            raise fail(f"no module named {exc.name!r}") from None
        text = _message_of(exc)  # never the plugin's own __str__ failing here
        if prefix is not None:
            raise fail(f"{prefix}: {text}") from None
        while_doing = f" while {doing}" if doing else ""
        raise fail(f"raised {type(exc).__name__}{while_doing}: {text}") from None


def _message_of(exc: BaseException) -> str:
    """The exception's message, or `<unprintable>` when its `__str__` raises."""
    described = exception_text(exc)
    if described.startswith("<unprintable"):
        return "<unprintable>"
    return described.partition(": ")[2]


def _is_prefix(name: str, dotted: str) -> bool:
    return dotted == name or dotted.startswith(name + ".")
