"""One place in the product records `RunTerminated` (docs/internals.md "One run, phase by phase").

Scanned on the syntax tree of every product module: `RunTerminated` passed to a call of
`emit`/`trigger`/`_trigger`/`_command` happens exactly once (in `Run.terminate`), and the
session's `terminate`, which is the only way to reach it from outside the domain, is
called only by `app/terminal.py`'s Terminalizer.
"""

from __future__ import annotations

import ast

from support.paths import REPO

PRODUCT = ("domain", "projections", "adapters", "app", "cli")
EMITTERS = frozenset({"emit", "trigger", "_trigger", "_command"})


def product_trees() -> list[tuple[str, ast.Module]]:
    out = []
    for package in PRODUCT:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            out.append((rel, ast.parse(path.read_text(encoding="utf-8"), filename=rel)))
    return out


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def terminated_emissions(trees: list[tuple[str, ast.Module]]) -> list[str]:
    """`file:function` of every call that hands `RunTerminated` to an emitter."""
    sites = []
    for rel, tree in trees:
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                if not isinstance(node, ast.Call) or _name(node.func) not in EMITTERS:
                    continue
                args = [*node.args, *(k.value for k in node.keywords)]
                if any(_name(a) == "RunTerminated" for a in args):
                    sites.append(f"{rel}:{func.name}")
    return sorted(set(sites))


def terminate_callers(trees: list[tuple[str, ast.Module]]) -> list[str]:
    """Files that call `<something>.terminate(...)` or `.abandon(...)` on a session or run."""
    files = []
    for rel, tree in trees:
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"terminate", "abandon"}
            ):
                files.append(rel)
    return sorted(set(files))


def test_run_terminated_is_recorded_in_exactly_one_place() -> None:
    assert terminated_emissions(product_trees()) == ["domain/run.py:terminate"]


def test_only_the_terminalizer_and_the_session_reach_run_terminate() -> None:
    assert terminate_callers(product_trees()) == [
        "adapters/journal/session.py",  # RunSession.terminate -> Run.terminate
        "app/recover_runs.py",  # recover: Terminalizer(...).abandon(...)
        "app/terminal.py",  # Terminalizer._terminate -> session.terminate
        "domain/run.py",  # Run.abandon -> Run.terminate
    ]


def test_the_scan_finds_a_second_site() -> None:
    """The scan is not vacuous: an emit of RunTerminated anywhere else is found."""
    extra = ast.parse(
        "def stop(session):\n    session.emit(RunTerminated, status=s, phase=p)\n",
        filename="cli/elsewhere.py",
    )
    found = terminated_emissions([*product_trees(), ("cli/elsewhere.py", extra)])
    assert found == ["cli/elsewhere.py:stop", "domain/run.py:terminate"]
