"""Where a fully cached resume of one-paragraph documents spends its cpu, per item.

Builds DOCS one-paragraph documents (the corpus of bench_resume.py, `builtin.terms`), runs
them cold and resumes once through the console script, then resumes once more in this
process with a few functions wrapped to add up their thread cpu time (`time.thread_time`,
so the committer thread's journal writes are counted apart from the main thread's work;
nested phases are included in their callers). Much cheaper than cProfile's per-call
overhead, which inflates the small Python calls of the lane path several times.

    python bench/profile_resume_phases.py [--docs 1000]
"""

from __future__ import annotations

import argparse
import collections
import functools
import importlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_resume import make_corpus  # the same corpus as the resume benchmark

PHASES = (
    ("runjournal.domain.runner.pipeline_runner", "PipelineRunner.run", "runner (all lanes)"),
    ("runjournal.adapters.checkpoints", "CheckpointLoader.load", "  checkpoint loads"),
    ("runjournal.domain.run", "Run.trigger", "  journal events built, checked"),
    ("runjournal.adapters.journal.session", "RunSession._recorded", "  journal listeners"),
    ("runjournal.adapters.chunkplans", "ChunkPlanFileStore.get", "  chunk plan reads"),
    ("runjournal.adapters.sources", "load_sources", "input files read and hashed"),
    ("runjournal.app.terminal", "Terminalizer.succeed", "terminalization"),
    ("runjournal.adapters.objects", "OutputObjects.place", "  outputs linked"),
    ("runjournal.adapters.journal.store", "JournalStore._put", "journal commits (committer)"),
    ("runjournal.adapters.journal.codec", "EventMapper.to_stored_rows", "  rows encoded"),
)
ARGS = ("big.toml", "--output-root", "out", "--cache-root", "cache", "-q")


def wrap(module: str, qualname: str, spent: collections.Counter[str]) -> None:
    owner: Any = importlib.import_module(module)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    function = getattr(owner, name)

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[qualname] += time.thread_time() - start

    setattr(owner, name, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rj-phases-") as tmp:
        root = Path(tmp)
        make_corpus(root, args.docs, 1)
        script = Path(sys.executable).parent / "runjournal"
        for extra in ((), ("--resume",)):
            subprocess.run([str(script), "run", *ARGS, *extra], cwd=root, check=True)
        spent: collections.Counter[str] = collections.Counter()
        for module, qualname, _ in PHASES:
            wrap(module, qualname, spent)
        from runjournal.cli.main import main as cli

        os.chdir(root)
        sys.argv = ["runjournal", "run", *ARGS, "--resume"]
        cpu = time.process_time()
        run: Callable[[], None] = cli
        try:
            run()
        except SystemExit as exc:
            if exc.code:
                sys.exit(f"profile_resume_phases: the resume failed ({exc.code})")
        cpu = time.process_time() - cpu
    print(f"in-process fully cached resume of {args.docs} one-paragraph documents")
    print(f"process cpu {cpu:.3f} s = {cpu / args.docs * 1e3:.3f} ms per item (start-up included)")
    for _, qualname, label in PHASES:
        per_item = spent[qualname] / args.docs * 1e3
        print(f"  {label:32s} {per_item:6.3f} ms per item  ({qualname})")


if __name__ == "__main__":
    main()
