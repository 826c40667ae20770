"""FsRoot under SIGKILL: a child rewrites self-describing files (magic, length and digest
inside) through FsRoot and is killed at seeded random moments.

Afterwards every file under its final name must validate (no torn or empty final file),
and whatever a kill left behind must be a recognisable temp file that sweep_temp_files
finds and removes. A probe of this saw orphans in about a third of trials.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

from runjournal.adapters.fsroot import TEMP_PREFIX, FsRoot

SEED = 20261130
TRIALS = 24
BUDGET_SECONDS = 15.0
MAGIC = b"RJCRASH1"
HEADER = struct.Struct(">8sQ32s")  # magic, body length, sha256(body)
TEMP_NAME = re.compile(re.escape(TEMP_PREFIX) + r"[0-9a-f]{16}")

CHILD = f"""
import hashlib, random, struct, sys
from runjournal.adapters.fsroot import FsRoot

root_path, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
header = struct.Struct(">8sQ32s")
with FsRoot.open(root_path, create=True) as root:
    n = 0
    while True:
        body = rng.randbytes(rng.randrange(0, 192 * 1024))
        blob = header.pack({MAGIC!r}, len(body), hashlib.sha256(body).digest()) + body
        if n % 4 == 3:
            root.write_bytes(f"unique/s{{seed}}-{{n}}.bin", blob, overwrite=False)
        else:
            root.write_bytes(f"d{{n % 3}}/f{{n % 5}}.bin", blob)
        if n == 0:
            print("ready", flush=True)
        n += 1
"""


def validates(blob: bytes) -> bool:
    if len(blob) < HEADER.size:
        return False
    magic, length, digest = HEADER.unpack_from(blob)
    body = blob[HEADER.size :]
    return magic == MAGIC and length == len(body) and hashlib.sha256(body).digest() == digest


def scan(root: Path) -> tuple[list[str], list[str]]:
    """(final files, temp files) below root, as relative names."""
    finals, temps = [], []
    for directory, _, files in os.walk(root):
        for name in files:
            relative = os.path.relpath(os.path.join(directory, name), root)
            (temps if name.startswith(TEMP_PREFIX) else finals).append(relative)
    return sorted(finals), sorted(temps)


def run_and_kill(script: Path, root: Path, seed: int, delay: float) -> None:
    child = subprocess.Popen(
        [sys.executable, str(script), str(root), str(seed)],
        stdout=subprocess.PIPE,
        cwd=script.parent,
    )
    try:
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], 10)
        assert ready and child.stdout.readline() == b"ready\n", "child did not start"
        time.sleep(delay)
        assert child.poll() is None, "child exited by itself"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL


def test_sigkill_leaves_only_valid_finals_and_sweepable_temps(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    root_path = tmp_path / "root"
    rng = random.Random(SEED)
    started = time.monotonic()
    trials_with_orphans = 0
    completed = 0
    for trial in range(TRIALS):
        if time.monotonic() - started > BUDGET_SECONDS:
            break
        run_and_kill(script, root_path, SEED + trial, rng.uniform(0.0, 0.06))
        finals, temps = scan(root_path)
        assert finals, "the child wrote nothing"
        for name in finals:
            assert validates((root_path / name).read_bytes()), f"torn final file {name}"
        for name in temps:
            assert TEMP_NAME.fullmatch(os.path.basename(name)), name
        trials_with_orphans += bool(temps)
        completed += 1
    assert completed >= 20, "too few trials within the time budget"

    finals_before, temps = scan(root_path)
    with FsRoot.open(root_path) as root:
        assert root.sweep_temp_files(dry_run=True) == temps
        assert root.sweep_temp_files() == temps
        assert root.sweep_temp_files() == []
    finals_after, no_temps = scan(root_path)
    assert no_temps == [] and finals_after == finals_before
    for name in finals_after:  # a kill between link and unlink leaves nlink == 2 until swept
        assert (root_path / name).stat().st_nlink == 1
    print(f"{trial + 1} kills, {trials_with_orphans} left temp files")
