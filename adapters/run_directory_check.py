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
from typing import Any, NamedTuple

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


class _Output(NamedTuple):
    """What the check needs of an `OutputWritten` (a whole event was held per output)."""

    version: int
    name: str
    sha256: bytes | str  # packed (`_packed`)
    size: int


class _Artifact(NamedTuple):
    """What the check needs of an `ArtifactGenerated` (a whole event was held per lane)."""

    version: int
    step: str
    lane: str
    sha256: bytes | str  # packed (`_packed`)


def _packed(digest: str) -> bytes | str:
    """A digest as its 32 bytes when it is lower-case hex that gives them back exactly
    (what the run records), else the text itself: compared packed, they are equal exactly
    when the texts are."""
    try:
        raw = bytes.fromhex(digest)
    except ValueError:
        return digest
    return raw if raw.hex() == digest else digest


def _text(digest: bytes | str) -> str:
    return digest.hex() if isinstance(digest, bytes) else digest


class RunFacts:
    """What the check needs of a run's events, gathered in one pass.

    Only the allocation, outputs, artifacts, terminal event, last version and decision
    counts are kept, so `journal audit` streams the run (docs/performance.md "Reading
    commands on a large run") and feeds this beside the audit. Of each output and
    artifact only what the check compares is kept, digests packed (about 300 bytes
    each, where the event was about a kilobyte: docs/performance.md "gc, audit and
    explain at scale").
    """

    def __init__(self) -> None:
        self.allocated: RunAllocated | None = None
        self.outputs: list[_Output] = []
        self.artifacts: list[_Artifact] = []
        self.terminal: RunTerminated | None = None
        self.last = 0
        self.decisions: dict[str, int] = {}
        self.llm = LLMUsageFold()  # spent and saved, as the manifest's `llm` folds it
        self._steps: dict[str, str] = {}  # one string per step name

    def feed(self, event: RunEvent) -> None:
        self.last = event.originator_version
        self.llm.apply(event)
        if isinstance(event, StageDecided):
            self.decisions[event.code.value] = self.decisions.get(event.code.value, 0) + 1
        elif isinstance(event, OutputWritten):
            self.outputs.append(
                _Output(event.originator_version, event.name, _packed(event.sha256), event.size)
            )
        elif isinstance(event, ArtifactGenerated):
            step = self._steps.setdefault(event.step, event.step)
            self.artifacts.append(
                _Artifact(event.originator_version, step, event.lane, _packed(event.sha256))
            )
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

    def problem(version: int, kind: str, message: str) -> None:
        problems.append(RunDirectoryProblem(version=version, event=kind, message=message))

    written: dict[str, _Output] = {}
    for output in facts.outputs:
        written[output.name] = output
        files += 1
        name, sha256 = output.name, _text(output.sha256)
        try:
            data = run_root.read_bytes(name)
        except FsNotFound:
            problem(output.version, "OutputWritten", f"output {name!r} is not in the run directory")
            continue
        except (FsError, ValueError) as exc:
            problem(output.version, "OutputWritten", f"output {name!r} cannot be read: {exc}")
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest != sha256 or len(data) != output.size:
            problem(
                output.version,
                "OutputWritten",
                f"output {name!r} in the run directory has sha256 {_short(digest)}… "
                f"({len(data)} bytes), the journal records {_short(sha256)}… "
                f"({output.size} bytes)",
            )
        del data
    for artifact in facts.artifacts:
        name = f"artifacts/{artifact.step}/{safe_lane_id(artifact.lane)}.json"
        found = written.get(name)
        if found is not None and found.sha256 != artifact.sha256:
            problem(
                artifact.version,
                "ArtifactGenerated",
                f"artifact of step {artifact.step!r} lane {artifact.lane!r} is recorded as "
                f"sha256 {_short(_text(artifact.sha256))}…, but {name} in the run directory "
                f"is {_short(_text(found.sha256))}…",
            )
    problems += _check_manifest(facts, run_root, written)
    return RunDirectoryCheck(
        status=RunDirectoryStatus.CHECKED, path=run_dir, files_checked=files, problems=problems
    )


class _Listed(msgspec.Struct):
    """An entry of the manifest's `outputs`, as the check compares it."""

    name: str
    sha256: Any = None


class _Manifest(msgspec.Struct):
    """The keys of `manifest.json` the check reads; the rest (its artifacts, lanes and
    plans, most of it) is skipped unread. Decoded whole, a manifest cost about a
    kilobyte a document (docs/performance.md "gc, audit and explain at scale")."""

    status: Any = None
    outputs: list[_Listed] | None = None
    llm: Any = None
    decisions: Any = None
    not_started: Any = None


class _AnyManifest(_Manifest):
    """The same keys, `outputs` as it is (entries of any shape, checked one by one)."""

    outputs: Any = None  # type: ignore[assignment]


def _read_manifest(data: bytes) -> _Manifest | None:
    """The manifest's keys the check reads (None: not a JSON object)."""
    try:
        return msgspec.json.decode(data, type=_Manifest)
    except msgspec.ValidationError:
        pass
    try:
        return msgspec.json.decode(data, type=_AnyManifest)
    except msgspec.ValidationError:
        return None


def _check_manifest(
    facts: RunFacts, run_root: FsRoot, written: dict[str, _Output]
) -> list[RunDirectoryProblem]:
    """`manifest.json` was written from the journal at terminalization: it must still agree."""
    try:
        manifest = _read_manifest(run_root.read_bytes(_MANIFEST))
    except (FsError, msgspec.DecodeError, ValueError):
        return []  # not written (a run killed before), or not ours to judge
    if manifest is None:
        return []
    out: list[RunDirectoryProblem] = []
    terminal = facts.terminal
    recorded = manifest.status
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
    listed = manifest.outputs
    if isinstance(listed, list):
        in_manifest = _listed(listed)
        for name, sha in sorted(in_manifest.items(), key=lambda kv: str(kv[0])):
            found = written.get(name)  # type: ignore[arg-type]
            if found is None:
                out.append(
                    RunDirectoryProblem(
                        version=0,
                        event="OutputWritten",
                        message=f"manifest.json lists output {name!r} that the journal does "
                        "not record (its OutputWritten was deleted)",
                    )
                )
            elif sha != _text(found.sha256):
                out.append(
                    RunDirectoryProblem(
                        version=found.version,
                        event="OutputWritten",
                        message=f"output {name!r} is recorded as sha256 "
                        f"{_short(_text(found.sha256))}…, manifest.json lists {_short(str(sha))}…",
                    )
                )
    out += _check_llm_spend(facts, manifest)
    counted = manifest.decisions
    if isinstance(counted, dict):
        # Since manifest v2 the decisions whose stage never started are counted apart
        # (docs/operations.md "`explain`"): together they are every decision journaled.
        never = manifest.not_started
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


def _listed(listed: list[Any]) -> dict[Any, Any]:
    """The manifest's outputs, name to sha256 (an entry with no name is passed over)."""
    out: dict[Any, Any] = {}
    for o in listed:
        if isinstance(o, _Listed):
            out[o.name] = o.sha256
        elif isinstance(o, dict) and "name" in o:
            out[o["name"]] = o.get("sha256")
    return out


def _check_llm_spend(facts: RunFacts, manifest: _Manifest) -> list[RunDirectoryProblem]:
    """The LLM spend and savings `manifest.json` recorded must be the journal's fold: an
    edit of an attempt's tokens or cost, rechained or not, shows here (docs/operations.md
    "Auditing a run")."""
    recorded = manifest.llm
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
