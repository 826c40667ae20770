"""A hostile module cannot leave its run unrecorded or the exit code wrong (issue 12, item 2).

The installed console script runs one pipeline whose plugin misbehaves in one way per
case: every kind of exception, `SystemExit(0)` and `(1)`, `KeyboardInterrupt`, a
`BaseException` subclass, exceptions whose `__str__`/`__repr__` raise, a lone surrogate in
every string it returns (output name, output content, warning, error message, its chunk
value) and huge values. Whatever it does, afterwards (docs/operations.md "Hardening
guarantees"):

- the journal holds the run's `RunTerminated`, `failed` (or `interrupted` for a
  `KeyboardInterrupt`), and every event decided before it (the batch was flushed);
- `journal audit` says ok (hash chain, invariants, decisions, run directory);
- stdout is exactly one JSON document, naming the run;
- the exit code is 1 (130 for a `KeyboardInterrupt`), never 0, and stderr has no traceback.

Warnings are the one exception: the module-call boundary makes them safe text (lone
surrogates escaped, an unprintable one named), so a run whose module returned such a
warning succeeds, recorded the same way, with the warning escaped in every document.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.console import CLI

PLUGIN = r'''
from runjournal.domain.modules import Module, Normalized, OutputFile


class Hostile(BaseException):
    """Not an Exception: `except Exception` does not stop it."""


class BadStr(Exception):
    def __str__(self):
        raise RuntimeError("__str__ raised")


class BadRepr(Exception):
    def __repr__(self):
        raise RuntimeError("__repr__ raised")


class BadBoth(Exception):
    def __str__(self):
        raise RuntimeError("__str__ raised")

    def __repr__(self):
        raise RuntimeError("__repr__ raised")


class BadStrBase(BaseException):
    def __str__(self):
        raise ValueError("__str__ raised")


class BadWarning:
    def __str__(self):
        raise RuntimeError("a warning whose __str__ raises")


RAISE = {
    "ValueError": lambda: ValueError("a value error"),
    "TypeError": lambda: TypeError("a type error"),
    "RuntimeError": lambda: RuntimeError("a runtime error"),
    "KeyError": lambda: KeyError("k"),
    "OSError": lambda: OSError(5, "an I/O error"),
    "MemoryError": lambda: MemoryError(),
    "RecursionError": lambda: RecursionError("too deep"),
    "AssertionError": lambda: AssertionError(),
    "StopIteration": lambda: StopIteration(),
    "NotImplementedError": lambda: NotImplementedError(),
    "UnicodeDecodeError": lambda: UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"),
    "SystemExit0": lambda: SystemExit(0),
    "SystemExit1": lambda: SystemExit(1),
    "SystemExitText": lambda: SystemExit("bye"),
    "KeyboardInterrupt": lambda: KeyboardInterrupt(),
    "GeneratorExit": lambda: GeneratorExit(),
    "BaseException": lambda: BaseException(),
    "BaseExceptionSubclass": lambda: Hostile("not an Exception"),
    "BadStr": lambda: BadStr(),
    "BadRepr": lambda: BadRepr(),
    "BadBoth": lambda: BadBoth(),
    "BadStrBase": lambda: BadStrBase(),
    "SurrogateMessage": lambda: ValueError("bad \udcff text"),
    "HugeMessage": lambda: ValueError("x" * 5_000_000),
}


class Probe(Module):
    name = "test.hostile"
    fingerprint = "test.hostile/1"
    artifact_kind = "hostile"
    schema = "test.hostile/v1"
    chunk_type = str
    merged_type = str
    artifact_type = str

    def _maybe(self, stage, ctx):
        mode = ctx.params["mode"]
        where = ctx.params.get("stage", "extract")
        if where == stage and mode in RAISE:
            raise RAISE[mode]()

    def extract(self, chunk, ctx):
        self._maybe("extract", ctx)
        if ctx.params["mode"] == "SurrogateChunk":
            return "chunk \udcff value"
        return chunk.text[:20]

    def merge(self, parts, ctx):
        self._maybe("merge", ctx)
        return " ".join(parts)

    def normalize(self, merged, ctx):
        self._maybe("normalize", ctx)
        mode = ctx.params["mode"]
        if mode == "SurrogateWarning":
            return Normalized(merged, ["a warning \udcff here"])
        if mode == "BadWarning":
            return Normalized(merged, [BadWarning()])
        return Normalized(merged)

    def outputs(self, artifact, ctx):
        self._maybe("outputs", ctx)
        mode = ctx.params["mode"]
        if mode == "SurrogateOutputName":
            return [OutputFile("out-\udcff.md", b"x")]
        if mode == "SurrogateOutputContent":
            return [OutputFile("out.md", "content \udcff")]
        if mode == "HugeOutputName":
            return [OutputFile("a" * 100_000 + ".md", b"x")]
        if mode == "HugeOutputList":
            return [OutputFile(f"o/{i}.md", b"x") for i in range(3)] * 2
        return []
'''

PIPELINE = """
name = "hostile"
inputs = ["docs/*.md"]

[chunking]
strategy = "paragraphs"
max_chars = 200

[[steps]]
id = "terms"
module = "builtin.terms"
params = {{ min_count = 1 }}

[[steps]]
id = "probe"
module = "plugins/hostile.py:Probe"
params = {{ mode = "{mode}", stage = "{stage}" }}
"""

RAISED = [
    "ValueError",
    "TypeError",
    "RuntimeError",
    "KeyError",
    "OSError",
    "MemoryError",
    "RecursionError",
    "AssertionError",
    "StopIteration",
    "NotImplementedError",
    "UnicodeDecodeError",
    "SystemExit0",
    "SystemExit1",
    "SystemExitText",
    "KeyboardInterrupt",
    "GeneratorExit",
    "BaseException",
    "BaseExceptionSubclass",
    "BadStr",
    "BadRepr",
    "BadBoth",
    "BadStrBase",
    "SurrogateMessage",
    "HugeMessage",
]
# Every raised kind from extract; the ones that escape `except Exception` from every stage.
CASES = [(mode, "extract") for mode in RAISED] + [
    (mode, stage)
    for mode in ("SystemExit0", "KeyboardInterrupt", "BaseExceptionSubclass", "BadStr")
    for stage in ("merge", "normalize", "outputs")
]
# Returned values: a lone surrogate in every string a module returns, and huge values.
RETURNED = [
    "SurrogateChunk",
    "SurrogateOutputName",
    "SurrogateOutputContent",
    "HugeOutputName",
    "HugeOutputList",
]


def make_pipeline(base: Path, mode: str, stage: str) -> Path:
    pipe = base / "pipe"
    (pipe / "docs").mkdir(parents=True)
    (pipe / "plugins").mkdir()
    (pipe / "plugins" / "hostile.py").write_text(PLUGIN)
    (pipe / "docs" / "a.md").write_text("# Alpha\n\nThe **event journal** records runs.\n")
    (pipe / "docs" / "b.md").write_text("# Beta\n\nA **checkpoint** is reused on resume.\n")
    (pipe / "pipeline.toml").write_text(PIPELINE.format(mode=mode, stage=stage))
    return pipe / "pipeline.toml"


def check_run(tmp_path: Path, mode: str, stage: str, *, succeeds: bool = False) -> dict:
    cli = CLI(tmp_path / "home")
    pipeline = make_pipeline(tmp_path, mode, stage)
    out = tmp_path / "out"
    roots = ["--output-root", str(out), "--cache-root", str(tmp_path / "cache")]
    proc = cli("run", str(pipeline), *roots, "--no-progress", "--json", timeout=300)
    interrupted = mode == "KeyboardInterrupt"
    expected = 0 if succeeds else 130 if interrupted else 1
    assert proc.returncode == expected, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)  # exactly one document: anything else would not parse
    assert isinstance(doc, dict) and doc["run_id"], doc
    status = "succeeded" if succeeds else "interrupted" if interrupted else "failed"
    assert doc["status"] == status, doc
    run_id = doc["run_id"]

    shown = cli("journal", "show", run_id, "--output-root", str(out), "--json")
    assert shown.returncode == 0, shown.stderr
    events = json.loads(shown.stdout)["events"]
    terminal = [e for e in events if e["type"] == "RunTerminated"]
    assert [e["data"]["status"] for e in terminal] == [status]
    # The decided events reached the journal: every lane of `terms` and probe's decisions.
    types = [e["type"] for e in events]
    assert "LaneResolved" in types and "StageDecided" in types
    assert types.index("RunTerminated") > types.index("StageDecided")

    audit = cli("journal", "audit", run_id, "--output-root", str(out), "--json")
    assert audit.returncode == 0, (audit.stdout[-2000:], audit.stderr[-2000:])
    assert json.loads(audit.stdout)["verdict"] == "ok"
    return doc


@pytest.mark.parametrize(("mode", "stage"), CASES, ids=[f"{m}-{s}" for m, s in CASES])
def test_a_raising_module_ends_its_run_recorded(tmp_path: Path, mode: str, stage: str) -> None:
    check_run(tmp_path, mode, stage)


@pytest.mark.parametrize("mode", RETURNED)
def test_a_module_returning_hostile_values_ends_its_run_recorded(tmp_path: Path, mode: str) -> None:
    check_run(tmp_path, mode, "none")


@pytest.mark.parametrize(
    ("mode", "shown"),
    [
        ("SurrogateWarning", "a warning \\xff here"),
        ("BadWarning", "<unprintable BadWarning warning>"),
    ],
)
def test_a_hostile_warning_is_made_safe_and_the_run_recorded(
    tmp_path: Path, mode: str, shown: str
) -> None:
    doc = check_run(tmp_path, mode, "none", succeeds=True)
    assert shown in [w["message"] for w in doc["warnings"]]
    report = json.loads(Path(doc["report"]).read_text(encoding="utf-8"))
    assert shown in [w["message"] for w in report["warnings"]]


CONSTRUCTING = r"""
import os
from runjournal.domain.modules import Module, Normalized


class Hostile(BaseException):
    pass


class BadStr(Exception):
    def __str__(self):
        raise RuntimeError("__str__ raised")


RAISE = {
    "SystemExit0": lambda: SystemExit(0),
    "BaseExceptionSubclass": lambda: Hostile("not an Exception"),
    "BadStr": lambda: BadStr(),
    "KeyboardInterrupt": lambda: KeyboardInterrupt(),
}
WHEN, MODE = os.environ["HOSTILE_WHEN"], os.environ["HOSTILE_MODE"]
if WHEN == "import":
    raise RAISE[MODE]()


class Probe(Module):
    name = "test.hostile"
    fingerprint = "test.hostile/1"
    artifact_kind = "hostile"
    schema = "test.hostile/v1"
    chunk_type = str
    merged_type = str
    artifact_type = str

    def __init__(self):
        raise RAISE[MODE]()

    def extract(self, chunk, ctx):
        return chunk.text

    def merge(self, parts, ctx):
        return " ".join(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged)

    def outputs(self, artifact, ctx):
        return []
"""
LOADING = [
    (when, mode)
    for when in ("import", "construct")
    for mode in ("SystemExit0", "BaseExceptionSubclass", "BadStr", "KeyboardInterrupt")
]


@pytest.mark.parametrize(("when", "mode"), LOADING, ids=[f"{w}-{m}" for w, m in LOADING])
def test_a_module_raising_while_it_loads_is_refused_before_the_run(
    tmp_path: Path, when: str, mode: str
) -> None:
    """A plugin that raises on import or in its constructor: found when the pipeline is
    checked, before anything is allocated (issue 32: `runjournal check` and the start of
    `run`), so exit 2 with one line and one JSON document naming no run, or 130 for a
    `KeyboardInterrupt`; no traceback, no journal, no run directory."""
    cli = CLI(tmp_path / "home")
    pipeline = make_pipeline(tmp_path, mode, "none")
    (pipeline.parent / "plugins" / "hostile.py").write_text(CONSTRUCTING)
    out = tmp_path / "out"
    env = {"HOSTILE_WHEN": when, "HOSTILE_MODE": mode}
    proc = cli("run", str(pipeline), "--output-root", str(out), "--json", env=env, timeout=300)
    interrupted = mode == "KeyboardInterrupt"
    assert proc.returncode == (130 if interrupted else 2), (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    if not interrupted:
        doc = json.loads(proc.stdout)
        assert doc["run_id"] is None and doc["status"] == "error", doc
        if mode == "BadStr":
            assert "<unprintable>" in doc["error"]["message"], doc
    assert not out.exists()  # nothing allocated)["verdict"] == "ok", audit.stdout
