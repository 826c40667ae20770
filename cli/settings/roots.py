"""The roots rule: no cleanup of one root may delete another root's data.

See docs/configuration.md "The roots rule". Checked in phase P1, so an unusable root is
exit 2 before anything is allocated.
"""

from __future__ import annotations

import os

from runjournal.cli.settings.formatting import describe
from runjournal.cli.settings.parsing import is_postgres_url
from runjournal.cli.settings.resolution import EffectiveConfig
from runjournal.cli.settings.settings_errors import RootsConflict
from runjournal.cli.settings.table import PRECEDENCE


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
    blamed = a if PRECEDENCE[a.origin] < PRECEDENCE[b.origin] else b
    relation = _relation(str(a.value), str(b.value))
    return RootsConflict(
        blamed.name,
        blamed.origin,
        f"roots conflict: {describe(config, first)} {relation} {describe(config, second)}; {why}",
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
      creatable: its nearest existing ancestor must be a directory.
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
                f"invalid {describe(config, name)}: {problem}",
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
                f"invalid {describe(config, 'journal')}: is a directory, not a journal file",
                source=resolved.source,
            )
