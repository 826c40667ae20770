"""Effective configuration: one table of settings, five origins, one resolver (phase P1).

Every user-visible setting is declared once in `SETTINGS` (name, flag, env var, file key,
parser, default, description), so the resolver, `config show` and the docs cannot drift
apart. Resolution is value by value: flag > env > pipeline `[runjournal]` > user config >
default, and each value remembers where it came from. Every value the user gave is
checked, even one a higher origin overrides; a bad one raises `SettingsError`, one line
naming the setting and its origin. Nothing here creates a file or directory, so a
configuration error allocates nothing (SEMANTICS P1).
"""

from __future__ import annotations

import difflib
import enum
import os
import re
import tomllib
import unicodedata
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec
import platformdirs
from runjournal.domain.plan_keys import CacheMode

APP_NAME: Final = "runjournal"
ENV_PREFIX: Final = "RUNJOURNAL_"
CONFIG_ENV_VAR: Final = "RUNJOURNAL_CONFIG"
USER_CONFIG_FILE: Final = "config.toml"
# Keys of the user config file that are not settings; their owners validate them.
USER_CONFIG_RESERVED: Final = frozenset({"profiles"})


class Origin(enum.StrEnum):
    FLAG = "flag"
    ENV = "env"
    PIPELINE = "pipeline"
    USER_CONFIG = "user-config"
    DEFAULT = "default"


_PRECEDENCE: Final = {origin: rank for rank, origin in enumerate(Origin)}

# Threads per lane; far above any useful parallelism, low enough to refuse nonsense in P1.
MAX_JOBS: Final = 1024


class DebugLevel(enum.StrEnum):
    """Debug bundle depth; `trace` implies `summary`."""

    OFF = "off"
    SUMMARY = "summary"
    TRACE = "trace"


# --- errors ---------------------------------------------------------------------------


def _escape(ch: str) -> str:
    cp = ord(ch)
    if cp < 0x100:
        return f"\\x{cp:02x}"
    if cp <= 0xFFFF:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def _one_line(text: str) -> str:
    """Escape control, format and separator characters so a message stays on one line."""
    return "".join(
        _escape(ch) if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") else ch
        for ch in text
    )


class SettingsError(Exception):
    """A configuration error (exit 2): one line naming the setting and its origin."""

    def __init__(
        self, setting: str, origin: Origin, message: str, *, source: str | None = None
    ) -> None:
        self.setting = setting
        self.origin = origin
        self.source = source
        self.message = _one_line(message)
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


class InvalidSettingValue(SettingsError):
    """A value that does not parse or is out of range."""


class UnknownSettingKey(SettingsError):
    """A key in a `[runjournal]` table or user config file that is not a setting."""


class UserConfigUnreadable(SettingsError):
    """The user config file exists but cannot be read or is not valid TOML."""


class RootsConflict(SettingsError):
    """Roots that coincide or nest in a way a cleanup could destroy data."""


class _Invalid(Exception):
    """Raised by parsers; the resolver turns it into `InvalidSettingValue`."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


# --- parsers --------------------------------------------------------------------------
# A parser gets the raw value (native TOML/click type or env string) and the directory
# relative paths are resolved against; it returns the typed value or raises `_Invalid`.

Parser = Callable[[object, str], object]
DefaultFactory = Callable[[Mapping[str, object], str], object]

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})
_INT_RE: Final = re.compile(r"[+-]?[0-9]+")
_URL_RE: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_POSTGRES_SCHEMES: Final = ("postgresql://", "postgres://")
_URL_PASSWORD_RE: Final = re.compile(r"(://[^/@\s:'\"]*:)[^@\s]*@")
_SECRET_QUERY_RE: Final = re.compile(r"((?:^|[?&;])(?:ssl)?pass(?:word|wd)?=)[^&;\s'\"]*", re.I)


def _parse_bool(raw: object, base_dir: str = "") -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        word = raw.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    raise _Invalid("a boolean (true/false, yes/no, on/off, 1/0)")


def _int_parser(low: int, high: int | None) -> Parser:
    expected = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"

    def parse(raw: object, base_dir: str = "") -> int:
        if isinstance(raw, bool):
            raise _Invalid(expected)
        if isinstance(raw, int):
            number = raw
        elif isinstance(raw, str) and _INT_RE.fullmatch(raw.strip()):
            try:
                number = int(raw.strip())
            except ValueError:  # beyond the interpreter's digit limit
                raise _Invalid(expected) from None
        else:
            raise _Invalid(expected)
        if number < low or (high is not None and number > high):
            raise _Invalid(expected)
        return number

    return parse


def _choice_parser(enum_type: type[enum.Enum]) -> Parser:
    values = [str(member.value) for member in enum_type]
    expected = "one of " + ", ".join(values)

    def parse(raw: object, base_dir: str = "") -> enum.Enum:
        if isinstance(raw, str) and raw.strip().lower() in values:
            return enum_type(raw.strip().lower())
        raise _Invalid(expected)

    return parse


def _path_text(raw: object, expected: str) -> str:
    if isinstance(raw, os.PathLike):
        raw = os.fspath(raw)
    if not isinstance(raw, str) or not raw.strip() or "\x00" in raw:
        raise _Invalid(expected)
    return raw


def _absolute(text: str, base_dir: str, expected: str) -> str:
    try:
        return os.path.realpath(os.path.join(base_dir, os.path.expanduser(text)))
    except (OSError, ValueError):
        raise _Invalid(expected) from None


def _parse_path(raw: object, base_dir: str) -> str:
    expected = "a non-empty path"
    return _absolute(_path_text(raw, expected), base_dir, expected)


def _parse_journal(raw: object, base_dir: str) -> str:
    """A PostgreSQL URL stays as given; SQLite (`sqlite:///path` or a path) becomes a path."""
    expected = "a path, sqlite:///PATH or postgresql://..."
    text = _path_text(raw, expected)
    if text.startswith(_POSTGRES_SCHEMES):
        return text
    if text.lower().startswith("sqlite:"):
        rest = text[len("sqlite:") :]
        text = rest[2:] if rest.startswith("//") else rest
        if not text:
            raise _Invalid(expected)
    elif _URL_RE.match(text):
        raise _Invalid(expected)
    return _absolute(text, base_dir, expected)


def _parse_profile(raw: object, base_dir: str = "") -> str:
    if (
        not isinstance(raw, str)
        or not raw.strip()
        or len(raw) > 128
        or any(unicodedata.category(ch).startswith("C") for ch in raw)
    ):
        raise _Invalid("a profile id (1-128 printable characters)")
    return raw


def is_postgres_url(journal: str) -> bool:
    return journal.startswith(_POSTGRES_SCHEMES)


def redact_journal(journal: str) -> str:
    """A journal location safe to show or record: a URL's password becomes `***`."""
    if not is_postgres_url(journal):
        return journal
    try:
        parts = urllib.parse.urlsplit(journal)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hostinfo = netloc.rpartition("@")
            if ":" in userinfo:
                userinfo = userinfo.split(":", 1)[0] + ":***"
            netloc = f"{userinfo}@{hostinfo}"
        query = _SECRET_QUERY_RE.sub(r"\1***", parts.query)
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))
    except ValueError:
        return "postgresql://***"


# --- the table ------------------------------------------------------------------------


def _default_output_root(resolved: Mapping[str, object], cwd: str) -> str:
    return os.path.realpath(os.path.join(cwd, "runs"))


def _default_cache_root(resolved: Mapping[str, object], cwd: str) -> str:
    return os.path.realpath(os.path.expanduser(platformdirs.user_cache_dir(APP_NAME)))


def _under_output_root(name: str) -> DefaultFactory:
    def default(resolved: Mapping[str, object], cwd: str) -> str:
        return os.path.realpath(os.path.join(str(resolved["output_root"]), name))

    return default


def _constant(value: object) -> DefaultFactory:
    return lambda resolved, cwd: value


class SettingSpec(msgspec.Struct, frozen=True):
    """One user-visible setting. `key` is both the `[runjournal]` and user-config key."""

    name: str
    flag: str
    type_name: str
    parse: Parser
    default: DefaultFactory
    default_text: str
    description: str

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def key(self) -> str:
        return self.name


SETTINGS: Final[tuple[SettingSpec, ...]] = (
    SettingSpec(
        "output_root",
        "--output-root DIR",
        "path",
        _parse_path,
        _default_output_root,
        "./runs (against the current directory)",
        "Root of run directories and of the default journal.",
    ),
    SettingSpec(
        "cache_root",
        "--cache-root DIR",
        "path",
        _parse_path,
        _default_cache_root,
        "the platform user cache dir for runjournal",
        "Root of the chunk-plan store and the checkpoint workspaces.",
    ),
    SettingSpec(
        "debug_root",
        "--debug-root DIR",
        "path",
        _parse_path,
        _under_output_root("debug"),
        "<output_root>/debug",
        "Root of debug bundles (written only with --debug).",
    ),
    SettingSpec(
        "journal",
        "--journal URL",
        "path or URL",
        _parse_journal,
        _under_output_root("journal.sqlite3"),
        "<output_root>/journal.sqlite3",
        "Event journal: a SQLite path, sqlite:///PATH, or postgresql://...",
    ),
    SettingSpec(
        "cache_mode",
        "--cache-mode MODE",
        "use | refresh | read-only | bypass",
        _choice_parser(CacheMode),
        _constant(CacheMode.USE),
        "use",
        "How the chunk-plan store is used; bypass never touches it.",
    ),
    SettingSpec(
        "checkpoints",
        "--checkpoints/--no-checkpoints",
        "bool",
        _parse_bool,
        _constant(True),
        "true",
        "Record stage checkpoints in the workspace so later runs can reuse them.",
    ),
    SettingSpec(
        "jobs",
        "--jobs N",
        "int 1..1024",
        _int_parser(1, MAX_JOBS),
        _constant(1),
        "1",
        "How many extract calls run at once within a lane.",
    ),
    SettingSpec(
        "debug",
        "--debug summary|trace",
        "off | summary | trace",
        _choice_parser(DebugLevel),
        _constant(DebugLevel.OFF),
        "off",
        "Write a debug bundle; trace also writes the summary.",
    ),
    SettingSpec(
        "profile",
        "--profile ID",
        "str",
        _parse_profile,
        _constant(None),
        "none",
        "Default LLM profile id for steps that do not name one.",
    ),
    SettingSpec(
        "profiles_file",
        "--profiles-file PATH",
        "path",
        _parse_path,
        _constant(None),
        "none",
        "TOML file with [profiles.<id>] tables.",
    ),
    SettingSpec(
        "chunk_map",
        "--chunk-map",
        "bool",
        _parse_bool,
        _constant(False),
        "false",
        "Write the accepted chunk map as chunk-map.json in the run directory.",
    ),
    SettingSpec(
        "chunk_map_index",
        "--chunk-map-index",
        "bool",
        _parse_bool,
        _constant(False),
        "false",
        "Also write chunk-map.index.json; implies chunk_map.",
    ),
    SettingSpec(
        "progress",
        "--no-progress",
        "bool",
        _parse_bool,
        _constant(True),
        "true",
        "Show progress on stderr.",
    ),
    SettingSpec(
        "batch_size",
        "--batch-size N",
        "int 1..10000",
        _int_parser(1, 10000),
        _constant(256),
        "256",
        "Journal events committed per batch while a run progresses.",
    ),
)

SETTINGS_BY_NAME: Final[Mapping[str, SettingSpec]] = {spec.name: spec for spec in SETTINGS}


# --- results --------------------------------------------------------------------------


class ResolvedSetting(msgspec.Struct, frozen=True):
    name: str
    value: Any
    origin: Origin
    source: str | None = None


def _display_value(name: str, value: object) -> object:
    if isinstance(value, enum.Enum):
        return value.value
    if name == "journal" and isinstance(value, str):
        return redact_journal(value)
    return value


class EffectiveConfig(msgspec.Struct, frozen=True):
    """The resolved settings; `origins` says where each value came from."""

    output_root: str
    cache_root: str
    debug_root: str
    journal: str
    cache_mode: CacheMode
    checkpoints: bool
    jobs: int
    debug: DebugLevel
    profile: str | None
    profiles_file: str | None
    chunk_map: bool
    chunk_map_index: bool
    progress: bool
    batch_size: int
    origins: dict[str, ResolvedSetting]

    @property
    def debug_summary(self) -> bool:
        return self.debug is not DebugLevel.OFF

    @property
    def debug_trace(self) -> bool:
        return self.debug is DebugLevel.TRACE

    def as_rows(self) -> list[dict[str, object]]:
        """JSON-safe rows in table order: name, value, origin, source (journal redacted)."""
        rows: list[dict[str, object]] = []
        for spec in SETTINGS:
            resolved = self.origins[spec.name]
            rows.append(
                {
                    "name": spec.name,
                    "value": _display_value(spec.name, getattr(self, spec.name)),
                    "origin": resolved.origin.value,
                    "source": resolved.source,
                }
            )
        return rows


def format_table(config: EffectiveConfig) -> str:
    """The text form of `config show`: aligned SETTING VALUE ORIGIN SOURCE columns.

    Unlike `as_rows`, the SOURCE column names the option for a value set by a flag.
    """
    lines: list[tuple[str, str, str, str]] = [("SETTING", "VALUE", "ORIGIN", "SOURCE")]
    for row in config.as_rows():
        value = row["value"]
        if value is None:
            shown = "-"
        elif isinstance(value, bool):
            shown = "true" if value else "false"
        else:
            shown = _one_line(str(value))
        source = row["source"]
        if source is None and row["origin"] == Origin.FLAG.value:
            source = SETTINGS_BY_NAME[str(row["name"])].flag.split()[0]
        source = _one_line(str(source)) if source else "-"
        lines.append((str(row["name"]), shown, str(row["origin"]), source))
    widths = [max(len(line[i]) for line in lines) for i in range(3)]
    text = [
        "  ".join([*(cell.ljust(w) for cell, w in zip(line, widths, strict=False)), line[3]])
        for line in lines
    ]
    return "\n".join(text) + "\n"


# --- resolution -----------------------------------------------------------------------


def _short(raw: object) -> str:
    """A raw value for an error line: repr, URL passwords masked, at most 80 characters."""
    if isinstance(raw, str) and is_postgres_url(raw):
        raw = redact_journal(raw)
    text = _SECRET_QUERY_RE.sub(r"\1***", _URL_PASSWORD_RE.sub(r"\1***@", repr(raw)))
    return text if len(text) <= 80 else text[:77] + "..."


def _where(spec: SettingSpec | None, origin: Origin, source: str | None) -> str:
    if origin is Origin.FLAG and spec is not None:
        return f"flag ({spec.flag.split()[0]})"
    return f"{origin.value} ({source})" if source else origin.value


def _describe(config: EffectiveConfig, name: str) -> str:
    resolved = config.origins[name]
    where = _where(SETTINGS_BY_NAME[name], resolved.origin, resolved.source)
    return f"{name} {_short(_display_value(name, resolved.value))} from {where}"


class _Layer(msgspec.Struct, frozen=True):
    origin: Origin
    label: str | None
    base_dir: str
    values: Mapping[str, object]

    def source(self, spec: SettingSpec) -> str | None:
        if self.origin is Origin.ENV:
            return spec.env_var
        return self.label


def _file_values(
    table: Mapping[str, object] | None, origin: Origin, label: str, reserved: frozenset[str]
) -> Mapping[str, object]:
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise UnknownSettingKey(
            "runjournal", origin, f"invalid {origin.value} ({label}): not a table", source=label
        )
    for key in table:
        if key in SETTINGS_BY_NAME or key in reserved:
            continue
        close = difflib.get_close_matches(str(key), list(SETTINGS_BY_NAME), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownSettingKey(
            str(key),
            origin,
            f"unknown key {str(key)!r} in {origin.value} ({label}){hint}",
            source=label,
        )
    return {k: v for k, v in table.items() if k in SETTINGS_BY_NAME}


def _parse(spec: SettingSpec, raw: object, layer: _Layer) -> object:
    source = layer.source(spec)
    try:
        return spec.parse(raw, layer.base_dir)
    except _Invalid as exc:
        raise InvalidSettingValue(
            spec.name,
            layer.origin,
            f"invalid {spec.name} {_short(raw)} from {_where(spec, layer.origin, source)}: "
            f"expected {exc.expected}",
            source=source,
        ) from None


def resolve_settings(
    *,
    flags: Mapping[str, object],
    env: Mapping[str, str],
    pipeline_table: Mapping[str, object] | None,
    pipeline_dir: str,
    user_config: Mapping[str, object] | None,
    user_config_path: str | None,
    cwd: str,
    pipeline_file: str | None = None,
) -> EffectiveConfig:
    """Resolve every setting value by value: flag > env > pipeline > user-config > default.

    `flags` holds only flags the user gave (None = not given); an empty environment
    variable counts as not set. `pipeline_file` only labels the pipeline origin.
    """
    unknown_flags = set(flags) - set(SETTINGS_BY_NAME)
    if unknown_flags:
        raise ValueError(f"not settings: {sorted(unknown_flags)}")
    cwd = os.path.abspath(cwd)
    pipeline_label = f"{pipeline_file or 'pipeline'} [runjournal]"
    user_label = user_config_path or "user config"
    user_dir = (
        os.path.dirname(os.path.join(cwd, os.path.expanduser(user_config_path)))
        if user_config_path
        else cwd
    )
    env_values = {
        spec.name: env[spec.env_var] for spec in SETTINGS if env.get(spec.env_var, "") != ""
    }
    layers = (
        _Layer(Origin.FLAG, None, cwd, {k: v for k, v in flags.items() if v is not None}),
        _Layer(Origin.ENV, None, cwd, env_values),
        _Layer(
            Origin.PIPELINE,
            pipeline_label,
            os.path.join(cwd, pipeline_dir),
            _file_values(pipeline_table, Origin.PIPELINE, pipeline_label, frozenset()),
        ),
        _Layer(
            Origin.USER_CONFIG,
            user_config_path,
            user_dir,
            _file_values(user_config, Origin.USER_CONFIG, user_label, USER_CONFIG_RESERVED),
        ),
    )
    resolved: dict[str, ResolvedSetting] = {}
    values: dict[str, object] = {}
    for spec in SETTINGS:
        winner: ResolvedSetting | None = None
        for layer in layers:  # highest precedence first; every given value is checked
            if spec.name not in layer.values:
                continue
            value = _parse(spec, layer.values[spec.name], layer)
            if winner is None:
                winner = ResolvedSetting(spec.name, value, layer.origin, layer.source(spec))
        if winner is None:
            winner = ResolvedSetting(spec.name, spec.default(values, cwd), Origin.DEFAULT)
        resolved[spec.name] = winner
        values[spec.name] = winner.value
    index = resolved["chunk_map_index"]
    if index.value and not resolved["chunk_map"].value:
        implied = "implied by chunk_map_index" + (f" ({index.source})" if index.source else "")
        resolved["chunk_map"] = ResolvedSetting("chunk_map", True, index.origin, implied)
        values["chunk_map"] = True
    return EffectiveConfig(**values, origins=resolved)  # type: ignore[arg-type]


# --- user config file -----------------------------------------------------------------


def default_user_config_path() -> str:
    return os.path.join(platformdirs.user_config_dir(APP_NAME), USER_CONFIG_FILE)


def load_user_config(
    path: str | None = None, *, env: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], str | None]:
    """Read the user config file; `({}, None)` when there is none.

    `path` wins, then `RUNJOURNAL_CONFIG`, then the platform user config dir. A file that
    `RUNJOURNAL_CONFIG` names must exist; the default location may be absent.
    """
    env = os.environ if env is None else env
    named_by_env = False
    if path is None and env.get(CONFIG_ENV_VAR, ""):
        path, named_by_env = env[CONFIG_ENV_VAR], True
    if path is None:
        path = default_user_config_path()
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.lexists(path):
        if named_by_env:
            raise UserConfigUnreadable(
                "config",
                Origin.ENV,
                f"invalid user-config file {path!r} from env ({CONFIG_ENV_VAR}): no such file",
                source=CONFIG_ENV_VAR,
            )
        return {}, None
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UserConfigUnreadable(
            "config",
            Origin.USER_CONFIG,
            f"cannot read user-config file {path!r}: {reason}",
            source=path,
        ) from None
    return document, path


# --- roots ----------------------------------------------------------------------------


def _inside(child: str, parent: str) -> bool:
    return child.startswith(parent.rstrip(os.sep) + os.sep)


def _overlap(a: str, b: str) -> bool:
    return a == b or _inside(a, b) or _inside(b, a)


def _relation(a: str, b: str) -> str:
    if a == b:
        return "is the same directory as"
    return "is inside" if _inside(a, b) else "contains"


def _conflict(config: EffectiveConfig, first: str, second: str, why: str) -> RootsConflict:
    """Blame the more explicitly set of two settings (the second one on a tie)."""
    a, b = config.origins[first], config.origins[second]
    blamed = a if _PRECEDENCE[a.origin] < _PRECEDENCE[b.origin] else b
    relation = _relation(str(a.value), str(b.value))
    return RootsConflict(
        blamed.name,
        blamed.origin,
        f"roots conflict: {_describe(config, first)} {relation} {_describe(config, second)}; {why}",
        source=blamed.source,
    )


def _nearest_existing(path: str) -> str:
    current = path
    while not os.path.lexists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def check_roots(config: EffectiveConfig) -> None:
    """Refuse roots that a cleanup of one could destroy the other's data through.

    - output root and cache root: never equal, neither inside the other;
    - debug root: may be inside the output root (the default `<output root>/debug`), but
      not the output root itself, and neither equal to, inside, nor containing the cache
      root;
    - a SQLite journal: not inside the cache root, and not a directory;
    - a root that already exists must be a directory, and one that does not must be
      creatable: its nearest existing ancestor must be a directory (checked here, in P1,
      so an unusable root is exit 2 before anything is allocated).
    """
    for name in ("output_root", "cache_root", "debug_root"):
        path = str(getattr(config, name))
        problem = None
        if os.path.exists(path):
            if not os.path.isdir(path):
                problem = "exists and is not a directory"
        else:
            ancestor = _nearest_existing(path)
            if not os.path.isdir(ancestor):
                problem = f"cannot be created: {ancestor!r} is not a directory"
        if problem is not None:
            resolved = config.origins[name]
            raise RootsConflict(
                name,
                resolved.origin,
                f"invalid {_describe(config, name)}: {problem}",
                source=resolved.source,
            )
    output, cache, debug = config.output_root, config.cache_root, config.debug_root
    separate = "cleaning one would delete the other's data"
    if _overlap(output, cache):
        raise _conflict(config, "output_root", "cache_root", separate)
    if debug == output:
        raise _conflict(
            config, "output_root", "debug_root", "debug bundles need their own directory"
        )
    if _overlap(debug, cache):
        raise _conflict(config, "cache_root", "debug_root", separate)
    if not is_postgres_url(config.journal):
        journal = config.journal
        if journal == cache or _inside(journal, cache):
            raise _conflict(
                config, "cache_root", "journal", "cleaning the cache would delete the journal"
            )
        if journal in (output, debug) or os.path.isdir(journal):
            resolved = config.origins["journal"]
            raise RootsConflict(
                "journal",
                resolved.origin,
                f"invalid {_describe(config, 'journal')}: is a directory, not a journal file",
                source=resolved.source,
            )
