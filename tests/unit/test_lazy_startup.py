"""Start-up stays lean: the command group imports no command module and no heavy library.

`runjournal --version`, `--help` and shell completion load only cli/main.py and what its
option declarations need; each command's module (and eventsourcing, the journal, the
adapters, the redaction shapes) is imported when that command runs; `run` loads the LLM
runtime, the debug bundle writer, a thread pool and a built-in module only when the
pipeline or an option needs it; patterns are compiled on first use
(docs/performance.md "Start-up").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HEAVY = (
    "eventsourcing",
    "openai",
    "httpx",
    "zstandard",
    "sqlite3",
    "runjournal.adapters",
    "runjournal.domain.redaction",
    "runjournal.domain.events",
    "runjournal.cli.run_cmd",
    "runjournal.cli.journal_cmds",
    "runjournal.cli.query_cmds",
    "runjournal.cli.maintenance_cmds",
    "runjournal.cli.projection_cmds",
    "runjournal.cli.report_cmds",
    "runjournal.cli.plan_cmd",
    "runjournal.cli.progress",
    "runjournal.cli.telemetry_cmds",
    "opentelemetry",
    "openlineage",
)


def _probe(code: str) -> Any:
    """What a fresh interpreter running `code` printed last, as JSON."""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return json.loads(out.splitlines()[-1])


def loaded_after(code: str) -> set[str]:
    return set(_probe(f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"))


def heavy_in(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_importing_the_command_group_loads_nothing_heavy() -> None:
    assert heavy_in(loaded_after("import runjournal.cli.main")) == []


def test_importing_the_package_loads_neither_the_api_nor_click() -> None:
    # `import runjournal` is what a notebook pays before it names `runjournal.Project`.
    loaded = loaded_after("import runjournal")
    assert heavy_in(loaded) == []
    assert not {"click", "msgspec", "runjournal.api", "runjournal.app.run_pipeline"} & loaded


def test_naming_the_project_imports_the_api_and_no_run_machinery() -> None:
    loaded = loaded_after("import runjournal\nrunjournal.Project")
    assert "runjournal.api" in loaded
    assert "runjournal.app.run_pipeline" not in loaded and "eventsourcing" not in loaded


def test_the_probe_sees_a_heavy_import_when_there_is_one() -> None:
    # The check can fail: importing a command module drags the journal in.
    assert "runjournal.cli.run_cmd" in heavy_in(loaded_after("import runjournal.cli.run_cmd"))


def _entry(*args: str) -> subprocess.CompletedProcess[str]:
    """The console script's entry point, as `runjournal ARGS` runs it."""
    code = "import sys; from runjournal.cli.entry import main; sys.argv[0] = 'runjournal'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60
    )


def test_version_is_answered_before_click_loads() -> None:
    probe = (
        "import sys\nsys.argv = ['runjournal', '--version']\n"
        "from runjournal.cli.entry import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    loaded = loaded_after(probe)
    assert "click" not in loaded and "runjournal.cli.main" not in loaded


def test_the_early_version_is_what_click_prints() -> None:
    early = _entry("--version")
    group = subprocess.run(
        [sys.executable, "-m", "runjournal.cli.main", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert early.returncode == group.returncode == 0
    assert early.stdout == group.stdout.replace("main.py", "runjournal") and early.stderr == ""
    assert early.stdout.startswith("runjournal, version ")


def test_other_command_lines_reach_the_command_group() -> None:
    proc = _entry("--versio")  # click's own error and exit code, not the early answer
    assert proc.returncode == 2 and "No such option '--versio'" in proc.stderr
    assert proc.stdout == ""
    assert _entry("reasons", "--json").returncode == 0


# --- `run`: what a pipeline without an LLM step loads ------------------------------------

ONE_DOC = 'name = "one"\ninputs = ["doc.md"]\n[[steps]]\nid = "terms"\nmodule = "builtin.terms"\n'

# What `run` of a `builtin.terms` pipeline, `--jobs 1`, no `--debug`, no LLM option, no
# `--report`, never needs (docs/performance.md "Start-up").
NOT_FOR_THIS_RUN = (
    "openai",
    "opentelemetry",  # only with --otel-endpoint
    "openlineage",
    "runjournal.cli.telemetry_cmds",
    "httpx",
    "concurrent.futures",
    "importlib.metadata",
    "runjournal.adapters.llm.runtime",
    "runjournal.adapters.llm.transport",
    "runjournal.adapters.llm.cassette",
    "runjournal.adapters.debug_bundle.bundle",
    "runjournal.adapters.debug_bundle.summary",
    "runjournal.adapters.debug_bundle.trace",
    "runjournal.adapters.builtin_modules.definitions",
    "runjournal.adapters.builtin_modules.glossary",
    "runjournal.adapters.builtin_modules.headings",
    "runjournal.adapters.builtin_modules.llm_json",
    "runjournal.adapters.projection_store",
    "runjournal.cli.report_cmds",
    "runjournal.cli.query_cmds",
)


def _loaded_by_run(tmp_path: Path, *extra: str) -> set[str]:
    """The modules loaded by `runjournal run one.toml ... EXTRA` in a fresh interpreter."""
    root = tmp_path / "project"
    root.mkdir(exist_ok=True)
    (root / "doc.md").write_text("One paragraph about the journal and its lanes.\n")
    (root / "one.toml").write_text(ONE_DOC)
    out = tmp_path / "modules.json"
    probe = (
        "import atexit, json, sys\n"
        f"atexit.register(lambda: open({str(out)!r}, 'w').write(json.dumps(sorted(sys.modules))))\n"
        "from runjournal.cli.main import main\n"
        "sys.argv = ['runjournal', *sys.argv[1:]]\n"
        "main()\n"
    )
    where = ["--output-root", str(root / "out"), "--cache-root", str(root / "cache")]
    home = tmp_path / "home"
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", probe, "run", str(root / "one.toml"), *where, "-q", *extra],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=root,
    )
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(out.read_text()))


def _among(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_run_and_resume_without_an_llm_step_load_no_llm_runtime(tmp_path: Path) -> None:
    cold = _loaded_by_run(tmp_path)
    resume = _loaded_by_run(tmp_path, "--resume")
    assert _among(cold, NOT_FOR_THIS_RUN) == []
    assert _among(resume, NOT_FOR_THIS_RUN) == []
    assert "runjournal.adapters.builtin_modules.terms" in resume  # the probe sees the run


def test_the_run_probe_sees_what_an_option_asks_for(tmp_path: Path) -> None:
    # The check can fail: an LLM limit builds the LLM runtime, `--debug` the bundle writer,
    # `--jobs 2` a thread pool.
    loaded = _loaded_by_run(tmp_path, "--max-cost", "1", "--debug", "summary", "--jobs", "2")
    assert "runjournal.adapters.llm.runtime" in loaded
    assert "runjournal.adapters.debug_bundle.bundle" in loaded
    assert "concurrent.futures" in loaded


# --- patterns compiled on first use, eventsourcing only with a journal --------------------

_COMPILES = """
import os, re, sys
import runjournal
own = os.path.dirname(runjournal.__file__) + os.sep
real, seen = re._compile, []
def counting(pattern, flags):
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(os.path.dirname(re.__file__)):
        frame = frame.f_back
    name = frame.f_code.co_filename if frame is not None else ""
    # under the package (installed: in site-packages; editable: the checkout), but not in a
    # venv inside the checkout
    if name.startswith(own) and "site-packages" not in name[len(own):]:
        seen.append(name[len(own):])
    return real(pattern, flags)
re._compile = counting
"""


def _compiled_by(code: str) -> list[str]:
    """The runjournal files that compiled a pattern while `code` ran."""
    return list(_probe(f"{_COMPILES}\n{code}\nimport json\nprint(json.dumps(sorted(set(seen))))"))


def test_importing_the_run_command_compiles_no_pattern() -> None:
    imports = (
        "import runjournal.cli.main, runjournal.cli.run_cmd, runjournal.cli.compose\n"
        "import runjournal.adapters.journal.application, runjournal.domain.redaction\n"
        "from runjournal.adapters.builtin_modules import BUILTIN_MODULES\n"
    )
    assert _compiled_by(imports) == []


def test_the_compile_probe_sees_a_pattern_compiled_on_first_use() -> None:
    # The check can fail: the first use of a lazy pattern compiles it, and is seen.
    code = "from runjournal.domain.names import is_valid_run_id\nis_valid_run_id('x')"
    assert _compiled_by(code) == ["domain/lazy_pattern.py"]


def test_the_journal_package_and_composition_root_load_no_eventsourcing() -> None:
    loaded = loaded_after("import runjournal.adapters.journal, runjournal.cli.compose")
    assert _among(loaded, ("eventsourcing",)) == []
    from_errors = loaded_after("from runjournal.adapters.journal import JournalError")
    assert _among(from_errors, ("eventsourcing",)) == []
    # The check can fail: the store is the journal itself.
    store = loaded_after("from runjournal.adapters.journal import JournalStore")
    assert "eventsourcing.application" in store


def test_a_finished_command_leaves_its_heap_out_of_the_teardown_collection(monkeypatch) -> None:
    """After the command (whatever its exit), the heap is frozen: the interpreter's
    teardown does not walk it again (docs/performance.md
    "Concurrency: `--jobs N` against an LLM endpoint")."""
    import gc

    import pytest
    import runjournal.cli.main as group_module
    from runjournal.cli import entry

    def command() -> None:
        raise SystemExit(3)

    monkeypatch.setattr(group_module, "main", command)
    monkeypatch.setattr(sys, "argv", ["runjournal", "run", "x.toml"])
    before = gc.get_freeze_count()
    try:
        with pytest.raises(SystemExit) as exit_:
            entry.main()
        assert exit_.value.code == 3
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
