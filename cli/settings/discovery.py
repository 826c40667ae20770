"""Finding the project: the pipeline whose roots a command without a PIPELINE uses.

`runs list`, `explain`, `gc` … take no pipeline file, yet the journal and roots that a
pipeline's `run` used are named in that pipeline's `[runjournal]` table. So these
commands walk up from the current directory to the nearest directory holding a pipeline
file, and resolve their settings with its table as the `pipeline` origin, exactly as
`run` does (docs/configuration.md "Finding the project"). Flags and the environment still
win, value by value. Only pipeline files you or root own, reached through symlinks you
or root own, in directories only you or root may write, are trusted; others are passed
over with one line saying why. Nothing is created or written here.
"""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import msgspec
from runjournal.cli.settings.formatting import display_value
from runjournal.cli.settings.resolution import EffectiveConfig, resolve_settings
from runjournal.cli.settings.settings_errors import SettingsError, one_line
from runjournal.cli.settings.table import ENV_PREFIX, SETTINGS_BY_NAME, Origin

CEILING_ENV_VAR: Final = ENV_PREFIX + "CEILING_DIRECTORIES"
"""Directories (os.pathsep-separated) the walk never enters, nor anything above them."""

REPOSITORY_MARKERS: Final = (".git", ".hg", ".svn")
LOCATING: Final = ("output_root", "journal")  # a table setting one of these is a marker
LOCATIONS: Final = ("output_root", "journal", "cache_root", "debug_root")
MAX_PIPELINE_BYTES: Final = 1 << 20  # a bigger .toml file is not read (not a pipeline)


class ProjectAmbiguous(SettingsError):
    """Pipeline files in one directory that name different journals or roots."""


class ProjectPipeline(msgspec.Struct, frozen=True):
    path: str  # real path of the pipeline file
    table: dict[str, Any]  # its `[runjournal]` table


class Project(msgspec.Struct, frozen=True):
    directory: str
    pipelines: tuple[ProjectPipeline, ...]  # sorted by file name, each locating


def _ceilings(env: Mapping[str, str]) -> set[str]:
    raw = env.get(CEILING_ENV_VAR, "")
    return {os.path.realpath(p) for p in raw.split(os.pathsep) if p and os.path.isabs(p)}


def _owned(st: os.stat_result) -> bool:
    """Only your own (or root's) files and directories can steer your commands."""
    getuid = getattr(os, "getuid", None)
    return getuid is None or st.st_uid in (getuid(), 0)


def _walk(cwd: str, home: str | None, env: Mapping[str, str]) -> Iterator[tuple[str, bool]]:
    """The current directory, then each parent: up to and including your home directory
    or a repository root, never into a ceiling directory. A directory owned by another
    user ends the walk; it is yielded (flagged) so that a pipeline file planted there is
    reported, never used."""
    ceilings = _ceilings(env)
    home_real = os.path.realpath(home) if home else None
    current = os.path.realpath(cwd)
    while current not in ceilings:
        try:
            foreign = not _owned(os.stat(current))
        except OSError:
            return
        yield current, foreign
        if (
            foreign
            or current == home_real
            or any(os.path.lexists(os.path.join(current, marker)) for marker in REPOSITORY_MARKERS)
        ):
            return
        parent = os.path.dirname(current)
        if parent == current:
            return
        current = parent


def _holder_problem(directory: str) -> str | None:
    """Why an entry of `directory` cannot be trusted: someone else may replace it."""
    st = os.stat(directory)
    if not _owned(st):
        return f"{directory} is owned by another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{directory} is writable by group or others"
    return None


_MAX_LINKS: Final = 40


def distrust(path: str) -> str | None:
    """Why the pipeline file at `path` (absolute) must not steer your commands, or None.

    Followed one component at a time: the file and every symlink on the way to it must
    be owned by you or root, each in a directory owned by you or root that neither group
    nor others may write (docs/configuration.md "Finding the project").
    """
    parts = path.split("/")[1:]
    parts.reverse()
    current, links = "/", 0
    try:
        while parts:
            name = parts.pop()
            if name in ("", "."):
                continue
            if name == "..":
                current = os.path.dirname(current)
                continue
            candidate = os.path.join(current, name)
            st = os.lstat(candidate)
            is_link = stat.S_ISLNK(st.st_mode)
            if is_link or not parts:  # an entry that decides what is read
                problem = _holder_problem(current)
                if problem is not None:
                    return problem
                if not _owned(st):
                    what = "the symlink " if is_link else ""
                    return f"{what}{candidate} is owned by another user (uid {st.st_uid})"
            if not is_link:
                current = candidate
                continue
            links += 1
            if links > _MAX_LINKS:
                return "too many levels of symlinks"
            target = os.readlink(candidate)
            if target.startswith("/"):
                current = "/"
            parts.extend(reversed(target.split("/")))
    except OSError as exc:
        return f"it cannot be checked ({exc.strerror})"
    return None


def _read_pipeline(path: str) -> dict[str, Any] | None:
    """The document of a pipeline file (a TOML table with a `steps` list), else None."""
    try:
        st = os.stat(path)
        if not os.path.isfile(path) or st.st_size > MAX_PIPELINE_BYTES:
            return None
        with open(path, "rb") as handle:
            doc = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc.get("steps"), list) else None


def _pipelines_in(directory: str, ignored: list[str]) -> list[tuple[str, dict[str, Any]]] | None:
    """Every trusted pipeline file directly in `directory` with its document; None if none.
    Pipeline files that cannot be trusted are left out, each with a line in `ignored`."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return None
    found = []
    for name in names:
        if name.startswith(".") or not name.endswith(".toml"):
            continue
        path = os.path.join(directory, name)
        doc = _read_pipeline(path)
        if doc is None:
            continue
        problem = distrust(path)
        if problem is not None:
            ignored.append(f"ignoring pipeline file {path}: {problem}")
            continue
        found.append((os.path.realpath(path), doc))
    return found or None


def find_project(
    cwd: str,
    *,
    home: str | None,
    env: Mapping[str, str] | None = None,
    ignored: list[str] | None = None,
) -> Project | None:
    """The nearest directory holding a pipeline file, and its pipelines that say where
    their journal is (a `[runjournal]` table with `output_root` or `journal`).

    The nearest directory with any trusted pipeline file ends the walk: when none of its
    pipelines locates anything, their runs used the roots of `run`'s current directory, so
    there is no project (None) and the defaults apply. A pipeline file that cannot be
    trusted (`distrust`) is passed over as if absent, with one line in `ignored` saying
    why.
    """
    ignored = [] if ignored is None else ignored
    for directory, foreign in _walk(cwd, home, os.environ if env is None else env):
        found = _pipelines_in(directory, ignored)
        if found is None or foreign:
            continue
        locating = tuple(
            ProjectPipeline(path, dict(doc["runjournal"]))
            for path, doc in found
            if isinstance(doc.get("runjournal"), dict)
            and any(key in doc["runjournal"] for key in LOCATING)
        )
        return Project(directory, locating) if locating else None
    return None


def _shown(name: str, value: object, directory: str) -> str:
    """A value for the error line: relative to the project directory when inside it."""
    text = str(display_value(name, value))
    if text.startswith(directory.rstrip(os.sep) + os.sep):
        text = os.path.relpath(text, directory)
    return one_line(text)


def resolve_project_settings(
    *,
    flags: Mapping[str, object],
    env: Mapping[str, str],
    user_config: Mapping[str, object] | None,
    user_config_path: str | None,
    cwd: str,
    home: str | None,
    warn: Callable[[str], None] | None = None,
) -> EffectiveConfig:
    """Settings of a command without a PIPELINE: the found project's pipeline table is
    the `pipeline` origin (flag > env > pipeline > user-config > default). Each pipeline
    file passed over as untrusted is one line to `warn`.

    Several pipelines in the project directory must agree on the journal and the roots
    after resolution (a flag or variable that overrides a value settles it); otherwise
    `ProjectAmbiguous`, listing them.
    """
    ignored: list[str] = []
    project = find_project(cwd, home=home, env=env, ignored=ignored)
    for line in ignored if warn is not None else ():
        warn(line)

    def resolve(pipeline: ProjectPipeline | None) -> EffectiveConfig:
        return resolve_settings(
            flags=flags,
            env=env,
            pipeline_table=pipeline.table if pipeline else None,
            pipeline_dir=os.path.dirname(pipeline.path) if pipeline else cwd,
            user_config=user_config,
            user_config_path=user_config_path,
            cwd=cwd,
            pipeline_file=os.path.relpath(pipeline.path, cwd) if pipeline else None,
        )

    if project is None:
        return resolve(None)
    configs = [(p, resolve(p)) for p in project.pipelines]
    first = configs[0][1]
    for name in LOCATIONS:
        values = {getattr(config, name) for _, config in configs}
        if len(values) == 1:
            continue
        spec = SETTINGS_BY_NAME[name]
        listed = ", ".join(
            f"{os.path.basename(p.path)} ({_shown(name, getattr(c, name), project.directory)})"
            for p, c in configs
        )
        raise ProjectAmbiguous(
            name,
            Origin.PIPELINE,
            f"pipelines in {project.directory} name different {name}s: {listed}; "
            f"choose with {spec.option} or {spec.env_var}",
            source=project.directory,
        )
    return first
