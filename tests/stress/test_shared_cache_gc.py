"""Runs of one project and `gc --max-cache-size 0` of another, at once, on one cache root
(docs/operations.md "Cache retention").

A run registers its journal under the cache root's shared lock before it writes there,
and `gc` reads the registry under the exclusive lock: whatever the interleaving, no
collection in project A removes a checkpoint project B's journal references, so B's
next `--resume` reuses every stage. Size: RUNJOURNAL_STRESS_SHARED_GC_RUNS concurrent
runs of B per round (default 3), RUNJOURNAL_STRESS_SHARED_GC_ROUNDS rounds (default 2).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from support.console import CLI, console_script

PIPELINE = """
name = "{name}"
inputs = ["docs/*.md"]
[chunking]
strategy = "paragraphs"
max_chars = 120
[[steps]]
id = "terms"
module = "builtin.terms"
scope = "document"
params = {{ min_count = 1, max_terms = 20 }}
[[steps]]
id = "headings"
module = "builtin.headings"
scope = "document"
"""

DOC = "# {n}\n\nA **journal** is a record. The **journal** is kept.\n\n## Part {n}\n\nMore.\n"

RUNS = int(os.environ.get("RUNJOURNAL_STRESS_SHARED_GC_RUNS", "3"))
ROUNDS = int(os.environ.get("RUNJOURNAL_STRESS_SHARED_GC_ROUNDS", "2"))


def _project(base: Path, name: str, docs: int) -> Path:
    (base / name / "docs").mkdir(parents=True)
    for n in range(docs):
        (base / name / "docs" / f"d{n}.md").write_text(DOC.format(n=f"{name}{n}"))
    (base / name / "pipeline.toml").write_text(PIPELINE.format(name=name))
    return base / name


def test_gc_in_one_project_never_removes_what_a_concurrent_project_writes(
    tmp_path: Path,
) -> None:
    cli = CLI(tmp_path / "home")
    cli.env["RUNJOURNAL_CACHE_ROOT"] = str(tmp_path / "cache")
    a, b = _project(tmp_path, "alpha", 2), _project(tmp_path, "beta", 4)
    assert cli("run", "pipeline.toml", "--resume", cwd=a).returncode == 0
    for _ in range(ROUNDS):
        runs = [
            subprocess.Popen(
                [*console_script(), "run", "pipeline.toml", "--resume", "--json"],
                cwd=b,
                env=cli.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(RUNS)
        ]
        try:
            collections = 0
            while any(p.poll() is None for p in runs) or collections == 0:
                gc = cli("gc", "--max-cache-size", "0", "--json", cwd=a)
                assert gc.returncode == 0, gc.stderr
                doc = json.loads(gc.stdout)["cache"]
                assert not any("workspaces/beta/" in r["name"] for r in doc["removed"])
                collections += 1
            for proc in runs:
                _out, err = proc.communicate(timeout=300)
                assert proc.returncode == 0, err
        finally:
            for proc in runs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        again = cli("run", "pipeline.toml", "--resume", "--json", cwd=b)
        assert again.returncode == 0, again.stderr
        assert set(json.loads(again.stdout)["decisions"]) == {"reused"}
