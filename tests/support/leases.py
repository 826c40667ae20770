"""Stage leases held by another process, for the lease tests (adapters/stage_leases.py).

`LeaseHolder` starts a Python process that takes `FileStageLeases` on the cache root and
obeys one command a line on stdin (`acquire N`, `release N`, `exit`), answering one line
each on stdout; `key(n)` is the n-th extract checkpoint key of one lane. Stopped by pid.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from runjournal.domain.decisions import Stage
from runjournal.domain.ports import CheckpointKey, StoreScope

SCOPE = StoreScope("a" * 32, "", "b" * 64)


def key(n: int, *, step: str = "ask", lane: str = "docs/a.md") -> CheckpointKey:
    """The extract key of chunk `n` (a 64-hex chunk id), in one scope."""
    return CheckpointKey(step, lane, Stage.EXTRACT, hashlib.sha256(b"%d" % n).hexdigest(), SCOPE)


HOLDER = """
import sys
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.stage_leases import FileStageLeases
from support.leases import key

root = FsRoot.open(sys.argv[1], create=True)
leases = FileStageLeases(root, "ask", sys.argv[2])
held = {}
print("ready", flush=True)
for line in sys.stdin:
    verb, _, arg = line.strip().partition(" ")
    if verb == "acquire":
        print("waiting", flush=True)
        lease, wait = leases.acquire(key(int(arg)))
        held[int(arg)] = lease
        print("acquired", wait.outcome.value if wait else "free", flush=True)
    elif verb == "release":
        held.pop(int(arg)).release()
        print("released", flush=True)
    else:
        break
leases.close()
print("closed", flush=True)
"""


class LeaseHolder:
    """Another process holding leases in `cache_root`, as run `run_id`."""

    def __init__(self, cache_root: Path, run_id: str) -> None:
        tests = str(Path(__file__).resolve().parent.parent)
        path = os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(cache_root), run_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": path},
        )
        self.pid = self.proc.pid
        self._pending = b""  # read from the pipe, not yet returned (lines are read raw)
        assert self.read(60) == "ready"

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def read(self, timeout: float = 60) -> str | None:
        """The next line, or None when none came within `timeout` seconds."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            data = os.read(fd, 4096)
            if not data:
                raise RuntimeError(f"holder exited ({self.proc.wait(timeout=10)})")
            self._pending += data
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode().strip()

    def kill(self) -> None:
        """kill -9: the kernel drops its record locks."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(BrokenPipeError, OSError):
                self.send("exit")
            deadline = time.monotonic() + 10
            while self.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if self.proc.poll() is None:
                self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
