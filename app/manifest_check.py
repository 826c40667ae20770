"""`run` checks its own manifest against its journal before it reports (issue #25).

`manifest.json` is the live fold of the events the run's session recorded (cli/compose.py
`LiveViews`); `journal audit` later holds it against the journal: its `decisions` plus
`not_started` must be every `StageDecided` the journal holds
(adapters/run_directory_check.py). Once every event is committed, `run` checks both that
and that the live view is the journal's fold (what `projections rebuild manifest` writes).
The journal's fold is a second, independent fold (`CommittedFold`) of the batches the
journal committed, in its order, as each commit returned; it stands for the journal when
the journal's last stored version is the last one it folded. A reuse summary in a batch
(`LaneReused`, `EventsReused`) is expanded from the events the session applied for it,
handed over with the batch, once their own digest is the summary's
(`expansion_matches`): what the check proves of them, and what only `journal audit`
proves, is in docs/internals.md "Block summaries". A fold that failed (a summary without
its events or whose events do not match, an exception) makes the check read the run's
events back in one streamed pass as before, expanding every summary from the run it names
(docs/operations.md "A manifest that disagrees with its journal"). A difference is a bug
in runjournal, never something the user did: the manifest is rewritten from the
journal's fold, one line says it is an internal error to report, `--json` carries it as
`internal_error`, and the run exits 70 (docs/operations.md "Exit codes").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runjournal.app.documents import json_bytes
from runjournal.domain.block_reuse import (
    expansion_matches,
    origin_of,
    units_events,
    units_match,
)
from runjournal.domain.events import EventsReused, LaneReused, RunEvent, StageDecided
from runjournal.projections.manifest import ManifestProjection

MANIFEST = "manifest.json"
# summaries whose events are journaled in an earlier run: folded from the events the
# session applied for them, once those match the summary's digest
_SUMMARIES = (LaneReused, EventsReused)


@dataclass(frozen=True)
class ManifestMismatch:
    """What differs (one line) and the journal's fold, which replaces the manifest."""

    message: str
    view: dict[str, Any]


def _total(counts: dict[str, int]) -> int:
    return sum(counts.values())


class CommittedFold:
    """The journal's fold of a run, built from the batches its session committed.

    `committed` is the session's `committed` callback (adapters/journal/session.py): it
    gets each batch after the journal stored it, in the journal's order, possibly on the
    committer's thread, with the events each reuse summary in the batch stands for as the
    session applied them (`expanded`, by the summary's version). It folds the batch into
    a `ManifestProjection` of its own and counts its `StageDecided`, so the check at the
    end reads nothing back: a summary is folded, then its events, once
    `expansion_matches` finds them to be what a reader expands it into (their count,
    origin and digest). It gives up (`usable` false, `gave_up` says why; the check reads
    the journal back) at a summary without its events or whose events do not match, and
    at any exception of the fold, which must never fail the commit that called it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fold: ManifestProjection | None = ManifestProjection()
        self.journaled: dict[str, int] = {}
        self.last_version = 0
        self.summaries = 0  # reuse summaries folded from their applied events
        self.gave_up: str | None = None

    @property
    def usable(self) -> bool:
        return self._fold is not None

    def committed(
        self,
        events: Sequence[RunEvent],
        expanded: Mapping[int, Sequence[Any]] | None = None,
    ) -> None:
        with self._lock:
            fold = self._fold
            if fold is None:
                return
            try:
                journaled = self.journaled
                for event in events:
                    kind = type(event)
                    if kind in _SUMMARIES:
                        version = event.originator_version
                        applied = expanded.get(version) if expanded is not None else None
                        if applied is None:
                            self._give_up(f"{kind.__name__} {version} came without its events")
                            return
                        if kind is EventsReused:
                            # its units: their digests against its own, then the events
                            # built here from them ("A summary applied as a count")
                            if not units_match(event, applied):  # type: ignore[arg-type]
                                self._give_up(f"{kind.__name__} {version}: its units do not match")
                                return
                            applied = units_events(applied, origin_of(event))  # type: ignore[arg-type]
                        elif not expansion_matches(event, applied):  # type: ignore[arg-type]
                            self._give_up(f"{kind.__name__} {version}: its events do not match")
                            return
                        fold.apply(event)
                        for each in applied:
                            fold.apply(each)
                            if type(each) is StageDecided:
                                code = each.code.value  # type: ignore[attr-defined]
                                journaled[code] = journaled.get(code, 0) + 1
                        self.summaries += 1
                        self.last_version = version
                        continue
                    fold.apply(event)
                    if kind is StageDecided:
                        code = event.code.value  # type: ignore[attr-defined]
                        journaled[code] = journaled.get(code, 0) + 1
                    self.last_version = event.originator_version
            except Exception as exc:  # never the commit's failure: the check reads back instead
                self._give_up(f"the fold raised {type(exc).__name__}")

    def _give_up(self, why: str) -> None:
        self._fold = None
        self.journaled = {}
        self.gave_up = why

    def view(self) -> dict[str, Any]:
        return self.projection().view()

    def projection(self) -> ManifestProjection:
        """The fold itself (every batch is committed when the check asks for it)."""
        with self._lock:
            if self._fold is None:
                raise RuntimeError("the committed fold gave up: read the journal back")
            return self._fold


def manifest_mismatch(events: Iterable[RunEvent], live: dict[str, Any]) -> ManifestMismatch | None:
    """Fold the journal's events again and compare (pure: the caller reads and writes)."""
    rebuilt, journaled = _refold(events)
    return fold_mismatch(rebuilt.view(), journaled, live)


def _refold(events: Iterable[RunEvent]) -> tuple[ManifestProjection, dict[str, int]]:
    rebuilt = ManifestProjection()
    journaled: dict[str, int] = {}
    for event in events:
        rebuilt.apply(event)
        if isinstance(event, StageDecided):
            journaled[event.code.value] = journaled.get(event.code.value, 0) + 1
    return rebuilt, journaled


def _folds_mismatch(
    fold: ManifestProjection, journaled: dict[str, int], live: ManifestProjection
) -> ManifestMismatch | None:
    """`fold_mismatch` of the two folds' views, without making either view's outputs
    (a dict each, twice, at the end of a run of many: issue 29, peak RSS) unless they
    differ: the outputs are compared as the folds hold them, in the views' order."""
    same = fold.outputs == live.outputs or sorted(fold.outputs, key=_name) == sorted(
        live.outputs, key=_name
    )
    if same and fold_mismatch(fold.head(), journaled, live.head()) is None:
        return None
    return fold_mismatch(fold.view(), journaled, live.view())


def _name(row: tuple[str, str, int]) -> str:
    return row[0]


def fold_mismatch(
    view: dict[str, Any], journaled: dict[str, int], live: dict[str, Any]
) -> ManifestMismatch | None:
    """The journal's fold `view` and its decisions by code against the live view."""
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
    journal: Any,
    run_id: str,
    manifest: ManifestProjection,
    written: bool,
    output: Any,
    committed: CommittedFold | None = None,
) -> str | None:
    """The internal-error line of a run whose manifest disagrees with its journal, after
    `manifest.json` was rewritten from the journal's fold (None: they agree).

    Called once every event is committed. `written`: whether the run wrote
    `manifest.json` (a run without one is only checked); `output()` is the invocation's
    output-root handle (cli/compose.py `Roots`), the run directory is `<run id>` in it.
    `committed`: the fold of the batches the session committed, used instead of reading
    the journal back when it is usable and the journal's last version is its last one."""
    if (
        committed is not None
        and committed.usable
        and committed.last_version == journal.last_version(run_id)
    ):
        mismatch = _folds_mismatch(committed.projection(), committed.journaled, manifest)
    else:
        mismatch = _folds_mismatch(*_refold(journal.projected_events(run_id)), manifest)
    return _reported(mismatch, written, lambda: output().subroot(run_id), json_bytes)


def _reported(
    mismatch: ManifestMismatch | None,
    written: bool,
    run_dir: Callable[[], Any],
    render: Callable[[dict[str, Any]], bytes],
) -> str | None:
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
