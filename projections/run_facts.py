"""What one run was made of and what it made: the fold behind `runs show` and `runs diff`.

Folded from a run's events like every view: the resolved settings, input and reference
digests, each step's module (as declared) and identity components, the decisions per
step and lane, the artifacts and the outputs with the lane that produced each. Two pure
functions read it: `provenance` (each output with its step, lane and decisions) and
`diff_runs` (what changed between two runs). See docs/operations.md "Comparing runs".
"""

from __future__ import annotations

from typing import Any, ClassVar

from runjournal.domain.events import (
    ArtifactGenerated,
    ConfigurationResolved,
    InputsFingerprinted,
    LaneResolved,
    ModuleObserved,
    OutputWritten,
    RunEvent,
    StageDecided,
    StageExecuted,
)
from runjournal.domain.identity import COMPONENT_ORDER
from runjournal.domain.names import safe_lane_id
from runjournal.projections.base import RunOutline

# runjournal's own files in a run directory (no step produced them).
OWN_FILES = frozenset({"chunk-map.json", "chunk-map.index.json"})


class RunFactsProjection(RunOutline):
    NAME: ClassVar[str] = "run_facts"
    VERSION: ClassVar[int] = 1

    def __init__(self) -> None:
        super().__init__()
        self.settings: dict[str, Any] = {}
        self.inputs: dict[str, str] = {}
        self.references: dict[str, str] = {}
        self.modules: dict[str, dict[str, Any]] = {}
        self.components: dict[str, dict[str, str]] = {}  # step -> component -> digest
        self.lanes: dict[str, list[str]] = {}  # step -> lanes, in order
        self.lane_decisions: dict[tuple[str, str], dict[str, int]] = {}
        self.executed: dict[tuple[str, str], int] = {}
        self.restored: set[tuple[str, str]] = set()
        self.written: list[dict[str, Any]] = []

    def apply(self, event: RunEvent) -> None:
        super().apply(event)
        if isinstance(event, StageDecided):
            counts = self.lane_decisions.setdefault((event.step, event.lane), {})
            counts[event.code.value] = counts.get(event.code.value, 0) + 1
        elif isinstance(event, StageExecuted):
            key = (event.step, event.lane)
            self.executed[key] = self.executed.get(key, 0) + 1
        elif isinstance(event, LaneResolved):
            self.lanes.setdefault(event.step, []).append(event.lane)
            self.components[event.step] = {
                name: getattr(event.components, name) for name in COMPONENT_ORDER
            }
        elif isinstance(event, ArtifactGenerated) and event.restored:
            self.restored.add((event.step, event.lane))
        elif isinstance(event, OutputWritten):
            self.written.append(
                {
                    "name": event.name,
                    "sha256": event.sha256,
                    "size": event.size,
                    "step": event.step,
                    "lane": event.lane,
                }
            )
        elif isinstance(event, ModuleObserved):
            self.modules[event.step] = {
                "module": event.module,
                "fingerprint": event.fingerprint,
                "source_sha256": event.source_sha256,
            }
        elif isinstance(event, InputsFingerprinted):
            self.inputs = {f.name: f.sha256 for f in event.sources}
            self.references = {f.name: f.sha256 for f in event.references}
        elif isinstance(event, ConfigurationResolved):
            self.settings = {s.name: s.value for s in event.settings}

    def _producer(self, output: dict[str, Any]) -> tuple[str | None, str | None]:
        """The (step, lane) of an output; for journals before outputs named them, the
        artifact files are recognised by their name, `artifacts/<step>/<safe lane>.json`."""
        if output["step"] is not None:
            return output["step"], output["lane"]
        parts = output["name"].split("/")
        if len(parts) == 3 and parts[0] == "artifacts" and parts[2].endswith(".json"):
            for lane in self.lanes.get(parts[1], []):
                if safe_lane_id(lane) + ".json" == parts[2]:
                    return parts[1], lane
        return None, None

    def _decisions_by_step(self) -> dict[str, dict[str, dict[str, int]]]:
        """step -> lane -> reason code -> count."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        for (step, lane), counts in self.lane_decisions.items():
            out.setdefault(step, {})[lane] = dict(sorted(counts.items()))
        return out

    def view(self) -> dict[str, Any]:
        outputs = []
        for output in self.written:
            step, lane = self._producer(output)
            key = (step or "", lane or "")
            outputs.append(
                {
                    **output,
                    "step": step,
                    "lane": lane,
                    "decisions": dict(sorted(self.lane_decisions.get(key, {}).items())),
                    "executed": self.executed.get(key, 0),
                    "restored": key in self.restored,
                }
            )
        return {
            "run_id": self.run_id,
            "pipeline": self.pipeline,
            "status": self.status.value,
            "started": self.started,
            "ended": self.ended,
            "error": self.error,
            "settings": self.settings,
            "inputs": self.inputs,
            "references": self.references,
            "modules": self.modules,
            "components": self.components,
            "lanes": {step: list(lanes) for step, lanes in self.lanes.items()},
            "decisions": self._decisions_by_step(),
            "outputs": outputs,
            "projection": {"name": self.NAME, "version": self.VERSION},
        }


def provenance(view: dict[str, Any]) -> dict[str, Any]:
    """`runs show --outputs`: every output with the step, lane and decisions behind it."""
    return {"run_id": view["run_id"], "status": view["status"], "outputs": view["outputs"]}


def _step_decisions(view: dict[str, Any]) -> dict[tuple[str, str], int]:
    """(step, code) -> count over every lane of the step."""
    out: dict[tuple[str, str], int] = {}
    for step, lanes in view["decisions"].items():
        for counts in lanes.values():
            for code, n in counts.items():
                out[(step, code)] = out.get((step, code), 0) + n
    return out


def _files(a: dict[str, str], b: dict[str, str]) -> dict[str, Any]:
    """Names added, removed and changed (by digest), and how many are unchanged."""
    both = set(a) & set(b)
    return {
        "added": sorted(set(b) - set(a)),
        "removed": sorted(set(a) - set(b)),
        "changed": sorted(n for n in both if a[n] != b[n]),
        "unchanged": sum(1 for n in both if a[n] == b[n]),
    }


def diff_runs(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What changed from run A to run B: settings, inputs, identity, decisions, outputs.

    Identity is compared per step: which components differ (config, module, validators,
    references, overrides, profile, profile source), the declared module fingerprints,
    and the lanes each run had. Decisions are counted per step and reason code; outputs
    by name and digest.
    """
    settings = [
        {"name": name, "a": a["settings"].get(name), "b": b["settings"].get(name)}
        for name in sorted(set(a["settings"]) | set(b["settings"]))
        if a["settings"].get(name) != b["settings"].get(name)
    ]
    steps = []
    for step in list(dict.fromkeys([*a["components"], *b["components"]])):
        ca, cb = a["components"].get(step), b["components"].get(step)
        ma, mb = a["modules"].get(step, {}), b["modules"].get(step, {})
        lanes_a, lanes_b = set(a["lanes"].get(step, [])), set(b["lanes"].get(step, []))
        entry = {
            "step": step,
            "only_in": "a" if cb is None else "b" if ca is None else None,
            "components": [name for name in COMPONENT_ORDER if ca and cb and ca[name] != cb[name]],
            "fingerprint": {"a": ma.get("fingerprint"), "b": mb.get("fingerprint")},
            "source_changed": bool(
                ma.get("source_sha256")
                and mb.get("source_sha256")
                and ma["source_sha256"] != mb["source_sha256"]
            ),
            "lanes_added": sorted(lanes_b - lanes_a),
            "lanes_removed": sorted(lanes_a - lanes_b),
        }
        if (
            entry["only_in"]
            or entry["components"]
            or entry["source_changed"]
            or entry["lanes_added"]
            or entry["lanes_removed"]
            or entry["fingerprint"]["a"] != entry["fingerprint"]["b"]
        ):
            steps.append(entry)
    da, db = _step_decisions(a), _step_decisions(b)
    decisions = [
        {"step": step, "code": code, "a": da.get((step, code), 0), "b": db.get((step, code), 0)}
        for step, code in sorted(set(da) | set(db), key=_decision_order(a, b))
        if da.get((step, code), 0) != db.get((step, code), 0)
    ]
    outputs_a = {o["name"]: o["sha256"] for o in a["outputs"]}
    outputs_b = {o["name"]: o["sha256"] for o in b["outputs"]}
    return {
        "a": {"run_id": a["run_id"], "status": a["status"], "pipeline": a["pipeline"]},
        "b": {"run_id": b["run_id"], "status": b["status"], "pipeline": b["pipeline"]},
        "settings": settings,
        "inputs": _files(a["inputs"], b["inputs"]),
        "references": _files(a["references"], b["references"]),
        "steps": steps,
        "decisions": decisions,
        "outputs": _files(outputs_a, outputs_b),
    }


def _decision_order(a: dict[str, Any], b: dict[str, Any]):
    order = {step: i for i, step in enumerate(dict.fromkeys([*a["lanes"], *b["lanes"]]))}
    return lambda key: (order.get(key[0], len(order)), key[0], key[1])
