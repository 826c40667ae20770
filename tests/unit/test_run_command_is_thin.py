"""`cli/run_cmd.py` only parses, calls the run use-case, renders and maps errors to exit
codes (docs/internals.md "The application layer (`app/`)"): no `.close()`, no event
emission, no construction of the run's collaborators; one error table decides the codes."""

from __future__ import annotations

import ast

import pytest
from runjournal.app.errors import (
    NotPersistedError,
    RunEnd,
    RunFailedError,
    RunInterruptedError,
    RunjournalError,
    UsageError,
)
from runjournal.cli.exit_codes import EXIT_CODES, RUN_END_CODES, CliError, ExitCode, exit_code_of
from support.paths import REPO

# What the run use-case builds and owns; the command must construct none of them.
OWNED = {"Run", "Terminalizer", "Roots", "RunSession", "PipelineRunner", "JobPool"}


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def _offences(source: str) -> list[str]:
    found = []
    for call in _calls(ast.parse(source)):
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in {"close", "emit", "session"}:
            found.append(f".{func.attr}()")
        if isinstance(func, ast.Name) and func.id in OWNED:
            found.append(f"{func.id}()")
    return found


def test_the_run_command_closes_emits_and_constructs_nothing() -> None:
    assert _offences((REPO / "cli" / "run_cmd.py").read_text(encoding="utf-8")) == []


def test_the_scan_finds_what_it_looks_for() -> None:
    source = "def f(j, s):\n    j.close()\n    s.emit(X)\n    Terminalizer(session=s)\n"
    assert _offences(source) == [".close()", ".emit()", "Terminalizer()"]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (UsageError("x"), ExitCode.USAGE),
        (RunFailedError("x"), ExitCode.FAILED),
        (NotPersistedError("x"), ExitCode.NOT_PERSISTED),
        (RunInterruptedError("x"), ExitCode.INTERRUPTED),
        (CliError("x", ExitCode.LEASED), ExitCode.LEASED),
        (RunjournalError("x"), ExitCode.FAILED),
    ],
)
def test_one_table_maps_each_error_to_its_exit_code(error: RunjournalError, code: int) -> None:
    assert exit_code_of(error) == code


def test_every_way_a_run_ends_has_an_exit_code() -> None:
    assert set(RUN_END_CODES) == set(RunEnd)
    assert set(EXIT_CODES) == {UsageError, RunFailedError, NotPersistedError, RunInterruptedError}


def _untyped_emissions(source: str) -> list[int]:
    """Lines of `X.emit(...)` calls: the untyped `emit(event_type, **fields)` form."""
    return [
        call.lineno
        for call in _calls(ast.parse(source))
        if isinstance(call.func, ast.Attribute) and call.func.attr == "emit"
    ]


# Modules whose `.emit(...)` is not the journal's: justified, and kept this short.
NOT_THE_JOURNAL = {
    # openlineage-python's `Transport.emit(event)` sends an OpenLineage event over HTTP
    "adapters/lineage_emit.py",
}


def test_no_product_module_records_an_event_untyped() -> None:
    """Events are recorded through typed methods (docs/internals.md "Recording a run
    (`RunRecorder`)"), never `emit(event_type, **fields)`."""
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for layer in ("domain", "projections", "adapters", "app", "cli")
        for path in sorted((REPO / layer).rglob("*.py"))
        if str(path.relative_to(REPO)) not in NOT_THE_JOURNAL
        for line in _untyped_emissions(path.read_text())
    ]
    assert found == []
    assert _untyped_emissions("session.emit(RunAllocated, run_id='x')") == [1]
