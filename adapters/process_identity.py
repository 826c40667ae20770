"""Process identity, so `recover` can tell a dead run from a live one.

A pid alone is not enough (pids are reused): a run records its pid, host and process start
time, and a run is live only if that same process, started at that same time, still exists.
"""

from __future__ import annotations

import os
import time

_TOLERANCE_S = 2.0


def host_name() -> str:
    """This host's name: `uname`'s node name, which `socket.gethostname()` returns on
    POSIX, without importing `socket` (every `run` records it; docs/performance.md
    "Start-up")."""
    uname = getattr(os, "uname", None)
    if uname is not None:
        return str(uname().nodename)
    import socket

    return socket.gethostname()


def process_start_time(pid: int | None = None) -> float | None:
    """Seconds since the epoch at which `pid` started (Linux /proc), or None if unknown."""
    pid = os.getpid() if pid is None else pid
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[19])
        with open("/proc/stat", "rb") as fh:
            for line in fh:
                if line.startswith(b"btime"):
                    return int(line.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return None


def current_process_start() -> float:
    start = process_start_time()
    return time.time() if start is None else start


def is_alive(pid: int, host: str, started: float) -> bool | None:
    """True/False for a process of this host; None when the run belongs to another host."""
    if host != host_name():
        return None
    start = process_start_time(pid)
    if start is None:
        return False
    return abs(start - started) <= _TOLERANCE_S
