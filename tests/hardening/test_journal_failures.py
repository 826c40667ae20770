"""The journal failing under a run that is already allocated.

- A SQLite journal that cannot grow mid-run (a file-size limit stands in for a full
  disk): `--json` names the run and says `failed`, exit 1, one stderr line.
- A PostgreSQL server that dies or stops answering mid-run: the wait is bounded by
  `journal_timeout`, and the error says so in one line (needs RUNJOURNAL_TEST_POSTGRES_URL
  for the server-side part; the unanswering port needs nothing).
"""

from __future__ import annotations

import contextlib
import json
import resource
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import synthetic as syn
from support.console import console_script as _console
from support.inprocess import one_error_line


def _small_files() -> None:
    """In the child: no file may grow beyond 96 KiB (EFBIG, like a full disk for SQLite)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (96 * 1024, 96 * 1024))


def test_a_sqlite_journal_that_fails_mid_run_reports_the_run_as_failed(
    cli, example: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            *_console(),
            "run",
            str(example),
            "--output-root",
            str(out),
            "--batch-size",
            "1",
            "--json",
        ],
        env=cli.env,
        cwd=cli.cwd,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_small_files,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = one_error_line(proc.stderr)
    assert "journal" in line and "cannot record" in line
    doc = json.loads(proc.stdout)
    listed = json.loads(cli("runs", "list", "--json", "--output-root", str(out)).stdout)["runs"]
    assert len(listed) == 1 and listed[0]["status"] == "running"  # allocated, then failed
    assert doc["run_id"] == listed[0]["run_id"]
    assert doc["status"] == "failed" and doc["exit_code"] == 1
    assert "cannot record" in doc["error"]["message"]


# --- PostgreSQL: dead or silent servers --------------------------------------------


class BlackHole:
    """A loopback TCP proxy to `target` that can be told to stop forwarding (a hung server).

    While `silent`, it keeps every connection open and reads nothing more from either
    side, so the client waits on a socket that never answers; new connections are
    accepted and never answered either.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.silent = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.sockets.append(client)
            if self.silent.is_set():
                continue  # accepted, never answered
            upstream = socket.create_connection(self.target)
            self.sockets.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while not self.stopped:
            if self.silent.is_set():
                time.sleep(0.05)
                continue
            try:
                src.settimeout(0.05)
                data = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            try:
                dst.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self.stopped = True
        for s in [self.listener, *self.sockets]:
            with contextlib.suppress(OSError):
                s.close()


@contextlib.contextmanager
def proxied(url: str) -> Iterator[tuple[BlackHole, str]]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    hole = BlackHole((parts.hostname or "127.0.0.1", parts.port or 5432))
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{hole.port}"
    proxied_url = parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host)
    try:
        yield hole, proxied_url.geturl()
    finally:
        hole.close()


SLOW = """
import time
from runjournal.domain.modules import Module, Normalized

class Slow(Module):
    name = "test.slow"
    fingerprint = "test.slow/1"
    artifact_kind = "slow"
    schema = "test.slow/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        time.sleep(0.2)
        return 1

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged)
"""


def _slow_pipeline(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    for i in range(20):
        (tmp_path / "docs" / f"{i:02d}.md").write_text(f"document {i}\n")
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "slow.py").write_text(SLOW)
    path = tmp_path / "pipeline.toml"
    path.write_text(
        'name = "slow"\ninputs = ["docs/*.md"]\n'
        '[[steps]]\nid = "s"\nmodule = "plugins/slow.py:Slow"\n'
    )
    return path


def _start_run(
    cli, pipeline: Path, url: str, tmp_path: Path, timeout: int
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *_console(),
            "run",
            str(pipeline),
            "--journal",
            url,
            "--output-root",
            str(tmp_path / "out"),
            "--batch-size",
            "1",
            "--json",
        ],
        env={**cli.env, "RUNJOURNAL_JOURNAL_TIMEOUT": str(timeout)},
        cwd=cli.cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_until_running(url: str, proc: subprocess.Popen[str]) -> str:
    from runjournal.adapters.journal import open_journal

    deadline = time.monotonic() + 60
    with open_journal(url) as store:
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            runs = store.list_runs()
            if runs and len(list(store.events(runs[0].run_id))) > 8:
                return runs[0].run_id
            time.sleep(0.05)
    raise AssertionError("the run did not start")


@pytest.mark.parametrize("how", ["silent", "killed"])
def test_postgres_dying_mid_run_is_a_bounded_wait_and_one_line(
    cli, tmp_path: Path, how: str
) -> None:
    """The server stops answering (or its connections die and it refuses new ones)."""
    with syn.backend("postgres", tmp_path) as url, proxied(url) as (hole, via):
        pipeline = _slow_pipeline(tmp_path)
        proc = _start_run(cli, pipeline, via, tmp_path, timeout=4)
        run_id = _wait_until_running(url, proc)
        started = time.monotonic()
        if how == "silent":
            hole.silent.set()
        else:
            hole.silent.set()
            hole.stopped = True
            for s in [hole.listener, *hole.sockets]:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
        stdout, stderr = proc.communicate(timeout=120)
        waited = time.monotonic() - started
    assert proc.returncode == 1, stdout + stderr
    assert waited < 4 * 3 + 5, f"waited {waited:.1f} s with journal_timeout 4"
    line = one_error_line(stderr)
    assert "journal" in line
    if how == "silent":
        assert "did not answer within 4 s" in line and "journal_timeout" in line
    doc = json.loads(stdout)
    assert doc["run_id"] == run_id and doc["status"] == "failed"


def test_an_unanswering_postgres_port_at_open_is_a_bounded_wait(cli, tmp_path: Path) -> None:
    """Nothing needed: a loopback port that accepts and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                accepted.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        url = f"postgresql://u:secret-pw@127.0.0.1:{port}/db?connect_timeout=30"
        started = time.monotonic()
        proc = cli("runs", "list", "--journal", url, env={"RUNJOURNAL_JOURNAL_TIMEOUT": "3"})
        waited = time.monotonic() - started
    finally:
        stop.set()
        thread.join(timeout=5)
        for s in [listener, *accepted]:
            s.close()
    assert proc.returncode == 1, proc.stderr
    line = one_error_line(proc.stderr)
    assert "did not answer within 3 s" in line and "secret-pw" not in line
    assert waited < 3 + 8, f"waited {waited:.1f} s"


def test_journal_timeout_is_a_setting(cli, example: Path, tmp_path: Path) -> None:
    proc, doc = cli.json("config", "show", str(example), env={"RUNJOURNAL_JOURNAL_TIMEOUT": "7"})
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in doc["settings"]}
    assert rows["journal_timeout"]["value"] == 7 and rows["journal_timeout"]["origin"] == "env"
    proc = cli("config", "show", str(example), "--journal-timeout", "0")
    assert proc.returncode == 2 and "journal_timeout" in proc.stderr
