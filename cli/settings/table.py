"""The one declarative table of settings (docs/configuration.md "Settings").

Every user-visible setting is declared once here: name (also the `[runjournal]` and
user-config key), flag, environment variable, parser, default, description, and how it
appears on the command line. Resolution, `config show`, the click options of every
command and the docs test all read this table, so they cannot drift apart.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Mapping
from typing import Final

import msgspec
import platformdirs
from runjournal.cli.settings.parsing import (
    Parser,
    choice_parser,
    int_parser,
    parse_bool,
    parse_cache_root,
    parse_executor,
    parse_journal,
    parse_path,
    parse_profile,
)
from runjournal.domain.plan_keys import CacheMode

APP_NAME: Final = "runjournal"
ENV_PREFIX: Final = "RUNJOURNAL_"
CONFIG_ENV_VAR: Final = "RUNJOURNAL_CONFIG"
USER_CONFIG_FILE: Final = "config.toml"
# Keys of the user config file that are not settings; their owners validate them.
USER_CONFIG_RESERVED: Final = frozenset({"profiles"})

# Module calls at once; far above any useful parallelism, low enough to refuse nonsense in P1.
MAX_JOBS: Final = 1024
MAX_BATCH_SIZE: Final = 10000
MAX_JOURNAL_TIMEOUT: Final = 3600


class Origin(enum.StrEnum):
    FLAG = "flag"
    ENV = "env"
    PIPELINE = "pipeline"
    USER_CONFIG = "user-config"
    DEFAULT = "default"


PRECEDENCE: Final = {origin: rank for rank, origin in enumerate(Origin)}


class DebugLevel(enum.StrEnum):
    """Debug bundle depth; `trace` implies `summary`."""

    OFF = "off"
    SUMMARY = "summary"
    TRACE = "trace"


class LeaseWaitMode(enum.StrEnum):
    """What a run does when another run holds a stage's lease (docs/operations.md
    "Concurrent runs")."""

    WAIT = "wait"  # wait for it, then reuse what the other run wrote
    FAIL = "fail"  # refuse at once (exit 4)


class InputCheck(enum.StrEnum):
    """How a run knows its input files' digests (docs/configuration.md `input_check`)."""

    VERIFY = "verify"  # read and hash every input
    STAT = "stat"  # trust a digest recorded with unchanged stat facts (the stat cache)


class LLMModeSetting(enum.StrEnum):
    """How LLM requests are sent (docs/operations.md "Batch runs"): as each profile's
    `mode` says, or every one online, or every one through provider batches."""

    PROFILE = "profile"
    ONLINE = "online"
    BATCH = "batch"


class CliForm(enum.StrEnum):
    """How a setting appears as a command-line option."""

    VALUE = "value"  # `--jobs 4`: the option takes a value
    SWITCH = "switch"  # `--checkpoints` / `--no-checkpoints`
    ENABLE = "enable"  # `--chunk-map` sets true
    DISABLE = "disable"  # `--no-progress` sets false


class ValueKind(enum.StrEnum):
    """What an option's value is: its `--help` metavar and its shell completion."""

    DIR = "dir"
    FILE = "file"
    JOURNAL = "journal"
    CHOICE = "choice"
    INTEGER = "integer"
    PROFILE = "profile"
    BOOLEAN = "boolean"


DefaultFactory = Callable[[Mapping[str, object], str], object]


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


class SettingSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One user-visible setting. `key` is both the `[runjournal]` and user-config key.

    `flag` is the option as the docs and error messages show it (`--jobs N`); `cli`,
    `kind` and `choices` say how the click option is generated from this row.
    """

    name: str
    flag: str
    type_name: str
    parse: Parser
    default: DefaultFactory
    default_text: str
    description: str
    kind: ValueKind
    cli: CliForm = CliForm.VALUE
    choices: tuple[str, ...] = ()
    flag_help: str = ""  # the option's help when it differs from the description

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def key(self) -> str:
        return self.name

    @property
    def option(self) -> str:
        """The option declaration: `--jobs`, `--checkpoints/--no-checkpoints`."""
        return self.flag.split()[0]


def _values(enum_type: type[enum.Enum]) -> tuple[str, ...]:
    return tuple(str(member.value) for member in enum_type)


SETTINGS: Final[tuple[SettingSpec, ...]] = (
    SettingSpec(
        name="output_root",
        flag="--output-root DIR",
        type_name="path",
        parse=parse_path,
        default=_default_output_root,
        default_text="./runs",
        description="Root of the run directories and of the default journal.",
        kind=ValueKind.DIR,
    ),
    SettingSpec(
        name="cache_root",
        flag="--cache-root DIR",
        type_name="path or s3:// URL",
        parse=parse_cache_root,
        default=_default_cache_root,
        default_text="the user cache directory for runjournal",
        description=(
            "Root of the chunk-plan store and of the checkpoint workspaces"
            " (a directory, or s3://bucket/prefix)."
        ),
        kind=ValueKind.DIR,
    ),
    SettingSpec(
        name="debug_root",
        flag="--debug-root DIR",
        type_name="path",
        parse=parse_path,
        default=_under_output_root("debug"),
        default_text="<output_root>/debug",
        description="Root of debug bundles (written only with --debug).",
        kind=ValueKind.DIR,
    ),
    SettingSpec(
        name="journal",
        flag="--journal URL",
        type_name="path or URL",
        parse=parse_journal,
        default=_under_output_root("journal.sqlite3"),
        default_text="<output_root>/journal.sqlite3",
        description="The event journal: a SQLite path, sqlite:///PATH or postgresql://...",
        kind=ValueKind.JOURNAL,
    ),
    SettingSpec(
        name="cache_mode",
        flag="--cache-mode MODE",
        type_name="use | refresh | read-only | bypass",
        parse=choice_parser(CacheMode),
        default=_constant(CacheMode.USE),
        default_text="use",
        description="How the chunk-plan store is used; bypass never touches it.",
        kind=ValueKind.CHOICE,
        choices=_values(CacheMode),
    ),
    SettingSpec(
        name="checkpoints",
        flag="--checkpoints/--no-checkpoints",
        type_name="bool",
        parse=parse_bool,
        default=_constant(True),
        default_text="on",
        description="Record stage checkpoints in the workspace so later runs can reuse them.",
        kind=ValueKind.BOOLEAN,
        cli=CliForm.SWITCH,
    ),
    SettingSpec(
        name="jobs",
        flag="--jobs N",
        type_name=f"integer 1-{MAX_JOBS}",
        parse=int_parser(1, MAX_JOBS),
        default=_constant(1),
        default_text="1",
        description="How many module calls run at once, across every ready lane and step.",
        kind=ValueKind.INTEGER,
    ),
    SettingSpec(
        name="debug",
        flag="--debug summary|trace",
        type_name="off | summary | trace",
        parse=choice_parser(DebugLevel),
        default=_constant(DebugLevel.OFF),
        default_text="off",
        description="Write a debug bundle; trace also writes the summary.",
        kind=ValueKind.CHOICE,
        choices=_values(DebugLevel),
    ),
    SettingSpec(
        name="profile",
        flag="--profile ID",
        type_name="profile id",
        parse=parse_profile,
        default=_constant(None),
        default_text="none",
        description="Default LLM profile id for steps that do not name one.",
        kind=ValueKind.PROFILE,
    ),
    SettingSpec(
        name="profiles_file",
        flag="--profiles-file PATH",
        type_name="path",
        parse=parse_path,
        default=_constant(None),
        default_text="none",
        description="A TOML file with [profiles.<id>] tables.",
        kind=ValueKind.FILE,
    ),
    SettingSpec(
        name="chunk_map",
        flag="--chunk-map",
        type_name="bool",
        parse=parse_bool,
        default=_constant(False),
        default_text="off",
        description="Write the accepted chunk map as chunk-map.json in the run directory.",
        kind=ValueKind.BOOLEAN,
        cli=CliForm.ENABLE,
    ),
    SettingSpec(
        name="chunk_map_index",
        flag="--chunk-map-index",
        type_name="bool",
        parse=parse_bool,
        default=_constant(False),
        default_text="off",
        description="Also write chunk-map.index.json; implies --chunk-map.",
        kind=ValueKind.BOOLEAN,
        cli=CliForm.ENABLE,
    ),
    SettingSpec(
        name="progress",
        flag="--no-progress",
        type_name="bool",
        parse=parse_bool,
        default=_constant(True),
        default_text="on",
        description="Show a progress line on stderr (on a terminal only).",
        kind=ValueKind.BOOLEAN,
        cli=CliForm.DISABLE,
        flag_help="No progress line on stderr.",
    ),
    SettingSpec(
        name="batch_size",
        flag="--batch-size N",
        type_name=f"integer 1-{MAX_BATCH_SIZE}",
        parse=int_parser(1, MAX_BATCH_SIZE),
        default=_constant(256),
        default_text="256",
        description="Journal events committed per batch while a run progresses.",
        kind=ValueKind.INTEGER,
    ),
    SettingSpec(
        name="journal_timeout",
        flag="--journal-timeout SECONDS",
        type_name=f"integer 1-{MAX_JOURNAL_TIMEOUT}",
        parse=int_parser(1, MAX_JOURNAL_TIMEOUT),
        default=_constant(30),
        default_text="30",
        description="PostgreSQL journals: the longest one journal operation waits (seconds).",
        kind=ValueKind.INTEGER,
    ),
    SettingSpec(
        name="resume",
        flag="--resume/--no-resume",
        type_name="bool",
        parse=parse_bool,
        default=_constant(False),
        default_text="off",
        description="Consult the checkpoints and reuse every stage that is still valid.",
        kind=ValueKind.BOOLEAN,
        cli=CliForm.SWITCH,
    ),
    SettingSpec(
        name="keep_going",
        flag="--keep-going/--no-keep-going",
        type_name="bool",
        parse=parse_bool,
        default=_constant(False),
        default_text="off",
        description="After a failure, finish every lane that does not depend on a failed one.",
        kind=ValueKind.BOOLEAN,
        cli=CliForm.SWITCH,
    ),
    SettingSpec(
        name="executor",
        flag="--executor NAME",
        type_name="threads | processes | dask | dask://HOST:PORT",
        parse=parse_executor,
        default=_constant("threads"),
        default_text="threads",
        description="Where module calls run: threads, processes, dask or dask://HOST:PORT.",
        kind=ValueKind.CHOICE,
        choices=("threads", "processes", "dask"),
    ),
    SettingSpec(
        name="lease_wait",
        flag="--lease-wait wait|fail",
        type_name="wait | fail",
        parse=choice_parser(LeaseWaitMode),
        default=_constant(LeaseWaitMode.WAIT),
        default_text="wait",
        description="When another run is executing a stage this run needs: wait, or fail.",
        kind=ValueKind.CHOICE,
        choices=_values(LeaseWaitMode),
    ),
    SettingSpec(
        name="reuse_summary",
        flag="--reuse-summary/--no-reuse-summary",
        type_name="bool",
        parse=parse_bool,
        default=_constant(True),
        default_text="on",
        description="Journal a fully reused lane as one summary event, not one per stage.",
        kind=ValueKind.BOOLEAN,
        cli=CliForm.SWITCH,
    ),
    SettingSpec(
        name="input_check",
        flag="--input-check verify|stat",
        type_name="verify | stat",
        parse=choice_parser(InputCheck),
        default=_constant(InputCheck.VERIFY),
        default_text="verify",
        description="Inputs: read and hash each (verify), or trust unchanged stat facts (stat).",
        kind=ValueKind.CHOICE,
        choices=_values(InputCheck),
    ),
    SettingSpec(
        name="block_summary",
        flag="--block-summary/--no-block-summary",
        type_name="bool",
        parse=parse_bool,
        default=_constant(True),
        default_text="on",
        description="Journal lanes, plans and outputs equal to the last run's as block summaries.",
        kind=ValueKind.BOOLEAN,
        cli=CliForm.SWITCH,
    ),
    SettingSpec(
        name="llm_mode",
        flag="--llm-mode profile|online|batch",
        type_name="profile | online | batch",
        parse=choice_parser(LLMModeSetting),
        default=_constant(LLMModeSetting.PROFILE),
        default_text="profile",
        description="LLM requests one by one (online), through provider batches, or per profile.",
        kind=ValueKind.CHOICE,
        choices=_values(LLMModeSetting),
    ),
)

SETTINGS_BY_NAME: Final[Mapping[str, SettingSpec]] = {spec.name: spec for spec in SETTINGS}
