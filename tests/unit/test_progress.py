"""The progress line: only on a terminal, only after a moment, cleared at the end."""

from __future__ import annotations

import io

from runjournal.cli import progress as progress_mod
from runjournal.cli.progress import ProgressDisplay


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_silent_when_not_a_terminal():
    stream = io.StringIO()
    display = ProgressDisplay(enabled=True, stream=stream)
    display._start -= 10
    display("s", "lane", 1, 2)
    assert stream.getvalue() == ""


def test_silent_for_runs_shorter_than_a_moment(monkeypatch):
    stream = FakeTTY()
    display = ProgressDisplay(enabled=True, stream=stream)
    display("s", "lane", 1, 2)
    assert stream.getvalue() == ""


def test_shows_and_clears_after_a_moment(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")  # TERM=dumb gets plain lines instead
    stream = FakeTTY()
    display = ProgressDisplay(enabled=True, stream=stream)
    display._start -= progress_mod.DELAY_S + 1
    display("terms", "docs/a.md", 3, 7)
    assert "terms" in stream.getvalue() and "3/7" in stream.getvalue()
    display.finish()
    assert stream.getvalue().endswith("\r\x1b[2K")


def test_disabled_never_writes():
    stream = FakeTTY()
    display = ProgressDisplay(enabled=False, stream=stream)
    display._start -= 10
    display("s", "l", 1, 1)
    display.finish()
    assert stream.getvalue() == ""
