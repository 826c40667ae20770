"""A hostile module against the runner: whatever it does, a typed stage failure or safe text.

Every kind of exception at every module-call boundary (extract, merge, normalize, the
warnings it returns, a validator, outputs()) ends as a `StageFailure` naming the step and
lane with a bounded, encodable message; returned strings with lone surrogates or of
megabytes never reach an event unencodable or unbounded; an interrupt still propagates
(docs/internals.md "The runner").
"""

from __future__ import annotations

import hashlib

import msgspec
import pytest
from runjournal.domain.chunking import ChunkingSettings, ChunkStrategy
from runjournal.domain.events import ArtifactGenerated, StageDecided, StageExecuted, StageFailed
from runjournal.domain.identity import LaneComponents
from runjournal.domain.modules import Module, Normalized, OutputFile
from runjournal.domain.pipeline import ResolvedPipeline, ResolvedStep, Scope, Source
from runjournal.domain.reasons import ReasonCode
from runjournal.domain.runner import ERROR_MESSAGE_LIMIT, PipelineRunner, StageFailure
from runjournal.domain.runner.boundary import WARNING_LIMIT, Interrupt, exception_text
from support.recorder import FakeRecorder


class Store:
    def __init__(self):
        self.files = {}

    def write(self, key, record):
        # what the checkpoint adapter does: encode the envelope (warnings included)
        msgspec.json.encode(record.warnings)
        self.files[key] = record
        return hashlib.sha256(record.payload).hexdigest(), len(record.payload)


class UnprintableStr(Exception):
    def __str__(self):
        raise RuntimeError("no str for you")


class UnprintableRepr(Exception):
    def __repr__(self):
        raise RuntimeError("no repr for you")


class UnprintableBoth(Exception):
    def __str__(self):
        raise ValueError("no str")

    def __repr__(self):
        raise ValueError("no repr")


class StrNotStr(Exception):
    def __str__(self):
        return 42  # type: ignore[return-value]


class CustomBase(BaseException):
    pass


class Surrogate(Exception):
    def __str__(self):
        return "bad \udcff text"


class UnprintableWarning:
    def __str__(self):
        raise RuntimeError("no str")


RAISED = {
    "ValueError": lambda: ValueError("plain"),
    "SystemExit(0)": lambda: SystemExit(0),
    "SystemExit(1)": lambda: SystemExit(1),
    "BaseException()": lambda: BaseException(),
    "BaseException subclass": lambda: CustomBase("custom"),
    "GeneratorExit": lambda: GeneratorExit(),
    "__str__ raises": lambda: UnprintableStr(),
    "__repr__ raises": lambda: UnprintableRepr("fine"),
    "__str__ and __repr__ raise": lambda: UnprintableBoth(),
    "__str__ returns no str": lambda: StrNotStr(),
    "lone surrogate in message": lambda: Surrogate(),
    "3 MB message": lambda: ValueError("x" * 3_000_000),
}

WHERE = ("extract", "merge", "normalize", "warnings", "validator", "outputs")


def _raise(exc):
    raise exc


class Hostile(Module):
    name = "t.hostile"
    fingerprint = "t.hostile/1"
    artifact_kind = "hostile"
    schema = "t.hostile/v1"
    chunk_type = list[str]
    merged_type = list[str]
    artifact_type = list[str]

    def __init__(self, where=None, make=None, *, extract=None, merge=None, value=None,
                 warnings=None, names=None):  # fmt: skip
        self.where, self.make = where, make
        self._extract, self._merge, self._value = extract, merge, value
        self._warnings, self._names = warnings, names

    def _maybe(self, where):
        if self.where == where:
            raise self.make()

    def extract(self, chunk, ctx):
        self._maybe("extract")
        return self._extract if self._extract is not None else chunk.text.split()

    def merge(self, parts, ctx):
        self._maybe("merge")
        return self._merge if self._merge is not None else [w for p in parts for w in p]

    def normalize(self, merged, ctx):
        self._maybe("normalize")
        value = self._value if self._value is not None else merged
        if self.where == "warnings":
            make = self.make

            class Raising:
                def __iter__(self):
                    raise make()

            return Normalized(value, Raising())
        return Normalized(value, self._warnings if self._warnings is not None else [])

    def outputs(self, artifact, ctx):
        self._maybe("outputs")
        names = self._names or []
        return [OutputFile(name, b"x") for name in names]


class HostileValidator:
    name = "t.v"
    fingerprint = "t.v/1"

    def __init__(self, make=None, warnings=()):
        self.make, self.warnings = make, list(warnings)

    def check(self, artifact, ctx):
        if self.make is not None:
            raise self.make()
        return self.warnings


def pipe(module, validators=()):
    text = b"alpha beta\n\ngamma delta\n"
    return ResolvedPipeline(
        name="p",
        steps=(
            ResolvedStep(
                id="hostile",
                module=module,
                scope=Scope.DOCUMENT,
                consumes=(),
                params={},
                components=LaneComponents("a", "m", "", "", "", "", ""),
                validators=tuple(validators),
            ),
        ),
        sources=(Source(name="a.md", data=text, sha256=hashlib.sha256(text).hexdigest()),),
        chunking=ChunkingSettings(strategy=ChunkStrategy.PARAGRAPHS, max_chars=40),
    )


def run(module, validators=()):
    sink = FakeRecorder()
    outcome = PipelineRunner(journal=sink, recorder=Store()).run(pipe(module, validators))
    return outcome, sink


def assert_journalable(sink):
    """Every event the runner emitted encodes as the journal encodes it (UTF-8 JSON)."""
    for event in sink.events:
        msgspec.json.encode(event)


def _case(where, kind):
    make = RAISED[kind]
    if where == "validator":
        return Hostile(), [HostileValidator(make)]
    return Hostile(where, make), []


@pytest.mark.parametrize("kind", list(RAISED))
@pytest.mark.parametrize("where", WHERE)
def test_whatever_a_module_raises_is_a_typed_stage_failure(where, kind):
    module, validators = _case(where, kind)
    sink = FakeRecorder()
    runner = PipelineRunner(journal=sink, recorder=Store())
    with pytest.raises(StageFailure) as info:
        runner.run(pipe(module, validators))
    failure = info.value
    assert (failure.step, failure.lane, failure.code) == (
        "hostile",
        "a.md",
        ReasonCode.STAGE_FAILED,
    )
    assert failure.exception is not None and type(failure.exception) is type(RAISED[kind]())
    data = failure.message.encode("utf-8")  # never a lone surrogate
    assert 0 < len(data) <= ERROR_MESSAGE_LIMIT
    (failed,) = sink.of(StageFailed)
    assert failed.message == failure.message
    if where not in ("outputs",):
        assert any(f.failed for f in sink.of(StageDecided))
    assert_journalable(sink)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("__str__ raises", "<unprintable UnprintableStr>"),
        ("__str__ and __repr__ raise", "<unprintable UnprintableBoth>"),
        ("__str__ returns no str", "<unprintable StrNotStr>"),
        ("__repr__ raises", "UnprintableRepr: fine"),
        ("SystemExit(1)", "SystemExit: 1"),
    ],
)
def test_unprintable_exceptions_get_a_safe_fallback_text(kind, expected):
    module, _ = _case("extract", kind)
    with pytest.raises(StageFailure) as info:
        PipelineRunner(journal=FakeRecorder()).run(pipe(module))
    assert info.value.message == expected
    assert exception_text(RAISED[kind]()) == expected


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, Interrupt])
@pytest.mark.parametrize("where", WHERE)
def test_an_interrupt_still_propagates(where, interrupt):
    if where == "validator":
        module, validators = Hostile(), [HostileValidator(interrupt)]
    else:
        module, validators = Hostile(where, interrupt), []
    sink = FakeRecorder()
    with pytest.raises(interrupt):
        PipelineRunner(journal=sink).run(pipe(module, validators))
    assert sink.of(StageFailed) == []


@pytest.mark.parametrize(
    "module",
    [
        Hostile(extract=["ok", "bad \udcff"]),
        Hostile(merge=["bad \ud800"]),
        Hostile(value=["bad \udcff"]),
        Hostile(names=["bad\udcffname.txt"]),
        Hostile(names=[b"bytes-name"]),
    ],
    ids=["extract value", "merge value", "normalized value", "output name", "name not str"],
)
def test_unencodable_returned_strings_are_refused_as_stage_failures(module):
    sink = FakeRecorder()
    with pytest.raises(StageFailure) as info:
        PipelineRunner(journal=sink, recorder=Store()).run(pipe(module))
    assert info.value.code is ReasonCode.STAGE_FAILED
    info.value.message.encode("utf-8")
    assert_journalable(sink)


def test_an_output_name_with_a_lone_surrogate_is_named_escaped():
    with pytest.raises(StageFailure) as info:
        PipelineRunner(journal=FakeRecorder()).run(pipe(Hostile(names=["bad\udcffname.txt"])))
    assert "not valid UTF-8" in info.value.message
    assert "bad\\udcffname.txt" in info.value.message


def test_warnings_with_lone_surrogates_or_no_str_are_made_safe():
    warnings = ["bad \udcff warning", UnprintableWarning(), 7]
    _outcome, sink = run(Hostile(warnings=warnings), [HostileValidator(warnings=["v \ud800"])])
    # Warnings are the events' (the report projection folds them), not the outcome's.
    kept = [w for e in sink.of(ArtifactGenerated) for w in e.warnings]
    assert kept == [
        "bad \\xff warning",
        "<unprintable UnprintableWarning warning>",
        "7",
        "v \\ud800",
    ]
    (generated,) = sink.of(ArtifactGenerated)
    assert generated.warnings == kept
    assert_journalable(sink)


def test_a_huge_warning_is_bounded_everywhere_the_runner_keeps_it():
    huge = "w" * 3_000_000
    store = Store()
    sink = FakeRecorder()
    PipelineRunner(journal=sink, recorder=store).run(
        pipe(Hostile(warnings=[huge]), [HostileValidator(warnings=[huge])])
    )
    kept = [w for e in sink.of(ArtifactGenerated) for w in e.warnings]
    assert len(kept) == 2
    for warning in kept:
        assert len(warning.encode("utf-8")) <= WARNING_LIMIT
        assert warning.startswith("www") and warning.endswith("…")
    (generated,) = sink.of(ArtifactGenerated)
    assert generated.warnings == kept
    (normalize,) = [r for k, r in store.files.items() if k.stage.value == "normalize"]
    assert normalize.warnings == kept


def test_bounded_warnings_recorded_before_are_bounded_again_on_reuse():
    from runjournal.domain.decisions import CheckpointState
    from runjournal.domain.ports import LoadedCheckpoint

    store = Store()
    PipelineRunner(journal=FakeRecorder(), recorder=store).run(pipe(Hostile(warnings=["short"])))
    for key, record in list(store.files.items()):
        if key.stage.value == "normalize":  # as an older runjournal would have recorded it
            store.files[key] = msgspec.structs.replace(record, warnings=["z" * 3_000_000])

    class Loader:
        def load(self, key, codec_id):
            record = store.files.get(key)
            if record is None:
                return LoadedCheckpoint(state=CheckpointState.MISSING)
            return LoadedCheckpoint(state=CheckpointState.PRESENT, record=record)

    sink = FakeRecorder()
    PipelineRunner(journal=sink, loader=Loader(), recorder=store).run(
        pipe(Hostile(warnings=["short"]))
    )
    assert sink.of(StageExecuted) == []  # no module call: module_calls is 0
    ((warning,),) = [e.warnings for e in sink.of(ArtifactGenerated)]
    assert len(warning.encode("utf-8")) <= WARNING_LIMIT
