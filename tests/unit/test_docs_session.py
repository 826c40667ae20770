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


def test_the_progress_screens_show_the_whole_run_moving() -> None:
    import re

    text = (SESSION / "progress.txt").read_text(encoding="utf-8")
    screens = [s for s in text.split("---- ") if s.strip()]
    assert len(screens) == 3 and all("--jobs 4 (while it works)" in s for s in screens)
    pattern = r"stages (\d+)/(\d+) \(0 reused, (\d+) executed\) · [1-4] in flight · .* │ "
    found = [re.search(pattern, s) for s in screens]
    assert all(found), screens
    done = [int(m.group(1)) for m in found if m]
    assert done == sorted(done) and done[0] < done[-1]
    assert "capture-pane" in (SESSION / "record.sh").read_text(encoding="utf-8")
    assert "(session/progress.txt)" in (DOCS / "operations.md").read_text(encoding="utf-8")
