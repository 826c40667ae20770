"""docs/session/: the recorded tmux session shows what operations.md says it shows."""

from __future__ import annotations

from support.paths import DOCS

SESSION = DOCS / "session"


def test_the_session_shows_progress_colour_hint_explain_and_diff() -> None:
    plain = (SESSION / "tmux-session.txt").read_text(encoding="utf-8")
    ansi = (SESSION / "tmux-session.ansi").read_text(encoding="utf-8")
    screens = [s for s in plain.split("---- ") if s.strip()]
    assert len(screens) == 6
    assert " · chunk " in screens[0]  # the progress line, captured while the run worked
    assert "  main:      " in screens[1] and "  latest:    " in screens[1]
    assert "runjournal: hint: " in screens[2]
    assert "decisions match:" in screens[4]
    assert screens[5].splitlines()[2].startswith("runs ") and "outputs: " in screens[5]
    assert "\x1b[" not in plain
    assert "\x1b[32m" in ansi and "\x1b[33m" in ansi  # reuse green, invalid yellow
    script = (SESSION / "record.sh").read_text(encoding="utf-8")
    assert "new-session -d" in script and "-x 120 -y 40" in script
    assert "capture-pane -p -e" in script
