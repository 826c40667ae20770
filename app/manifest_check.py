"""`run` checks its own manifest against its journal before it reports (issue #25).

`manifest.json` is the live fold of the events the run's session recorded (cli/compose.py
`LiveViews`); `journal audit` later holds it against the journal: its `decisions` plus
`not_started` must be every `StageDecided` the journal holds
(adapters/run_directory_check.py). Once every event is committed, `run` reads its events
back in one streamed pass and checks both that and that the live view is the journal's
fold (what `projections rebuild manifest` writes). A difference is a bug in runjournal,
never something the user did: the manifest is rewritten from the journal's fold, one line
says it is an internal error to report, `--json` carries it as `internal_error`, and the
run exits 70 (docs/operations.md "Exit codes", "A manifest that disagrees with its
journal").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from runjournal.app.documents import json_bytes
from runjournal.domain.events import RunEvent, StageDecided
from runjournal.projections.manifest import ManifestProjection

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class ManifestMismatch:
    """What differs (one line) and the journal's fold, which replaces the manifest."""

    message: str
    view: dict[str, Any]


def _total(counts: dict[str, int]) -> int:
    return sum(counts.values())


def manifest_mismatch(events: Iterable[RunEvent], live: dict[str, Any]) -> ManifestMismatch | None:
    """Fold the journal's events again and compare (pure: the caller reads and writes)."""
    rebuilt = ManifestProjection()
    journaled: dict[str, int] = {}
    for event in events:
        rebuilt.apply(event)
        if isinstance(event, StageDecided):
            journaled[event.code.value] = journaled.get(event.code.value, 0) + 1
    view = rebuilt.view()
    counted = dict(view["decisions"])
    for code, n in view["not_started"].items():
        counted[code] = counted.get(code, 0) + n
    if dict(sorted(counted.items())) != dict(sorted(journaled.items())):
        return ManifestMismatch(
            f"the manifest's fold counts {_total(counted):,} decisions, the journal holds "
            f"{_total(journaled):,}",
            view,
        )
    live_counted = _total(live.get("decisions", {})) + _total(live.get("not_started", {}))
    if live != view:
        differ = sorted(k for k in {*live, *view} if live.get(k) != view.get(k))
        return ManifestMismatch(
            f"manifest.json counted {live_counted:,} decisions and differs from the "
            f"journal's fold ({_total(journaled):,} decisions) in {', '.join(differ)}",
            view,
        )
    return None


def check_run_manifest(
    journal: Any, run_id: str, manifest: ManifestProjection, written: bool, output: Any
) -> str | None:
    """The internal-error line of a run whose manifest disagrees with its journal, after
    `manifest.json` was rewritten from the journal's fold (None: they agree).

    Called once every event is committed. `written`: whether the run wrote
    `manifest.json` (a run without one is only checked); `output()` is the invocation's
    output-root handle (cli/compose.py `Roots`), the run directory is `<run id>` in it."""
    return _checked(
        journal.projected_events(run_id),
        manifest,
        written,
        lambda: output().subroot(run_id),
        json_bytes,
    )


def _checked(
    events: Iterable[RunEvent],
    manifest: ManifestProjection,
    written: bool,
    run_dir: Callable[[], Any],
    render: Callable[[dict[str, Any]], bytes],
) -> str | None:
    mismatch = manifest_mismatch(events, manifest.view())
    if mismatch is None:
        return None
    outcome = "manifest.json was not written"
    if written:
        try:
            directory = run_dir()
            try:
                directory.write_bytes(MANIFEST, render(mismatch.view), overwrite=True)
            finally:
                directory.close()
            outcome = "manifest.json was rewritten from the journal"
        except Exception as exc:  # the line below is the report: it must still be printed
            outcome = f"manifest.json could not be rewritten from the journal ({exc})"
    return (
        f"internal error: {mismatch.message}; {outcome}. This is a runjournal bug: "
        "please report it with this line (exit 70)"
    )
