"""Checkpoints are durable in groups, and a lost or torn one is always caught.

docs/internals.md "Group durability": envelopes are written without a per-file fsync and
synced once (`syncfs`) before the journal batch that records them commits. These tests
prove the two halves: the order (every committed `CheckpointWritten` follows a sync that
followed its write; no checkpoint write is fsynced on its own), and the safety net (runs
killed with SIGKILL at random moments, then the checkpoints of the last committed batch
and of the unflushed tail truncated, zeroed or deleted, as a power loss could leave them:
every damaged scope is decided `checkpoint_corrupt` or `checkpoint_missing` on the
resume, recomputed, and the outputs are byte-identical to an undisturbed run's).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import signal
import sqlite3
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.journal import open_journal
from runjournal.adapters.packed_store import segment_records
from runjournal.cli.compose import Factories
from runjournal.cli.main import cli as cli_group
from runjournal.domain.events import CheckpointWritten
from runjournal.domain.names import safe_lane_id
from support.cache_entries import CacheEntry, checkpoints
from support.console import console_script

PIPELINE = """name = "durable"
inputs = ["docs/*.md"]
[chunking]
max_chars = 80
[[steps]]
id = "terms"
module = "builtin.terms"
"""
WORDS = ["alpha", "beta", "gamma", "delta", "journal", "checkpoint", "lane", "chunk"]
DAMAGED = {"checkpoint_corrupt", "checkpoint_missing"}
KILLS = 4  # bounded: each iteration is one partial cold run, a recover and a resume
_PREFIX = struct.Struct(">4sHI")  # docs/internals.md "Envelope format"


def make_project(root: Path, docs: int, paras: int, seed: int = 3) -> Path:
    rng = random.Random(seed)
    (root / "docs").mkdir(parents=True)
    for d in range(docs):
        text = "\n\n".join(
            " ".join(rng.choice(WORDS) for _ in range(10)) + "." for _ in range(paras)
        )
        (root / "docs" / f"d{d:03}.md").write_text(text + "\n")
    pipeline = root / "pipeline.toml"
    pipeline.write_text(PIPELINE)
    return pipeline


def runjournal(cli, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return cli(*args, timeout=timeout)


def run_args(pipeline: Path, out: Path, cache: Path, *extra: str) -> list[str]:
    return [
        "run",
        str(pipeline),
        "--output-root",
        str(out),
        "--cache-root",
        str(cache),
        "--json",
        "-q",
        *extra,
    ]


def outputs_of(run_dir: Path) -> dict[str, bytes]:
    skip = {"manifest.json", "report.json"}
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.name not in skip
    }


def events(cli, out: Path, run_id: str) -> list[dict[str, Any]]:
    proc = runjournal(cli, "journal", "show", run_id, "--output-root", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["events"]


_LANES = {safe_lane_id(f"docs/d{d:03}.md"): f"docs/d{d:03}.md" for d in range(100)}


def scope_of(entry: CacheEntry, data: bytes) -> tuple[str, str, str, str]:
    """(step, lane, stage, chunk) of an intact envelope: from a version 1 or 2 header, or,
    for version 3 (whose header does not repeat its position), from the entry's name
    (`workspaces/<p>/steps/<step>/<safe lane>/.../extract/<chunk>.ckpt` or
    `.../<stage>.ckpt`; the lanes are `make_project`'s documents)."""
    _, version, size = _PREFIX.unpack_from(data)
    if version < 3:
        header = msgspec.msgpack.decode(data[_PREFIX.size : _PREFIX.size + size])
        return header["step"], header["lane"], header["stage"], header["chunk"]
    parts = entry.rel.split("/")
    leaf = parts[-1].removesuffix(".ckpt")
    if parts[-2] == "extract":
        return parts[3], _LANES[parts[4]], "extract", leaf
    return parts[3], _LANES[parts[4]], leaf, ""


def damage(entry: CacheEntry, how: str) -> None:
    """A torn write (the first half only), zeros where the bytes lay, or a lost entry."""
    if how == "truncate":
        data = entry.read_bytes()
        entry.write_bytes(data[: len(data) // 2])
    elif how == "zero":
        entry.zero_in_place()
    else:
        entry.unlink()


def damage_recent(cache: Path, committed: list[str], recent: int) -> set[tuple[str, ...]]:
    """Damage what a power loss could: the unflushed tail (entries no committed event
    names) and the entries of the last `recent` committed `CheckpointWritten` events."""
    files = {hashlib.sha256(e.read_bytes()).hexdigest(): e for e in checkpoints(cache)}
    tail = [digest for digest in files if digest not in set(committed)]
    last = [digest for digest in committed[-recent:] if digest in files]
    scopes = set()
    for i, digest in enumerate(dict.fromkeys(tail + last)):
        path = files[digest]
        scopes.add(scope_of(path, path.read_bytes()))
        damage(path, ("truncate", "zero", "delete")[i % 3])
    return scopes


def decided(evts: list[dict[str, Any]]) -> dict[tuple[str, ...], str]:
    return {
        (e["data"]["step"], e["data"]["lane"], e["data"]["stage"], e["data"]["chunk"]): e["data"][
            "code"
        ]
        for e in evts
        if e["type"] == "StageDecided"
    }


@pytest.fixture
def reference(cli, tmp_path: Path) -> tuple[Path, dict[str, bytes], float]:
    """The project, the outputs of one undisturbed cold run and its wall time."""
    pipeline = make_project(tmp_path / "project", docs=12, paras=30)
    start = time.monotonic()
    proc = runjournal(cli, *run_args(pipeline, tmp_path / "ref-out", tmp_path / "ref-cache"))
    wall = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    return pipeline, outputs_of(Path(json.loads(proc.stdout)["run_dir"])), wall


def test_lost_writes_of_the_last_batch_are_reported_and_recomputed(cli, tmp_path, reference):
    pipeline, expected, _ = reference
    out, cache = tmp_path / "out", tmp_path / "cache"
    proc = runjournal(cli, *run_args(pipeline, out, cache, "--batch-size", "16"))
    assert proc.returncode == 0, proc.stderr
    first = json.loads(proc.stdout)["run_id"]
    committed = [
        e["data"]["sha256"] for e in events(cli, out, first) if e["type"] == "CheckpointWritten"
    ]
    scopes = damage_recent(cache, committed, recent=9)
    assert len(scopes) == 9

    proc = runjournal(cli, *run_args(pipeline, out, cache, "--resume"))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    codes = decided(events(cli, out, doc["run_id"]))
    assert {scope: codes[scope] for scope in scopes} == {
        scope: codes[scope] for scope in scopes if codes[scope] in DAMAGED
    }, "a damaged checkpoint was not reported"
    assert {codes[s] for s in scopes} == DAMAGED  # both kinds: torn and lost
    others = {code for scope, code in codes.items() if scope not in scopes}
    assert others <= {"reused"}, others  # early cutoff: nothing else re-ran
    assert outputs_of(Path(doc["run_dir"])) == expected


def _wait_for_a_checkpoint(child: subprocess.Popen[bytes], cache: Path) -> None:
    """Return once the run has written its first checkpoint file (or has ended)."""
    segments = cache / "pack" / "segments"
    while child.poll() is None:
        if segments.is_dir() and any(p.stat().st_size for p in segments.iterdir()):
            return
        time.sleep(0.005)


def test_sigkill_at_random_moments_then_lost_writes_resume_identically(cli, tmp_path, reference):
    pipeline, expected, wall = reference
    rng = random.Random(1515)
    base = console_script()
    killed_mid_run = 0
    for iteration in range(KILLS):
        out, cache = tmp_path / f"out{iteration}", tmp_path / f"cache{iteration}"
        args = run_args(pipeline, out, cache, "--batch-size", "8")
        child = subprocess.Popen(
            [*base, *args],
            cwd=cli.cwd,
            env=cli.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        if iteration % 2:
            time.sleep(rng.uniform(0.2, 0.9) * wall)  # scaled to this machine's current speed
        else:  # while checkpoints are being written, however slow the machine is now
            _wait_for_a_checkpoint(child, cache)
            time.sleep(rng.uniform(0.0, 0.1) * wall)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)

        recovered = runjournal(cli, "recover", "--output-root", str(out), "--json")
        if not (out / "journal.sqlite3").exists():
            continue  # killed before the journal existed: nothing to damage or resume
        assert recovered.returncode == 0, recovered.stderr
        runs = json.loads(
            runjournal(cli, "runs", "list", "--output-root", str(out), "--json").stdout
        )["runs"]
        if not runs:  # killed before its RunAllocated committed: the log holds no event
            assert _stored_rows(out / "journal.sqlite3") == 0, f"iteration {iteration}"
            continue
        killed = runs[0]["run_id"]
        committed = [
            e["data"]["sha256"]
            for e in events(cli, out, killed)
            if e["type"] == "CheckpointWritten"
        ]
        scopes = damage_recent(cache, committed, recent=6) if cache.exists() else set()
        killed_mid_run += bool(scopes) and runs[0]["status"] == "abandoned"

        proc = runjournal(cli, *run_args(pipeline, out, cache, "--resume"))
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        codes = decided(events(cli, out, doc["run_id"]))
        missed = {s: codes.get(s) for s in scopes if codes.get(s) not in DAMAGED}
        assert missed == {}, f"iteration {iteration}: damaged but not reported: {missed}"
        assert outputs_of(Path(doc["run_dir"])) == expected, f"iteration {iteration}"
    assert killed_mid_run >= 1, "no kill landed while checkpoints were being written"


def _stored_rows(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        if "stored_events" not in tables:
            return 0
        return int(db.execute("SELECT COUNT(*) FROM stored_events").fetchone()[0])


class _Recording(FsRoot):
    """Logs checkpoint writes (with their durability) and syncs, in order."""

    log: list[tuple[Any, ...]] = []

    def write_bytes(self, name: str, data: bytes, **kw: Any) -> None:
        super().write_bytes(name, data, **kw)
        if name.endswith(".ckpt"):
            self.log.append(("write", hashlib.sha256(data).hexdigest(), kw.get("durable", True)))

    def append_record(self, name: str, fd: int, data: bytes) -> None:
        """A packed checkpoint: appended without an fsync (durable at the next sync)."""
        super().append_record(name, fd, data)
        if name.endswith(".ckpt"):
            ((_, envelope),) = segment_records(data)
            self.log.append(("write", hashlib.sha256(envelope).hexdigest(), False))

    def sync(self) -> None:
        self.log.append(("sync",))
        super().sync()


def test_every_committed_checkpoint_was_synced_after_its_write_and_not_one_by_one(
    tmp_path, monkeypatch
):
    """The order the rule promises, observed in process: write (no fsync) < sync < commit."""
    pipeline = make_project(tmp_path / "project", docs=6, paras=12)
    log: list[tuple[Any, ...]] = []
    monkeypatch.setattr(_Recording, "log", log)

    def recording_journal(*args: Any, **kw: Any):
        store = open_journal(*args, **kw)
        put = store._put

        def committed(evts):
            put(evts)
            log.extend(("commit", e.sha256) for e in evts if isinstance(e, CheckpointWritten))

        store._put = committed
        return store

    factories = Factories(open_root=_Recording.open, open_journal=recording_journal)
    result = CliRunner().invoke(
        cli_group,
        run_args(pipeline, tmp_path / "out", tmp_path / "cache", "--batch-size", "16"),
        obj=factories,
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    writes = [entry for entry in log if entry[0] == "write"]
    commits = [i for i, entry in enumerate(log) if entry[0] == "commit"]
    assert writes and commits
    assert all(durable is False for _, _, durable in writes), "a checkpoint was fsynced alone"
    for i in commits:
        digest = log[i][1]
        wrote = max(j for j, e in enumerate(log[:i]) if e[0] == "write" and e[1] == digest)
        assert any(e == ("sync",) for e in log[wrote:i]), f"{digest[:12]} committed unsynced"
    syncs = sum(1 for entry in log if entry == ("sync",))
    assert 1 <= syncs < len(writes) / 4  # in groups, not per file
