"""Only the composition root constructs adapters (docs/internals.md "The command line (`cli/`)").

An AST scan of every module under `cli/` and `adapters/`: a call that constructs one of
the collaborators a command works with (a root, a journal, a cache collaborator, a debug
bundle, a projection store, the runner, progress, the executor, the LLM runtime) may
appear only in `cli/compose.py` and in the adapter's own package (a class building its
own parts). Anything else receives the collaborator, or the factory, as a parameter.
"""

from __future__ import annotations

import ast

import pytest
from support.paths import REPO

# constructor as written -> the package (or module) that owns it and may build it itself
CONSTRUCTORS: dict[str, str] = {
    "FsRoot": "adapters/fsroot.py",
    "FsRoot.open": "adapters/fsroot.py",
    "open_journal": "adapters/journal/",
    "JournalStore": "adapters/journal/",
    "RunSession": "adapters/journal/",
    "RunJournalApp": "adapters/journal/",
    "CheckpointLoader": "adapters/checkpoints.py",
    "CheckpointRecorder": "adapters/checkpoints.py",
    "Workspace": "adapters/checkpoints.py",
    "Workspace.in_cache": "adapters/checkpoints.py",
    "ChunkPlanFileStore": "adapters/chunkplans.py",
    "ChunkPlanFileStore.open_for_mode": "adapters/chunkplans.py",
    "ProjectionStore": "adapters/projection_store.py",
    "OutputObjects": "adapters/objects.py",
    "RunDirs": "adapters/run_dirs.py",
    "DebugBundle": "adapters/debug_bundle/",
    "DebugBundle.allocate": "adapters/debug_bundle/",
    "JournalSpans": "adapters/debug_bundle/",
    "LLMServices": "adapters/llm/",
    "Cassette.load": "adapters/llm/cassette.py",
    "ProfileRegistry.load": "adapters/profiles.py",
    "PipelineRunner": "domain/",
    "JobPool": "cli/parallel.py",
    "OffloadingExecutor": "adapters/executors/",
    "ProcessWorkers": "adapters/executors/",
    "DaskWorkers": "adapters/executors/",
    "CheckpointWritePool": "cli/parallel.py",
    "ProgressDisplay": "cli/progress.py",
}

# (module, constructor) pairs that are justified exceptions; keep this list short.
ALLOWED: dict[tuple[str, str], str] = {
    # A cassette is a file the user names, not a root: it is written once, at the end.
    ("adapters/llm/cassette.py", "FsRoot.open"): "a user-named file, saved once",
    # A profile may name its own replay cassette; it is read when the profile is first used.
    ("adapters/llm/runtime.py", "Cassette.load"): "a profile's own cassette file",
    # `--llm-record/--llm-replay` are read in P1, before anything is allocated.
    ("cli/llm_wiring.py", "Cassette.load"): "P1 reads the cassette files named on the command line",
    # `journal otel --content FILE` and `run --otel-content` read the prompts and replies of
    # a cassette the user names, once, for the trace's content attributes.
    # The standalone path form (tests, bench); the CLI passes the cache root's handle.
    ("adapters/chunkplans.py", "FsRoot.open"): "open_for_mode(path) for standalone use",
    # Both receive the `open_root` factory and reach run directories through it per call.
    ("adapters/projection_store.py", "RunDirs"): "built from the open_root it was given",
    ("adapters/run_directory_check.py", "RunDirs"): "built from the open_root it was given",
    # Shell completion runs outside any command (no journal, no roots): it only reads.
    ("cli/completion.py", "ProfileRegistry.load"): "completion reads the profiles file",
}

COMPOSITION_ROOT = "cli/compose.py"


def _called(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{func.value.id}.{func.attr}"
    return None


def constructions(source: str) -> list[tuple[int, str]]:
    """Every call in `source` that constructs a listed collaborator, with its line."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = _called(node)
            if name in CONSTRUCTORS:
                found.append((node.lineno, name))
    return found


def modules() -> list[str]:
    files = sorted((REPO / "cli").rglob("*.py")) + sorted((REPO / "adapters").rglob("*.py"))
    return [str(p.relative_to(REPO)) for p in files]


def offenders(module: str, source: str) -> list[str]:
    if module == COMPOSITION_ROOT:
        return []
    out = []
    for line, name in constructions(source):
        if module.startswith(CONSTRUCTORS[name]) or (module, name) in ALLOWED:
            continue
        out.append(f"{module}:{line}: {name}(...)")
    return out


def test_no_command_module_or_adapter_constructs_an_adapter() -> None:
    found = [o for m in modules() for o in offenders(m, (REPO / m).read_text())]
    assert found == [], "construct these in cli/compose.py and pass them in:\n" + "\n".join(found)


def test_every_allowed_exception_is_still_needed() -> None:
    used = {
        (m, name)
        for m in modules()
        for _, name in constructions((REPO / m).read_text())
        if (m, name) in ALLOWED
    }
    assert used == set(ALLOWED)


@pytest.mark.parametrize(
    "snippet",
    [
        "FsRoot.open(path)",
        "open_journal(url)",
        "CheckpointRecorder(workspace)",
        "ProjectionStore(store, root, render)",
        "DebugBundle.allocate(root, run_id, trace=True)",
        "JobPool(4)",
        "CheckpointWritePool(recorder, 4)",
    ],
)
def test_the_scan_catches_a_construction(snippet: str) -> None:
    """The check can fail: a command module that built one of these is reported."""
    assert offenders("cli/query_cmds.py", f"def f():\n    return {snippet}\n")
    assert offenders("adapters/export.py", f"def f():\n    return {snippet}\n")
    assert not offenders(COMPOSITION_ROOT, f"def f():\n    return {snippet}\n")
