"""The HTML run report: the fold (`projections/html_report.py`) and the page it draws
(`projections/html_render.py`), from hand-built events."""

from __future__ import annotations

import itertools
import re
import shlex
import uuid
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.domain.decisions import CheckpointState, Stage
from runjournal.domain.events import (
    ArtifactGenerated,
    CheckpointWriteFailed,
    ChunkPlanResolved,
    ConfigurationResolved,
    DebugBundleAllocated,
    FileFingerprint,
    InputsFingerprinted,
    LaneResolved,
    LLMCallAttempted,
    OutputsValidated,
    OutputWritten,
    PlanOutcome,
    ProfileObserved,
    RefusedName,
    RunAllocated,
    RunError,
    RunEvent,
    RunPhase,
    RunStatus,
    RunTerminated,
    Setting,
    StageDecided,
    StageExecuted,
    StageFailed,
    TerminalPersistenceFailed,
    WarningRecorded,
)
from runjournal.domain.identity import DependencyFingerprint, LaneComponents, invocation_identity
from runjournal.domain.llm import AttemptStatus
from runjournal.domain.reasons import ReasonCode, category_of, detail_for
from runjournal.projections.base import fold
from runjournal.projections.html_render import (
    _NODE_H,
    _NODE_W,
    GROUP_ABOVE,
    GROUP_SIZE,
    read_report_head,
    render_report_html,
)
from runjournal.projections.html_report import HtmlReportProjection

COMPONENTS = LaneComponents("c", "m", "", "", "", "", "")
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class Journal:
    """Events of one run, one millisecond apart, built as the runner records them."""

    def __init__(self, run_id: str = "20260102T030405Z-0a0b0c0d") -> None:
        self.run_id = run_id
        self.id = uuid.uuid5(uuid.NAMESPACE_URL, run_id)
        self.events: list[RunEvent] = []

    def emit(self, cls: type[RunEvent], **fields: Any) -> RunEvent:
        event = cls(
            originator_id=self.id,
            originator_version=len(self.events) + 1,
            timestamp=T0 + timedelta(milliseconds=len(self.events)),
            **fields,
        )
        self.events.append(event)
        return event

    def allocate(self, text: str = "", **over: Any) -> None:
        fields = {
            "run_id": self.run_id,
            "pipeline": "demo",
            "pipeline_file": f"/work/demo{text}/pipeline.toml",
            "argv": ["run", "pipeline.toml", "--set", f"note={text}"],
            "tool_version": "0.1.0",
            "run_dir": f"/out{text}/{self.run_id}",
            "output_root": f"/out{text}",
            "cache_root": f"/cache{text}",
            "workspace": f"/cache{text}/workspaces/demo",
            "debug_bundle": None,
            "host": f"host{text}",
            "pid": 7,
            "process_start": 1.0,
        }
        fields.update(over)
        self.emit(RunAllocated, **fields)

    def lane(self, step: str, lane: str, *, chunks: int = 1, deps: tuple[str, ...] = ()) -> None:
        self.emit(
            LaneResolved,
            step=step,
            lane=lane,
            components=COMPONENTS,
            lane_identity=f"id:{step}:{lane}",
            dependencies=[DependencyFingerprint(d, lane, "k", "s", "m", "0" * 64, 1) for d in deps],
            chunks=chunks,
            forced=False,
        )

    def decide(self, step: str, lane: str, stage: Stage, code: ReasonCode, chunk: str = "") -> None:
        self.emit(
            StageDecided,
            step=step,
            lane=lane,
            stage=stage,
            chunk=chunk,
            code=code,
            category=category_of(code),
            detail=detail_for(code),
            forced=False,
            resumed=True,
            checkpoint=CheckpointState.PRESENT,
            input="i",
            dependencies="",
            recorded={},
        )

    def executed(self, step: str, lane: str, stage: Stage, chunk: str = "") -> None:
        self.emit(
            StageExecuted, step=step, lane=lane, stage=stage, chunk=chunk, sha256="a" * 64, size=9
        )

    def artifact(self, step: str, lane: str, warnings: tuple[str, ...] = ()) -> None:
        self.emit(
            ArtifactGenerated,
            step=step,
            lane=lane,
            kind="terms",
            schema="s/v1",
            media_type="application/json",
            sha256="b" * 64,
            size=10,
            warnings=list(warnings),
        )

    def lane_run(self, step: str, lane: str, codes: dict[Stage, ReasonCode], **kw: Any) -> None:
        self.lane(step, lane, deps=kw.get("deps", ()))
        for stage, code in codes.items():
            self.decide(step, lane, stage, code, "c1" if stage is Stage.EXTRACT else "")
            if category_of(code).value != "reuse":
                self.executed(step, lane, stage, "c1" if stage is Stage.EXTRACT else "")
        self.artifact(step, lane, kw.get("warnings", ()))


REUSED = {s: ReasonCode.REUSED for s in Stage}


def two_step_run() -> Journal:
    """terms on two documents (one changed), then a corpus glossary consuming it."""
    j = Journal()
    j.allocate()
    j.lane_run("terms", "docs/a.md", REUSED)
    j.lane_run(
        "terms",
        "docs/b.md",
        {
            Stage.EXTRACT: ReasonCode.INPUT_CHANGED,
            Stage.MERGE: ReasonCode.STAGE_INPUT_CHANGED,
            Stage.NORMALIZE: ReasonCode.REUSED,
        },
    )
    j.lane_run(
        "glossary",
        "corpus",
        {s: ReasonCode.DEPENDENCY_INVALIDATED for s in Stage},
        deps=("terms",),
        warnings=("2 terms have no definition",),
    )
    j.emit(OutputsValidated, checked=1, refused=[])
    j.emit(OutputWritten, name="glossary.md", sha256="c" * 64, size=2048)
    j.emit(RunTerminated, status=RunStatus.SUCCEEDED, phase=RunPhase.EXECUTION)
    return j


def view_of(j: Journal) -> dict[str, Any]:
    return fold(HtmlReportProjection(), j.events).view()


class Page(HTMLParser):
    """Every start tag with its attributes, and the text, of a rendered page."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def having(self, tag: str, cls: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and cls in (a.get("class") or "").split()]

    @property
    def all_text(self) -> str:
        return "".join(self.text)


class TestFold:
    def test_one_cell_per_step_and_lane_coloured_by_the_most_severe_decision(self) -> None:
        view = view_of(two_step_run())
        cells = {(c["step"], c["lane"]): c for c in view["cells"]}
        assert list(cells) == [
            ("terms", "docs/a.md"),
            ("terms", "docs/b.md"),
            ("glossary", "corpus"),
        ]
        assert cells["terms", "docs/a.md"]["category"] == "reuse"
        assert cells["terms", "docs/a.md"]["reused"] == 3
        changed = cells["terms", "docs/b.md"]
        assert changed["category"] == "invalid"
        assert changed["code"] == "input_changed"  # ties between codes: alphabetical
        assert changed["stages"] == {
            "extract": {"input_changed": 1},
            "merge": {"stage_input_changed": 1},
            "normalize": {"reused": 1},
        }
        assert changed["executed"] == 2
        assert cells["glossary", "corpus"]["warnings"] == 1

    def test_steps_in_order_with_edges_from_what_their_lanes_consumed(self) -> None:
        view = view_of(two_step_run())
        assert [(s["step"], s["consumes"], s["lanes"]) for s in view["steps"]] == [
            ("terms", [], 2),
            ("glossary", ["terms"], 1),
        ]
        assert view["lanes"] == ["docs/a.md", "docs/b.md", "corpus"]

    def test_run_identity_timings_outputs_and_counts(self) -> None:
        j = two_step_run()
        view = view_of(j)
        run = view["run"]
        assert run["status"] == "succeeded" and run["phase"] == "execution"
        assert run["duration"] == (len(j.events) - 1) / 1000
        assert run["invocation_identity"] == invocation_identity(
            ["id:terms:docs/a.md", "id:terms:docs/b.md", "id:glossary:corpus"]
        )
        assert run["roots"]["run_dir"] == f"/out/{j.run_id}"
        assert view["outputs"] == [{"name": "glossary.md", "sha256": "c" * 64, "size": 2048}]
        assert view["module_calls"] == 5
        assert view["events"] == len(j.events)
        assert view["usage"] == {"spent": None, "saved": None}

    def test_a_failed_run_lists_its_failures_in_the_cell_and_the_run(self) -> None:
        j = Journal()
        j.allocate()
        j.lane("terms", "docs/a.md")
        j.decide("terms", "docs/a.md", Stage.EXTRACT, ReasonCode.NOT_RESUMED, "c1")
        j.emit(
            StageFailed,
            step="terms",
            lane="docs/a.md",
            stage=Stage.EXTRACT,
            chunk="c1",
            code=ReasonCode.STAGE_FAILED,
            message="ValueError: boom",
        )
        j.decide("terms", "docs/a.md", Stage.EXTRACT, ReasonCode.STAGE_FAILED, "c1")
        error = RunError("ValueError: boom", "terms", "docs/a.md", ReasonCode.STAGE_FAILED)
        j.emit(RunTerminated, status=RunStatus.FAILED, phase=RunPhase.EXECUTION, error=error)
        view = view_of(j)
        (cell,) = view["cells"]
        assert cell["category"] == "failure" and cell["code"] == "stage_failed"
        assert cell["failure"]["message"] == "ValueError: boom"
        assert view["failures"][0]["stage"] == "extract"
        assert view["run"]["error"]["reason_code"] == "stage_failed"
        assert [e["failed"] for e in view["executions"]] == [True]

    def test_tokens_and_cost_from_any_event_that_carries_them(self) -> None:
        class LLMCalled(RunEvent, frozen=True, kw_only=True):  # the shape LLM call events take
            prompt_tokens: int
            completion_tokens: int
            cost: float | None

        class ChunkReused(RunEvent, frozen=True, kw_only=True):
            saved_prompt_tokens: int
            saved_completion_tokens: int
            saved_cost: float | None

        j = two_step_run()
        terminated = j.events.pop()
        j.emit(LLMCalled, prompt_tokens=120, completion_tokens=30, cost=0.25)
        j.emit(LLMCalled, prompt_tokens=120, completion_tokens=30, cost=0.25)
        j.emit(ChunkReused, saved_prompt_tokens=100, saved_completion_tokens=20, saved_cost=None)
        j.emit(RunTerminated, status=terminated.status, phase=terminated.phase)
        view = view_of(j)
        assert view["usage"]["spent"] == {
            "calls": 2,
            "attempts": 2,
            "prompt_tokens": 240,
            "completion_tokens": 60,
            "cached_tokens": 0,
            "cost": 0.5,
            "retries": {},
        }
        assert view["usage"]["saved"] == {
            "stages": 1,
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "cost": None,
        }
        page = render_report_html(view)
        assert "spent: 2 calls (2 attempts), 240 prompt + 60 completion tokens, cost 0.5000" in page
        assert "saved by reuse: 1 stage, 100 prompt + 20 completion tokens, cost —" in page
        page = render_report_html(view_of(two_step_run()))
        assert "no LLM calls in this run" in page and "in this journal" not in page  # issue 32

    def test_attempts_of_one_call_are_one_call_and_retries_show_their_cause(self) -> None:
        """Issue 26 defect 7: "spent: 4,648 calls" counted attempts; retries were hidden."""
        j = two_step_run()
        terminated = j.events.pop()
        common = {
            "step": "terms",
            "lane": "docs/a.md",
            "stage": Stage.EXTRACT,
            "chunk": "c1",
            "call": 1,
            "profile_id": "p",
            "provider": "openai",
            "model": "m",
            "request_sha256": "a" * 64,
        }
        j.emit(
            LLMCallAttempted,
            **common,
            attempt=1,
            status=AttemptStatus.RATE_LIMITED,
            http_status=429,
            wait_ms=1000.0,
        )
        j.emit(LLMCallAttempted, **common, attempt=2, status=AttemptStatus.OK, prompt_tokens=9)
        j.emit(RunTerminated, status=terminated.status, phase=terminated.phase)
        view = view_of(j)
        spent = view["usage"]["spent"]
        assert (spent["calls"], spent["attempts"]) == (1, 2)
        assert spent["retries"] == {"rate_limited": {"attempts": 1, "wait_s": 1.0}}
        page = render_report_html(view)
        assert "spent: 1 call (2 attempts)" in page
        assert "rate_limited 1 (waited 1 s)" in page


class TestPage:
    def test_the_same_events_give_the_same_bytes(self) -> None:
        first = render_report_html(view_of(two_step_run()))
        second = render_report_html(view_of(two_step_run()))
        assert first == second

    def test_one_matrix_cell_per_step_and_lane_one_node_per_step(self) -> None:
        page = Page(render_report_html(view_of(two_step_run())))
        cells = page.having("div", "cell")
        assert [(c["data-step"], c["data-lane"]) for c in cells] == [
            ("terms", "docs/a.md"),
            ("terms", "docs/b.md"),
            ("glossary", "corpus"),
        ]
        assert "c-invalid" in (cells[1]["class"] or "")
        assert "stage_input_changed" in (cells[1]["title"] or "")
        # a step without a lane in a row: an empty place, not a cell
        assert len(page.having("div", "na")) == 3
        assert [n["data-step"] for n in page.having("g", "node")] == ["terms", "glossary"]
        assert len(page.having("path", "edge")) == 1

    def test_self_contained_no_script_no_remote_reference(self) -> None:
        page_text = render_report_html(view_of(two_step_run()))
        page = Page(page_text)
        assert not [t for t, _ in page.tags if t in ("script", "img", "iframe", "object")]
        for tag, attrs in page.tags:
            for name, value in attrs.items():
                assert not name.startswith("on"), (tag, name)
                if name in ("href", "src") and value:
                    assert value.startswith(("file:///", "#", "data:")), (tag, name, value)
        assert "default-src 'none'" in page_text
        assert "http://" not in page_text and "https://" not in page_text

    def test_the_head_names_projection_status_and_events(self) -> None:
        j = two_step_run()
        data = render_report_html(view_of(j)).encode()
        assert read_report_head(data) == (HtmlReportProjection.VERSION, "succeeded", len(j.events))
        assert read_report_head(b"<html>nothing</html>") is None

    def test_an_empty_run_renders(self) -> None:
        j = Journal()
        j.allocate()
        page = Page(render_report_html(view_of(j)))
        assert "running" in page.all_text
        assert page.having("div", "cell") == []

    def test_a_debug_bundle_is_linked(self) -> None:
        j = Journal()
        j.allocate(debug_bundle="/out/debug/x")
        j.emit(DebugBundleAllocated, path="/out/debug/x", trace=True)
        page = Page(render_report_html(view_of(j)))
        links = [a["href"] for t, a in page.tags if t == "a"]
        assert "file:///out/debug/x" in links
        assert "summary and trace" in page.all_text


@pytest.mark.parametrize(
    "path", ["/out/run", "/a b/ü/<x>\"'#?%&.md", "/docs/\udcff.md", "relative/x", ""]
)
def test_file_urls_are_the_percent_encoded_path(path: str) -> None:
    from urllib.parse import quote

    from runjournal.projections.html_render import _file_url

    expected = "file://" + quote(path, errors="surrogateescape") if path[:1] == "/" else None
    assert _file_url(path) == expected


class TestManyLanes:
    @pytest.mark.parametrize("lanes", [GROUP_ABOVE + 1, 500])
    def test_lanes_beyond_the_threshold_are_grouped_and_every_cell_is_kept(
        self, lanes: int
    ) -> None:
        j = Journal()
        j.allocate()
        names = [f"docs/part{i % 3}/{i:04d}.md" for i in range(lanes)]
        for i, name in enumerate(names):
            codes = REUSED if i % 7 else {s: ReasonCode.INPUT_CHANGED for s in Stage}
            j.lane_run("terms", name, codes)
            j.lane_run("headings", name, REUSED)
        j.emit(RunTerminated, status=RunStatus.SUCCEEDED, phase=RunPhase.EXECUTION)
        text = render_report_html(view_of(j))
        page = Page(text)
        assert len(page.having("div", "cell")) == 2 * lanes
        groups = page.having("details", "group")
        assert len(groups) >= 3  # one per directory at least, none open
        assert all("open" not in g for g in groups)
        summaries = page.having("div", "aggregate")
        assert len(summaries) == 2 * len(groups)
        assert all(len(p) <= GROUP_SIZE for p in _group_sizes(page))
        assert len(text) < 2_000 * lanes  # linear, a few hundred bytes per cell

    def test_one_directory_is_cut_into_consecutive_blocks(self) -> None:
        j = Journal()
        j.allocate()
        for i in range(GROUP_SIZE * 2 + 5):
            j.lane_run("terms", f"{i:04d}.md", REUSED)
        page = Page(render_report_html(view_of(j)))
        labels = [a["title"] for a in page.having("div", "grouplabel")]
        assert labels == ["0000.md … 0049.md", "0050.md … 0099.md", "0100.md … 0104.md"]
        shown = [t.strip() for t in page.text if t.startswith("▸")]
        assert shown == [
            "▸ lanes 1\u201350 of 105",
            "▸ lanes 51\u2013100 of 105",
            "▸ lanes 101\u2013105 of 105",
        ]


def test_many_directories_fall_back_to_blocks() -> None:
    j = Journal()
    j.allocate()
    for i in range(GROUP_ABOVE * 3):
        j.lane_run("terms", f"dir{i}/{i}.md", REUSED)
    page = Page(render_report_html(view_of(j)))
    assert len(page.having("details", "group")) == -(-GROUP_ABOVE * 3 // GROUP_SIZE)
    assert len(page.having("div", "cell")) == GROUP_ABOVE * 3


def _group_sizes(page: Page) -> list[list[str]]:
    """Lane labels per group, in page order (the header grid has none)."""
    sizes: list[list[str]] = []
    for tag, attrs in page.tags:
        if tag == "details":
            sizes.append([])
        elif tag == "div" and attrs.get("class") == "lane" and sizes:
            sizes[-1].append(attrs.get("title") or "")
    return sizes


# --- escaping ------------------------------------------------------------------------

PAYLOADS = (
    "<script>document.title='PWNED'</script>",
    '"><img src=x onerror="document.title=\'PWNED\'">',
    "'><svg onload=alert(1)>",
    "</style><b>x</b>",
)


def planted_run(text: str) -> Journal:
    """A run with `text` in every free-text field an event has (step ids included:
    the domain refuses such ids, the page must not rely on that)."""
    j = Journal()
    j.allocate(text, pipeline=f"demo{text}", tool_version=f"0.1{text}")
    j.emit(
        ConfigurationResolved,
        settings=[Setting(name=f"k{text}", value={"v": text}, origin=f"flag{text}")],
    )
    j.emit(DebugBundleAllocated, path=f"/debug{text}", trace=False)
    j.emit(
        InputsFingerprinted,
        sources=[FileFingerprint(f"docs/{text}.md", "d" * 64, 5)],
        references=[FileFingerprint(f"ref{text}", "e" * 64, 3)],
    )
    j.emit(
        ProfileObserved,
        step=f"s{text}",
        profile_id=f"p{text}",
        provider=f"prov{text}",
        model=f"m{text}",
        profile="x",
        profile_source="y",
        source_kind="builtin",
    )
    j.emit(
        ChunkPlanResolved,
        source=f"docs/{text}.md",
        plan_key="k",
        outcomes=[PlanOutcome.COMPUTED],
        chunks=1,
    )
    step, lane = f"s{text}", f"docs/{text}.md"
    j.lane_run(step, lane, {Stage.EXTRACT: ReasonCode.NOT_RESUMED}, warnings=(f"w{text}",))
    j.lane("consumer", lane, deps=(step,))
    j.emit(WarningRecorded, step=step, lane=lane, message=f"warn{text}")
    j.emit(
        CheckpointWriteFailed,
        step=step,
        lane=lane,
        stage=Stage.EXTRACT,
        chunk=f"c{text}",
        message=f"disk{text}",
    )
    j.emit(
        StageFailed,
        step=step,
        lane=lane,
        stage=Stage.MERGE,
        chunk="",
        code=ReasonCode.STAGE_FAILED,
        message=f"ValueError: {text}",
    )
    j.emit(OutputsValidated, checked=1, refused=[RefusedName(name=f"o{text}", refusal=text)])
    j.emit(OutputWritten, name=f"out{text}.md", sha256="f" * 64, size=1)
    j.emit(
        RunTerminated,
        status=RunStatus.FAILED,
        phase=RunPhase.EXECUTION,
        error=RunError(f"boom{text}", step, lane, ReasonCode.STAGE_FAILED),
    )
    j.emit(TerminalPersistenceFailed, target=f"t{text}", message=f"m{text}")
    return j


@pytest.mark.parametrize("payload", PAYLOADS)
def test_every_journal_value_is_escaped(payload: str) -> None:
    text = render_report_html(view_of(planted_run(payload)))
    page = Page(text)
    own = Page(render_report_html(view_of(planted_run("plain"))))
    # the planted page has exactly the tags and attribute names of a plain one
    assert [(t, sorted(a)) for t, a in page.tags] == [(t, sorted(a)) for t, a in own.tags]
    assert not {"script", "img"} & {t for t, _ in page.tags}
    for tag, attrs in page.tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
    assert payload not in text  # never raw
    # ... and shown as text where the journal had it: messages, names, paths, settings
    shown = page.all_text
    for expected in (
        f"boom{payload}",
        f"warn{payload}",
        f"ValueError: {payload}",
        f"w{payload}",
        f"disk{payload}",
        f"out{payload}.md",
        shlex.quote(f"note={payload}"),  # the command line, as a shell would take it
    ):
        assert expected in shown, expected
    attributes = " ".join(v or "" for _, a in page.tags for v in a.values())
    assert f"docs/{payload}.md" in shown and f"docs/{payload}.md" in attributes


# --- every dependency edge of the step graph is visible (issue 32) -----------------


def _path_points(d: str, samples: int = 40) -> list[tuple[float, float]]:
    """Points along an SVG path of M, L, Q and C commands (absolute coordinates)."""
    tokens = re.findall(r"[MLQC]|-?\d+(?:\.\d+)?", d)
    points: list[tuple[float, float]] = []
    at = (0.0, 0.0)
    i = 0
    while i < len(tokens):
        cmd = tokens[i]
        n = {"M": 1, "L": 1, "Q": 2, "C": 3}[cmd]
        xy = [float(t) for t in tokens[i + 1 : i + 1 + 2 * n]]
        ctrl = [at] + [(xy[k], xy[k + 1]) for k in range(0, 2 * n, 2)]
        i += 1 + 2 * n
        if cmd == "M":
            at = ctrl[1]
            points.append(at)
            continue
        for step in range(1, samples + 1):
            t = step / samples
            pts = ctrl
            while len(pts) > 1:  # de Casteljau
                pts = [
                    (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t)
                    for a, b in itertools.pairwise(pts)
                ]
            points.append(pts[0])
        at = ctrl[-1]
    return points


def _hidden_edges(page_text: str) -> list[tuple[str, str]]:
    """(edge title, node step) for every edge point strictly inside a node's box."""
    nodes = {
        m.group(1): (float(m.group(2)), float(m.group(3)))
        for m in re.finditer(
            r'<g class="node [^"]*" data-step="([^"]*)" transform="translate\((\d+),(\d+)\)"',
            page_text,
        )
    }
    hidden = []
    for m in re.finditer(r'<path class="edge" d="([^"]*)"[^>]*><title>([^<]*)</title>', page_text):
        for px, py in _path_points(m.group(1)):
            for step, (nx, ny) in nodes.items():
                if nx + 1 < px < nx + _NODE_W - 1 and ny + 1 < py < ny + _NODE_H - 1:
                    hidden.append((m.group(2), step))
    return sorted(set(hidden))


def _graph_run(consumes: dict[str, tuple[str, ...]]) -> str:
    j = Journal()
    j.allocate()
    for step, deps in consumes.items():
        j.lane_run(step, "corpus", REUSED, deps=deps)
    j.emit(RunTerminated, status=RunStatus.SUCCEEDED, phase=RunPhase.EXECUTION)
    return render_report_html(view_of(j))


def test_the_glossary_examples_terms_to_glossary_arrow_is_not_behind_definitions() -> None:
    page_text = _graph_run(
        {"terms": (), "definitions": ("terms",), "glossary": ("terms", "definitions")}
    )
    titles = re.findall(r'<path class="edge"[^>]*><title>([^<]*)</title>', page_text)
    assert sorted(titles) == [
        "definitions consumes terms",
        "glossary consumes definitions",
        "glossary consumes terms",
    ]
    assert _hidden_edges(page_text) == []
    # every edge stays inside the drawing
    svg = re.search(r'<svg class="step-graph" width="(\d+)" height="(\d+)"', page_text)
    assert svg is not None
    width, height = float(svg.group(1)), float(svg.group(2))
    for d in re.findall(r'<path class="edge" d="([^"]*)"', page_text):
        assert all(0 <= x <= width and 0 <= y <= height for x, y in _path_points(d))


@given(st.lists(st.sets(st.integers(min_value=0, max_value=30), max_size=4), max_size=7))
@settings(max_examples=40, deadline=None)
def test_no_dependency_edge_is_hidden_behind_a_node(picks: list[set[int]]) -> None:
    consumes: dict[str, tuple[str, ...]] = {}
    for i, pick in enumerate(picks):
        earlier = list(consumes)
        chosen = sorted({earlier[p % len(earlier)] for p in pick}) if earlier else []
        consumes[f"s{i}"] = tuple(chosen)
    if not consumes:
        return
    page_text = _graph_run(consumes)
    assert len(re.findall(r'<path class="edge"', page_text)) == sum(map(len, consumes.values()))
    assert _hidden_edges(page_text) == []
