"""Children timed with `wait4` whose peak RSS is their own, not the bench's.

Linux keeps a process's peak RSS (`ru_maxrss`) across `execve`, and a child made by
`fork` or `vfork` (what `subprocess` uses) starts from its parent's: a child of a bench
that once held 200 MiB (a segment read whole, a command's JSON) reports at least 200 MiB,
whatever it used itself. So the commands are started by a small spawner process, made
when the bench starts (a few MiB): `fork`, `execve`, `wait4` there, and the cpu (user +
system), wall and peak RSS sent back. Its stdout goes to a file (read back only when the
caller wants it), so the bench never holds a large output either.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_SPAWNER = r"""
import json, os, sys, time
for line in sys.stdin:
    req = json.loads(line)
    out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            os.chdir(req["cwd"])
            os.dup2(null, 0)
            os.dup2(out, 1)
            os.dup2(err, 2)
            os.execve(req["argv"][0], req["argv"], req["env"])
        finally:
            os._exit(127)
    for fd in (out, err, null):
        os.close(fd)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    cpu = usage.ru_utime + usage.ru_stime
    code = os.waitstatus_to_exitcode(status)
    print(json.dumps([code, cpu, wall, usage.ru_maxrss * 1024]), flush=True)
"""


class Spawner:
    """One spawner process; `run` a command at a time."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-S", "-c", _SPAWNER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._dir = tempfile.TemporaryDirectory(prefix="rj-spawn-")

    def run(
        self, argv: list[str], *, cwd: Path, env: dict[str, str], keep_output: bool = False
    ) -> tuple[float, float, int, str]:
        """(cpu s, wall s, peak RSS bytes, stdout if `keep_output` else "") of `argv`;
        SystemExit naming the command when it fails."""
        out, err = Path(self._dir.name, "out"), Path(self._dir.name, "err")
        request = {"argv": argv, "cwd": str(cwd), "env": env, "out": str(out), "err": str(err)}
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        code, cpu, wall, rss = json.loads(self._proc.stdout.readline())
        if code != 0:
            tail = err.read_text(errors="replace").strip()[-500:]
            raise SystemExit(f"{' '.join(argv[1:3])} failed ({code}): {tail}")
        return cpu, wall, rss, out.read_text() if keep_output else ""

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=30)
        self._dir.cleanup()

    def __enter__(self) -> Spawner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def own_rss_floor() -> int:
    """The spawner's own peak RSS in bytes (what every child's figure is at least)."""
    with Spawner() as spawner:
        return spawner.run(["/bin/true"], cwd=Path("/"), env={})[2]


if __name__ == "__main__":
    print(f"spawner floor: {own_rss_floor() / 2**20:.1f} MiB", file=sys.stderr)
    print(os.getpid())
