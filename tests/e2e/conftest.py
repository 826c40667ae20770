"""A headless Chromium driven over the DevTools protocol, for tests that open pages.

The Debian `chromium` package is started with `--remote-debugging-pipe`: the protocol
runs over two inherited file descriptors (fd 3 in, fd 4 out, NUL-separated JSON), so no
port is opened and no client library or driver is needed (docs/internals.md "Testing the
HTML report in a real browser"). Each page records what the browser reported: console
and log entries, exceptions, dialogs, and every network request it sent.

Chromium's own background requests (its updater and sign-in, enabled by the Debian
package's API keys) are sent to a loopback proxy that answers nothing, so nothing leaves
the machine; the page's requests are what the protocol reports for its target.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--no-default-browser-check",
    "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,Translate,MediaRouter",
    "--hide-scrollbars",
)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


class BlackHole:
    """A loopback HTTP proxy that records each request's first line and closes."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.requests: list[str] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    first = conn.recv(4096).split(b"\r\n", 1)[0]
                except OSError:
                    first = b""
                self.requests.append(first.decode("latin-1"))

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


class Page:
    """One tab: navigate, evaluate, and what the browser reported while it was open."""

    def __init__(self, browser: Chromium, session: str) -> None:
        self.browser = browser
        self.session = session
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.call(method, params, session=self.session)

    def evaluate(self, expression: str) -> Any:
        reply = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in reply:
            raise AssertionError(f"{expression!r} raised: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def open(self, url: str) -> None:
        self.call("Page.navigate", {"url": url})
        self.browser.wait_for(self, "Page.loadEventFired")

    def of(self, method: str) -> list[dict[str, Any]]:
        return [e["params"] for e in self.events if e.get("method") == method]

    @property
    def errors(self) -> list[str]:
        """Console errors, log errors (CSP violations among them), uncaught exceptions."""
        out = [
            f"console.{p['type']}: {p.get('args')}"
            for p in self.of("Runtime.consoleAPICalled")
            if p["type"] in ("error", "assert")
        ]
        out += [
            f"log {p['entry']['source']}: {p['entry']['text']}"
            for p in self.of("Log.entryAdded")
            if p["entry"]["level"] == "error"
        ]
        out += [f"exception: {p['exceptionDetails']}" for p in self.of("Runtime.exceptionThrown")]
        return out

    @property
    def requests(self) -> list[str]:
        return [p["request"]["url"] for p in self.of("Network.requestWillBeSent")]

    @property
    def dialogs(self) -> list[str]:
        return [p.get("message", "") for p in self.of("Page.javascriptDialogOpening")]

    def screenshot(self, path: Path, width: int = 1320) -> None:
        height = self.evaluate("document.documentElement.scrollHeight")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        shot = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        path.write_bytes(base64.b64decode(shot["data"]))


def _high(fds: tuple[int, int]) -> tuple[int, int]:
    """The pipe moved to descriptors above 9, so moving it to 3 and 4 never clobbers."""
    moved = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in fds)
    for fd in fds:
        os.close(fd)
    return moved[0], moved[1]


class Chromium:
    def __init__(self, binary: str, profile: Path, proxy: BlackHole) -> None:
        to_browser_r, self._to_browser = _high(os.pipe())
        self._from_browser, from_browser_w = _high(os.pipe())
        # The protocol pipe must be fds 3 and 4 in the browser: a trampoline moves it there.
        trampoline = (
            "import os, sys; r, w = int(sys.argv[1]), int(sys.argv[2]); "
            "os.dup2(r, 3); os.dup2(w, 4); os.close(r); os.close(w); "
            "os.execv(sys.argv[3], sys.argv[3:])"
        )
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                trampoline,
                str(to_browser_r),
                str(from_browser_w),
                binary,
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--proxy-server=http://127.0.0.1:{proxy.port}",
                "--proxy-bypass-list=<-loopback>",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            pass_fds=(to_browser_r, from_browser_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its renderers share our pid as their group: see close()
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._pages: dict[str, Page] = {}
        self._orphans: list[dict[str, Any]] = []

    def _send(self, message: dict[str, Any]) -> None:
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise ConnectionError("chromium closed the protocol pipe")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        page = self._pages.get(message.get("sessionId", ""))
        (page.events if page else self._orphans).append(message)

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session: str | None = None,
        timeout: float = 60,
    ) -> dict[str, Any]:
        self._next_id += 1
        request: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            request["sessionId"] = session
        self._send(request)
        deadline = time.monotonic() + timeout
        while True:
            message = self._receive(deadline)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._dispatch(message)

    def wait_for(self, page: Page, method: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        seen = len(page.events)
        while True:
            for event in page.events[seen:]:
                if event.get("method") == method:
                    return event["params"]
            seen = len(page.events)
            self._dispatch(self._receive(deadline))

    def new_page(self) -> Page:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        page = Page(self, session)
        self._pages[session] = page
        for domain in ("Runtime", "Log", "Network", "Page"):
            page.call(f"{domain}.enable")
        return page

    def close(self) -> None:
        """Ask the browser to quit; whatever is left of its process group is killed."""
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, TimeoutError, ConnectionError, AssertionError):
                self.call("Browser.close", timeout=10)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        os.close(self._to_browser)
        os.close(self._from_browser)


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Chromium]:
    binary = find_chromium()
    if binary is None:
        pytest.skip(
            "chromium not found on PATH: install the Debian packages chromium and "
            "chromium-driver (apt-get install -y chromium chromium-driver; .ci/run does)"
        )
    proxy = BlackHole()
    browser = Chromium(binary, tmp_path / "chromium-profile", proxy)
    try:
        yield browser
    finally:
        browser.close()
        proxy.close()
