"""Calls shipped as `StageTask`s and run by the worker function give the run a thread
would (docs/internals.md "Executors"), and a reply is decoded by the coordinator's codec
before it is accepted. The "workers" here are `run_stage_task` in this process, each task
and reply pickled on the way, as a process pool or Dask sends them."""

from __future__ import annotations

import hashlib
import pickle
from collections import deque
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
from runjournal.adapters.executors.worker import run_stage_task
from runjournal.adapters.module_loader import load_module, module_shipment
from runjournal.domain.chunking import ChunkingSettings, ChunkStrategy
from runjournal.domain.identity import LaneComponents
from runjournal.domain.pipeline import ResolvedPipeline, ResolvedStep, Scope, Source
from runjournal.domain.runner import PipelineRunner, StageFailure
from runjournal.domain.runner.tasks import StageReply
from support.recorder import FakeRecorder

PLUGIN = """
import msgspec
from runjournal.domain.modules import Module, Normalized


class Tally(msgspec.Struct, frozen=True):
    words: list[str]
    seen: int


class Words(Module):
    fingerprint = "t.words/1"
    artifact_kind = "words"
    schema = "t.words/v1"
    chunk_type = list[str]
    merged_type = list[str]
    artifact_type = Tally

    def reads(self, stage, ctx):
        # extract reads how many words each consumed lane has, not the words
        if stage != "extract" or not ctx.consumed:
            return None
        return {
            p: {ln: len(t.words) for ln, t in lanes.items()} for p, lanes in ctx.consumed.items()
        }

    def extract(self, chunk, ctx):
        if "boom" in chunk.text:
            raise ValueError(f"boom in {ctx.lane}")
        seen = [f"{ln}={v!r}" for c in ctx.consumed.values() for ln, v in sorted(c.items())]
        return sorted({w.strip(".,").lower() for w in chunk.text.split()} | set(seen))

    def merge(self, parts, ctx):
        return sorted({w for p in parts for w in p})

    def normalize(self, merged, ctx):
        seen = sum(len(t.words) for lanes in ctx.consumed.values() for t in lanes.values())
        return Normalized(Tally(merged, seen), [] if merged else ["no words"])
"""


class Shipping:
    """Capacity 1; a call with a task is pickled, run by the worker function, its reply
    pickled back and accepted; `tamper` replaces every reply's bytes."""

    capacity = 1

    def __init__(self, tamper: bytes | None = None) -> None:
        self.queue: deque[tuple[int, Any]] = deque()
        self.tamper = tamper
        self.shipped = 0

    def submit(self, key: int, call: Any) -> None:
        self.queue.append((key, call))

    def next_done(self) -> tuple[int, Any]:
        key, call = self.queue.popleft()
        if call.task is None:
            return key, call()
        self.shipped += 1
        task = pickle.loads(pickle.dumps(call.task()))
        reply = pickle.loads(pickle.dumps(run_stage_task(task)))
        if self.tamper is not None and reply.data is not None:
            reply = StageReply(data=self.tamper)
        return key, call.accept(reply)


def _components(tag: str) -> LaneComponents:
    return LaneComponents(
        config=tag,
        module="m",
        validators="",
        references="",
        overrides="",
        profile="",
        profile_source="",
    )


def _pipeline(plugin_dir: Path, texts: dict[str, str]) -> ResolvedPipeline:
    spec = "plugin.py:Words"
    steps = []
    for step_id, scope, consumes in (
        ("words", Scope.DOCUMENT, ()),
        ("again", Scope.CORPUS, ("words",)),
    ):
        module = load_module(spec, pipeline_dir=str(plugin_dir))
        steps.append(
            ResolvedStep(
                id=step_id,
                module=module,
                scope=scope,
                consumes=consumes,
                params={"n": 1},
                components=_components(step_id),
                shipment=module_shipment(spec, module, pipeline_dir=str(plugin_dir)),
            )
        )
    sources = tuple(
        Source(name, t.encode(), hashlib.sha256(t.encode()).hexdigest())
        for name, t in sorted(texts.items())
    )
    return ResolvedPipeline(
        name="p",
        steps=tuple(steps),
        sources=sources,
        chunking=ChunkingSettings(strategy=ChunkStrategy.PARAGRAPHS, max_chars=30),
        references={"r.md": "reference"},
    )


def _run(pipe: ResolvedPipeline, executor: Any = None) -> tuple[Any, list, str | None]:
    sink = FakeRecorder()
    try:
        outcome = PipelineRunner(journal=sink, executor=executor).run(pipe)
    except StageFailure as failure:
        return None, sink.records(), failure.message
    return [(o.name, o.data) for o in outcome.outputs], sink.records(), None


WORDS = st.sampled_from(["alpha", "beta", "Gamma.", "delta,", "boom", "é", "zeta"])
PARAGRAPH = st.lists(WORDS, min_size=1, max_size=6).map(" ".join)
DOC = st.lists(PARAGRAPH, min_size=1, max_size=4).map("\n\n".join)


@hyp_settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.dictionaries(st.sampled_from(["a.md", "b.md", "c.md"]), DOC, min_size=1, max_size=3))
def test_shipped_calls_give_the_run_a_local_call_gives(tmp_path: Path, texts: dict) -> None:
    (tmp_path / "plugin.py").write_text(PLUGIN)
    pipe = _pipeline(tmp_path, texts)
    shipping = Shipping()
    assert _run(pipe, shipping) == _run(pipe)
    assert shipping.shipped > 0


def test_a_reply_the_codec_refuses_fails_the_stage(tmp_path: Path) -> None:
    (tmp_path / "plugin.py").write_text(PLUGIN)
    pipe = _pipeline(tmp_path, {"a.md": "alpha beta"})
    outputs, events, message = _run(pipe, Shipping(tamper=b'"not a list"'))
    assert outputs is None
    assert message is not None and message.startswith("ValidationError: Expected `array`")
    failed = [f for t, f in events if t == "StageFailed"]
    assert [(f["step"], f["stage"]) for f in failed] == [("words", "extract")]
    assert not [f for t, f in events if t == "StageExecuted"]  # nothing accepted


def test_the_plugin_runs_from_the_shipped_bytes_not_the_file(tmp_path: Path) -> None:
    (tmp_path / "plugin.py").write_text(PLUGIN)
    pipe = _pipeline(tmp_path, {"a.md": "alpha beta"})
    (tmp_path / "plugin.py").write_text("raise SystemExit('edited since the run loaded it')\n")
    shipping = Shipping()
    outputs, _, message = _run(pipe, shipping)
    assert message is None and outputs and shipping.shipped > 0
