"""Every command of cli/main.py names its function by a lazy reference that resolves:
`_call(lambda: _<module>().<function>, ...)` (no string dispatch)."""

from __future__ import annotations

import ast
import importlib

from support.paths import REPO


def _targets() -> list[tuple[str, str]]:
    tree = ast.parse((REPO / "cli" / "main.py").read_text())
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_call"):
            continue
        target = node.args[0]
        assert isinstance(target, ast.Lambda), ast.unparse(node)
        body = target.body
        assert isinstance(body, ast.Attribute) and isinstance(body.value, ast.Call)
        loader = body.value.func
        assert isinstance(loader, ast.Name) and loader.id.startswith("_")
        found.append((loader.id[1:], body.attr))
    return found


def test_every_command_target_resolves_to_a_function() -> None:
    targets = _targets()
    assert len(targets) >= 20
    for module, name in targets:
        fn = getattr(importlib.import_module(f"runjournal.cli.{module}"), name, None)
        assert callable(fn), f"{module}.{name}"
