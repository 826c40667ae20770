"""Roots opened once: a root swapped for a symlink during a run redirects nothing.

docs/internals.md "FsRoot" and "Backends". Each root (output, cache, debug, the directory
of a SQLite journal) is opened once per invocation by the composition root; everything
beneath it works through that handle, as Go's `os.Root` does. A module's `extract` (or a
fake root opener passed through `Factories`) moves a root aside and puts a symlink to an
attacker's directory in its place: nothing may be written in the symlink's target, and
what the run writes lands in the real (moved) directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from runjournal.adapters.fsroot import FsRoot
from runjournal.cli.compose import Factories
from runjournal.cli.main import cli
from support.cache_entries import checkpoints, plans
from support.inprocess import InProcess

SWAPPER = """
import os
from runjournal.domain.modules import Module, Normalized

def swap():
    for pair in os.environ["RJ_SWAP"].split(";"):
        root, target = pair.split("=")
        try:
            os.mkdir(root + ".swapping")  # once, whichever lane's extract comes first
        except FileExistsError:
            continue
        os.rename(root, root + ".moved")
        os.symlink(target, root)

class Swapper(Module):
    name = "test.swapper"
    fingerprint = "test.swapper/1"
    artifact_kind = "swapped"
    schema = "test.swapper/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        swap()
        ctx.trace.record("swapped", {"chunk": chunk.id})
        return len(chunk.text)

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged)
"""

PIPELINE = """
name = "swap"
inputs = ["docs/*.md"]

[[steps]]
id = "swapper"
module = "plugins/swapper.py:Swapper"

[[steps]]
id = "terms"
module = "builtin.terms"
consumes = ["swapper"]
params = { min_count = 1 }
"""


def make_pipeline(base: Path) -> Path:
    pipe = base / "pipe"
    (pipe / "docs").mkdir(parents=True)
    (pipe / "plugins").mkdir()
    (pipe / "plugins" / "swapper.py").write_text(SWAPPER)
    (pipe / "docs" / "a.md").write_text("# Alpha\n\nThe **event journal** records runs.\n")
    (pipe / "docs" / "b.md").write_text("# Beta\n\nA **checkpoint** is reused on resume.\n")
    (pipe / "pipeline.toml").write_text(PIPELINE)
    return pipe / "pipeline.toml"


def everything(top: Path) -> list[str]:
    return sorted(str(p.relative_to(top)) for p in top.rglob("*"))


@pytest.fixture
def invoke(tmp_path: Path) -> InProcess:
    return InProcess(tmp_path / "home")


@pytest.mark.parametrize("which", ["output", "cache", "debug", "journal", "all"])
def test_a_root_swapped_mid_run_redirects_nothing(
    tmp_path: Path, invoke: InProcess, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    pipeline = make_pipeline(tmp_path)
    roots = {
        "output": tmp_path / "out",
        "cache": tmp_path / "cache",
        "debug": tmp_path / "dbg",
        "journal": tmp_path / "jdir",
    }
    for root in roots.values():
        root.mkdir()  # roots that exist before the run, as they do after its first one
    evil = tmp_path / "evil"
    targets = {}
    for name in roots:
        targets[name] = evil / name
        targets[name].mkdir(parents=True)
    swapped = list(roots) if which == "all" else [which]
    monkeypatch.setenv("RJ_SWAP", ";".join(f"{roots[n]}={targets[n]}" for n in swapped))
    result = invoke(
        "run",
        str(pipeline),
        "--output-root",
        str(roots["output"]),
        "--cache-root",
        str(roots["cache"]),
        "--debug-root",
        str(roots["debug"]),
        "--journal",
        f"sqlite://{roots['journal']}/journal.sqlite3",
        "--debug",
        "trace",
        "--no-progress",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["status"] == "succeeded"
    # Nothing was written in any symlink's target.
    assert everything(evil) == sorted(n for n in roots), everything(evil)
    # What the run wrote is in the real directories, moved aside.
    real = {n: Path(f"{roots[n]}.moved") if n in swapped else roots[n] for n in roots}
    run_id = doc["run_id"]
    assert (real["output"] / run_id / "manifest.json").is_file()
    assert (real["output"] / run_id / "report.json").is_file()
    assert os.readlink(real["output"] / "latest-ok") == run_id
    assert checkpoints(real["cache"]) and plans(real["cache"])
    bundle = real["debug"] / run_id
    assert (bundle / "summary" / "run.json").is_file()
    assert (bundle / "trace" / "events.jsonl").is_file()
    assert not (bundle / "INCOMPLETE").exists()
    journal = real["journal"] / "journal.sqlite3"
    assert journal.is_file() and journal.stat().st_size > 0
    shown = invoke(
        "journal",
        "show",
        run_id,
        "--json",
        "--journal",
        f"sqlite://{journal}",
    )
    assert shown.exit_code == 0, shown.stderr
    types = [e["type"] for e in json.loads(shown.stdout)["events"]]
    assert types[0] == "RunAllocated" and "RunTerminated" in types


class _Opener:
    """A root opener that counts opens and swaps the output root right after opening it."""

    def __init__(self, swap: tuple[Path, Path] | None = None) -> None:
        self.opened: list[str] = []
        self.swap = swap

    def __call__(self, path: str, *, create: bool = False) -> FsRoot:
        root = FsRoot.open(path, create=create)
        self.opened.append(os.path.abspath(path))
        if self.swap is not None and os.path.abspath(path) == str(self.swap[0]):
            os.rename(self.swap[0], f"{self.swap[0]}.moved")
            os.symlink(self.swap[1], self.swap[0])
            self.swap = None
        return root


def test_each_root_is_opened_once_per_run(tmp_path: Path, example: Path) -> None:
    opener = _Opener()
    out, cache, dbg = tmp_path / "out", tmp_path / "cache", tmp_path / "dbg"
    result = CliRunner().invoke(
        cli,
        [
            "run",
            str(example),
            "--output-root",
            str(out),
            "--cache-root",
            str(cache),
            "--debug-root",
            str(dbg),
            "--debug",
            "summary",
            "--report",
            "--no-progress",
            "--json",
        ],
        obj=Factories(open_root=opener),
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    assert sorted(opener.opened) == sorted({str(out), str(cache), str(dbg)})


def test_journal_follows_the_output_root_it_opened(tmp_path: Path, example: Path) -> None:
    """The root is swapped right after it was opened, before the journal exists."""
    out, evil = tmp_path / "out", tmp_path / "evil"
    evil.mkdir()
    out.mkdir()
    opener = _Opener(swap=(out, evil))
    result = CliRunner().invoke(
        cli,
        [
            "run",
            str(example),
            "--output-root",
            str(out),
            "--cache-root",
            str(tmp_path / "c"),
            "--no-progress",
            "--json",
        ],
        obj=Factories(open_root=opener),
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    assert everything(evil) == []
    moved = Path(f"{out}.moved")
    assert (moved / "journal.sqlite3").is_file()
    assert (moved / json.loads(result.stdout)["run_id"] / "manifest.json").is_file()


def test_sqlite_journal_opens_through_its_directory_handle(tmp_path: Path) -> None:
    """The directory is opened once; its path then swapped; the database still lands in it."""
    from runjournal.adapters.journal import open_journal

    jdir, evil = tmp_path / "jdir", tmp_path / "evil"
    jdir.mkdir()
    evil.mkdir()
    with FsRoot.open(jdir) as directory:
        os.rename(jdir, f"{jdir}.moved")
        os.symlink(evil, jdir)
        store = open_journal(f"sqlite://{jdir}/journal.sqlite3", directory=directory)
        store.close()
        reader = open_journal(
            f"sqlite://{jdir}/journal.sqlite3", directory=directory, read_only=True
        )
        assert reader.url == f"sqlite://{jdir}/journal.sqlite3"  # shown as configured
        reader.close()
    assert everything(evil) == []
    assert (Path(f"{jdir}.moved") / "journal.sqlite3").stat().st_size > 0
