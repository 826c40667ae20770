"""`journal audit`'s check of a run's journal against its run directory.

The hash chain (adapters/journal/chain.py) shows edits that did not recompute it; this
check anchors the journal in what the run left on disk, which a journal writer cannot
change: every `OutputWritten` digest against the file, every `ArtifactGenerated` digest
against its `artifacts/<step>/<safe lane>.json`, and `manifest.json`'s status, outputs
and decision counts against the journal (a deleted terminal event shows here). The run
directory is the one the run's `RunAllocated` recorded (`<dir>/<run id>`, whatever output
root the audit was started with), read through the confined `FsRoot` of its parent
(adapters/run_dirs.py). See docs/internals.md "The journal's hash chain".
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable, Iterable
from typing import Any

import msgspec
from runjournal.adapters.fsroot import FsError, FsNotFound, FsRoot
from runjournal.adapters.run_dirs import RunDirs
from runjournal.domain.events import (
    ArtifactGenerated,
    OutputWritten,
    RunAllocated,
    RunEvent,
    RunTerminated,
    StageDecided,
)
from runjournal.domain.names import recorded_run_parent, safe_lane_id
from runjournal.projections.llm_usage import LLMUsageFold

__all__ = [
    "RunDirectoryCheck",
    "RunDirectoryProblem",
    "RunDirectoryStatus",
    "RunFacts",
    "check_run_directory",
]

_MANIFEST = "manifest.json"


class RunDirectoryStatus(enum.StrEnum):
    CHECKED = "checked"
    ABSENT = "absent"  # no run directory (never created, or removed by gc)
    ELSEWHERE = "elsewhere"  # the record is not `<absolute dir>/<run id>`: not read


class RunDirectoryProblem(msgspec.Struct, frozen=True, kw_only=True):
    version: int  # the event the problem names (0: an event the journal lacks)
    event: str
    message: str


class RunDirectoryCheck(msgspec.Struct, frozen=True, kw_only=True):
    status: RunDirectoryStatus
    path: str | None
    files_checked: int
    problems: list[RunDirectoryProblem]


def _short(digest: str) -> str:
    return digest[:12]


class RunFacts:
    """What the check needs of a run's events, gathered in one pass.

    Only the allocation, outputs, artifacts, terminal event, last version and decision
    counts are kept, so `journal audit` streams the run (docs/performance.md "Reading
    commands on a large run") and feeds this beside the audit.
    """

    def __init__(self) -> None:
        self.allocated: RunAllocated | None = None
        self.outputs: list[OutputWritten] = []
        self.artifacts: list[ArtifactGenerated] = []
        self.terminal: RunTerminated | None = None
        self.last = 0
        self.decisions: dict[str, int] = {}
        self.llm = LLMUsageFold()  # spent and saved, as the manifest's `llm` folds it

    def feed(self, event: RunEvent) -> None:
        self.last = event.originator_version
        self.llm.apply(event)
        if isinstance(event, StageDecided):
            self.decisions[event.code.value] = self.decisions.get(event.code.value, 0) + 1
        elif isinstance(event, OutputWritten):
            self.outputs.append(event)
        elif isinstance(event, ArtifactGenerated):
            self.artifacts.append(event)
        elif isinstance(event, RunAllocated):
            self.allocated = self.allocated or event
        elif isinstance(event, RunTerminated):
            self.terminal = self.terminal or event

    @classmethod
    def of(cls, events: Iterable[RunEvent]) -> RunFacts:
        facts = cls()
        for event in events:
            facts.feed(event)
        return facts


def check_run_directory(
    events: Iterable[RunEvent] | RunFacts, *, open_root: Callable[..., FsRoot]
) -> RunDirectoryCheck:
    """Compare the run's recorded outputs, artifacts and terminal state with its directory.

    `open_root` opens the directory holding the run directory (the composition root's
    factory, cli/compose.py).
    """
    facts = events if isinstance(events, RunFacts) else RunFacts.of(events)
    allocated = facts.allocated
    if allocated is None:
        return RunDirectoryCheck(
            status=RunDirectoryStatus.ABSENT, path=None, files_checked=0, problems=[]
        )
    run_id, run_dir = allocated.run_id, allocated.run_dir
    if recorded_run_parent(run_id, run_dir) is None:
        return RunDirectoryCheck(
            status=RunDirectoryStatus.ELSEWHERE, path=run_dir, files_checked=0, problems=[]
        )
    with RunDirs(open_root) as dirs:
        root = dirs.parent_of(run_id, run_dir)
        try:
            if root is None:
                raise FsNotFound(run_dir)
            run_root = root.subroot(run_id)
        except FsError:
            return RunDirectoryCheck(
                status=RunDirectoryStatus.ABSENT, path=run_dir, files_checked=0, problems=[]
            )
        with run_root:
            return _check(facts, run_root, run_dir)


def _check(facts: RunFacts, run_root: FsRoot, run_dir: str) -> RunDirectoryCheck:
    problems: list[RunDirectoryProblem] = []
    files = 0

    def problem(event: RunEvent | None, kind: str, message: str) -> None:
        version = event.originator_version if event is not None else 0
        problems.append(RunDirectoryProblem(version=version, event=kind, message=message))

    written: dict[str, OutputWritten] = {}
    for event in facts.outputs:
        written[event.name] = event
        files += 1
        try:
            data = run_root.read_bytes(event.name)
        except FsNotFound:
            problem(event, "OutputWritten", f"output {event.name!r} is not in the run directory")
            continue
        except (FsError, ValueError) as exc:
            problem(event, "OutputWritten", f"output {event.name!r} cannot be read: {exc}")
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest != event.sha256 or len(data) != event.size:
            problem(
                event,
                "OutputWritten",
                f"output {event.name!r} in the run directory has sha256 {_short(digest)}… "
                f"({len(data)} bytes), the journal records {_short(event.sha256)}… "
                f"({event.size} bytes)",
            )
    for event in facts.artifacts:
        name = f"artifacts/{event.step}/{safe_lane_id(event.lane)}.json"
        output = written.get(name)
        if output is not None and output.sha256 != event.sha256:
            problem(
                event,
                "ArtifactGenerated",
                f"artifact of step {event.step!r} lane {event.lane!r} is recorded as sha256 "
                f"{_short(event.sha256)}…, but {name} in the run directory is "
                f"{_short(output.sha256)}…",
            )
    problems += _check_manifest(facts, run_root, written)
    return RunDirectoryCheck(
        status=RunDirectoryStatus.CHECKED, path=run_dir, files_checked=files, problems=problems
    )


def _check_manifest(
    facts: RunFacts, run_root: FsRoot, written: dict[str, OutputWritten]
) -> list[RunDirectoryProblem]:
    """`manifest.json` was written from the journal at terminalization: it must still agree."""
    try:
        manifest: Any = msgspec.json.decode(run_root.read_bytes(_MANIFEST))
    except (FsError, msgspec.DecodeError, ValueError):
        return []  # not written (a run killed before), or not ours to judge
    if not isinstance(manifest, dict):
        return []
    out: list[RunDirectoryProblem] = []
    terminal = facts.terminal
    recorded = manifest.get("status")
    last = facts.last
    if terminal is None and recorded not in (None, "running", "pending"):
        out.append(
            RunDirectoryProblem(
                version=last + 1,
                event="RunTerminated",
                message=f"manifest.json in the run directory records status {recorded!r}, "
                f"but the journal ends at event {last} without a RunTerminated "
                "(events were deleted)",
            )
        )
    elif terminal is not None and recorded is not None and recorded != terminal.status.value:
        out.append(
            RunDirectoryProblem(
                version=terminal.originator_version,
                event="RunTerminated",
                message=f"status {terminal.status.value!r}, but manifest.json in the run "
                f"directory records {recorded!r}",
            )
        )
    listed = manifest.get("outputs")
    if isinstance(listed, list):
        in_manifest = {
            o.get("name"): o.get("sha256") for o in listed if isinstance(o, dict) and "name" in o
        }
        for name, sha in sorted(in_manifest.items(), key=lambda kv: str(kv[0])):
            event = written.get(name)  # type: ignore[arg-type]
            if event is None:
                out.append(
                    RunDirectoryProblem(
                        version=0,
                        event="OutputWritten",
                        message=f"manifest.json lists output {name!r} that the journal does "
                        "not record (its OutputWritten was deleted)",
                    )
                )
            elif sha != event.sha256:
                out.append(
                    RunDirectoryProblem(
                        version=event.originator_version,
                        event="OutputWritten",
                        message=f"output {name!r} is recorded as sha256 "
                        f"{_short(event.sha256)}…, manifest.json lists {_short(str(sha))}…",
                    )
                )
    out += _check_llm_spend(facts, manifest)
    counted = manifest.get("decisions")
    if isinstance(counted, dict):
        # Since manifest v2 the decisions whose stage never started are counted apart
        # (docs/operations.md "`explain`"): together they are every decision journaled.
        never = manifest.get("not_started")
        if isinstance(never, dict):
            counted = {k: counted.get(k, 0) + never.get(k, 0) for k in {*counted, *never}}
        journal = facts.decisions
        if dict(sorted(journal.items())) != dict(sorted(counted.items())):
            out.append(
                RunDirectoryProblem(
                    version=0,
                    event="StageDecided",
                    message=f"manifest.json counts decisions {_counts(counted)}, the journal "
                    f"holds {_counts(journal)} (decisions were deleted, inserted or changed)",
                )
            )
    return out


def _counts(counts: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"


def _check_llm_spend(facts: RunFacts, manifest: dict[str, Any]) -> list[RunDirectoryProblem]:
    """The LLM spend and savings `manifest.json` recorded must be the journal's fold: an
    edit of an attempt's tokens or cost, rechained or not, shows here (docs/operations.md
    "Auditing a run")."""
    recorded = manifest.get("llm")
    journal = facts.llm.view() if facts.llm.used else None
    if recorded is None and journal is None:
        return []
    if msgspec.json.encode(recorded, order="sorted") == msgspec.json.encode(
        journal, order="sorted"
    ):
        return []
    spent = (journal or {}).get("spent")
    listed = recorded.get("spent") if isinstance(recorded, dict) else None
    return [
        RunDirectoryProblem(
            version=0,
            event="LLMCallAttempted",
            message=f"manifest.json records LLM spend {_spend(listed)}, the journal folds "
            f"{_spend(spent)} (attempts or their usage were changed, added or deleted)",
        )
    ]


def _spend(view: Any) -> str:
    if not isinstance(view, dict):
        return "none"
    return (
        f"{view.get('attempts', 0)} attempt(s), {view.get('prompt_tokens', 0)}+"
        f"{view.get('completion_tokens', 0)} tokens, cost {view.get('cost', 0)}"
    )
