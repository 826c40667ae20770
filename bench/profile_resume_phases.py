"""Where a fully cached resume of one-paragraph documents spends its cpu, per item.

Builds DOCS one-paragraph documents (the corpus of bench_resume.py, `builtin.terms`), runs
them cold and resumes once through the console script, then resumes once more in this
process with a few functions wrapped to add up their thread cpu time (`time.thread_time`,
so the committer thread's journal writes are counted apart from the main thread's work;
nested phases are included in their callers). Much cheaper than cProfile's per-call
overhead, which inflates the small Python calls of the lane path several times.

With `--million`, the corpus is bench_million.py's instead (DOCS documents of 6
paragraphs, an `llm.json` step answered by the fake server and `builtin.terms`; the cold
run and a first resume, which records the stat cache, through the console script), the
measured resume runs with `--input-check stat`, and the figures are per decision.

    python bench/profile_resume_phases.py [--docs 1000] [--million]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import importlib
import io
import json
import os
import signal
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
    ("runjournal.domain.runner.lanes", "reuse_lane", "  lanes reused as a whole"),
    ("runjournal.adapters.checkpoints", "CheckpointLoader.load_lane", "    their loads"),
    ("runjournal.adapters.packed_store", "PackedStore.get_many", "      index and records"),
    ("runjournal.adapters.packed_store", "PackedStore.lookup_many", "      index rows"),
    ("runjournal.adapters.packed_store", "PackedStore.read_found", "      records read"),
    ("runjournal.adapters.checkpoints", "EnvelopeCodec.open", "      envelopes opened in full"),
    ("runjournal.adapters.checkpoints", "EnvelopeCodec.open_facts", "      decided from facts"),
    ("runjournal.domain.runner.reused_lane", "module_warnings", "    warnings made safe"),
    ("runjournal.domain.runner.scheduler", "Scheduler._flush", "  lanes replayed to the journal"),
    ("runjournal.adapters.journal.session", "RunSession._settle", "  block summaries settled"),
    ("runjournal.domain.run", "Run.record_block_reuse", "    their events applied"),
    ("runjournal.adapters.checkpoints", "CheckpointLoader.load", "  checkpoint loads"),
    ("runjournal.domain.run", "Run.trigger", "  journal events built, checked"),
    ("runjournal.adapters.journal.session", "RunSession._recorded", "  journal listeners"),
    ("runjournal.adapters.chunkplans", "ChunkPlanFileStore.get", "  chunk plan reads"),
    ("runjournal.adapters.sources", "load_sources", "input files read and hashed"),
    ("runjournal.app.terminal", "Terminalizer.succeed", "terminalization"),
    ("runjournal.adapters.objects", "OutputObjects.place", "  outputs linked"),
    # expansion_matches first: manifest_check binds it by name when imported
    ("runjournal.domain.block_reuse", "expansion_matches", "summaries' expansions checked"),
    ("runjournal.app.manifest_check", "CommittedFold.committed", "committed fold, checks included"),
    ("runjournal.adapters.journal.store", "JournalStore._put", "journal commits (committer)"),
    ("runjournal.adapters.journal.codec", "EventMapper.to_stored_rows", "  rows encoded"),
)
ARGS = ("big.toml", "--output-root", "out", "--cache-root", "cache", "-q")


def wrap(module: str, qualname: str, spent: collections.Counter[str]) -> None:
    owner: Any = importlib.import_module(module)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    function = getattr(owner, name, None)
    if function is None:  # a phase the code measured does not have
        return

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[qualname] += time.thread_time() - start

    setattr(owner, name, timed)


def million_corpus(root: Path, docs: int) -> list[str]:
    """bench_million.py's corpus under `root`, run cold and resumed once (which records
    the stat cache); the argv of its resume."""
    import bench_million

    server, url = bench_million.start_fake(0.0)
    try:
        bench_million.make_corpus(root, docs, 6, url)
        resume = bench_million.run_args(root, "--resume", "--input-check", "stat")
        env = dict(bench_million.ENV, **{bench_million.KEY_VAR: "bench-key"})
        for argv in (bench_million.run_args(root), resume):
            subprocess.run(
                [str(bench_million.SCRIPT), *argv], cwd=root, env=env, check=True,
                stdout=subprocess.DEVNULL,
            )  # fmt: skip
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
    os.environ[bench_million.KEY_VAR] = "bench-key"
    return resume


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--million", action="store_true", help="bench_million.py's corpus")
    args = parser.parse_args()
    items, unit = args.docs, "item"
    with tempfile.TemporaryDirectory(prefix="rj-phases-") as tmp:
        root = Path(tmp)
        if args.million:
            argv = million_corpus(root, args.docs)
        else:
            make_corpus(root, args.docs, 1)
            script = Path(sys.executable).parent / "runjournal"
            for extra in ((), ("--resume",)):
                subprocess.run([str(script), "run", *ARGS, *extra], cwd=root, check=True)
            argv = ["run", *ARGS, "--resume"]
        spent: collections.Counter[str] = collections.Counter()
        for module, qualname, _ in PHASES:
            wrap(module, qualname, spent)
        from runjournal.cli.main import main as cli

        os.chdir(root)
        sys.argv = ["runjournal", *argv]
        out = io.StringIO()
        cpu = time.process_time()
        run: Callable[[], None] = cli
        try:
            with contextlib.redirect_stdout(out) if args.million else contextlib.nullcontext():
                run()
        except SystemExit as exc:
            if exc.code:
                sys.exit(f"profile_resume_phases: the resume failed ({exc.code})")
        cpu = time.process_time() - cpu
        if args.million:
            items, unit = sum(json.loads(out.getvalue())["decisions"].values()), "decision"
    corpus = "bench_million.py" if args.million else "one-paragraph"
    print(f"in-process fully cached resume of {args.docs} {corpus} documents ({items} {unit}s)")
    print(f"process cpu {cpu:.3f} s = {cpu / items * 1e6:.1f} us per {unit} (start-up included)")
    for _, qualname, label in PHASES:
        per_item = spent[qualname] / items * 1e6
        print(f"  {label:32s} {per_item:7.1f} us per {unit}  ({qualname})")


if __name__ == "__main__":
    main()
