"""The runner's streaming merge through its ports (docs/modules.md "Streaming merge"):
written parts read back from the store, a part that reads back changed fails the merge
with one message, a store that cannot give back the lane's first part keeps them all."""

from __future__ import annotations

import hashlib

import msgspec
import pytest
from runjournal.domain.chunking import ChunkingSettings, ChunkStrategy
from runjournal.domain.decisions import CheckpointState, Stage
from runjournal.domain.identity import LaneComponents
from runjournal.domain.modules import Module, Normalized
from runjournal.domain.pipeline import ResolvedPipeline, ResolvedStep, Scope, Source
from runjournal.domain.ports import LoadedCheckpoint
from runjournal.domain.runner import PipelineRunner, StageFailure
from runjournal.domain.runner.ledger import RunLedger
from runjournal.domain.runner.scheduler import (
    Batch,
    FailurePolicy,
    LaneJob,
    Scheduler,
    SerialExecutor,
)
from support.recorder import FakeRecorder

TEXT = "\n\n".join(f"Paragraph {i} says alpha beta {i}." for i in range(12)) + "\n"


class Store:
    """Checkpoints in a dict by key; `tamper` changes what extract loads read back after
    the first; `lose` reads nothing back."""

    def __init__(self, *, tamper: bool = False, lose: bool = False) -> None:
        self.files: dict = {}
        self.loads: list[Stage] = []
        self.tamper, self.lose = tamper, lose

    def write(self, key, record):
        self.files[key] = record
        return hashlib.sha256(record.payload).hexdigest(), len(record.payload)

    def load(self, key, codec_id):
        self.loads.append(Stage(key.stage))
        record = None if self.lose else self.files.get(key)
        if record is None:
            return LoadedCheckpoint(state=CheckpointState.MISSING)
        if self.tamper and len(self.loads) > 1:
            record = msgspec.structs.replace(record, payload=record.payload.replace(b"a", b"o"))
        return LoadedCheckpoint(state=CheckpointState.PRESENT, record=record)


class Words(Module):
    name = "t.words"
    fingerprint = "t.words/1"
    artifact_kind = "words"
    schema = "t.words/v1"
    chunk_type = list[str]
    merged_type = list[str]
    artifact_type = list[str]
    merge_streams = True

    def extract(self, chunk, ctx):
        return chunk.text.split()

    def merge(self, parts, ctx):
        return [w for p in parts for w in p]

    def normalize(self, merged, ctx):
        return Normalized(merged)


class ListWords(Words):
    merge_streams = False


def pipeline(module: Module) -> ResolvedPipeline:
    comps = LaneComponents(
        config="a",
        module="m",
        validators="",
        references="",
        overrides="",
        profile="",
        profile_source="",
    )
    data = TEXT.encode()
    source = Source(name="a.md", data=data, sha256=hashlib.sha256(data).hexdigest())
    step = ResolvedStep(
        id="words", module=module, scope=Scope.DOCUMENT, consumes=(), params={}, components=comps
    )
    return ResolvedPipeline(
        name="p",
        steps=(step,),
        sources=(source,),
        chunking=ChunkingSettings(strategy=ChunkStrategy.PARAGRAPHS, max_chars=40),
    )


def run(module: Module, store: Store | None, parts: Store | None):
    runner = PipelineRunner(journal=FakeRecorder(), recorder=store, parts=parts)
    return runner.run(pipeline(module))


def test_written_parts_are_read_back_to_the_same_artifact() -> None:
    expected = run(ListWords(), Store(), None).outputs
    store = Store()
    assert run(Words(), store, store).outputs == expected
    # the probe of the lane's first part, then every part once
    assert store.loads == [Stage.EXTRACT] * (1 + 12)
    assert run(Words(), None, None).outputs == expected  # nothing written: kept in memory


def test_a_part_that_reads_back_changed_fails_the_merge() -> None:
    store = Store(tamper=True)
    with pytest.raises(StageFailure) as info:
        run(Words(), store, store)
    assert info.value.stage is Stage.MERGE
    assert "reads back changed" in str(info.value)


def test_a_store_that_gives_nothing_back_keeps_the_parts() -> None:
    expected = run(ListWords(), Store(), None).outputs
    lost = Store(lose=True)
    assert run(Words(), lost, lost).outputs == expected
    assert lost.loads == [Stage.EXTRACT]  # the probe only


def test_an_extract_batch_that_keeps_nothing_is_sent_none_for_what_it_was_handed() -> None:
    """`Batch(keeps=False)`: the scheduler holds no outcome it handed to `on_result` (a
    lane of 25,000 extracts held every result until its batch was done)."""
    handed: dict[int, int] = {}
    sent: dict[bool, list] = {}

    def lane(keeps: bool):
        def start(ledger: RunLedger):
            calls = [lambda i=i: i * 10 for i in range(5)]
            sent[keeps] = yield Batch(calls, handed.__setitem__, keeps=keeps)
            return None

        return start

    for keeps in (True, False):
        jobs = [LaneJob("s", f"lane-{keeps}", [], lane(keeps))]
        Scheduler(RunLedger(FakeRecorder(), None), SerialExecutor(), FailurePolicy.STOP).run(
            jobs, {}
        )
        assert handed == {i: i * 10 for i in range(5)}
        handed.clear()
    assert sent == {True: [0, 10, 20, 30, 40], False: [None] * 5}
