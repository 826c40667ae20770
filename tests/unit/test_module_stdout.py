"""Module `print()` output: redacted, line-buffered per thread, sent to stderr."""

from __future__ import annotations

import io
import sys
import threading

import pytest
from runjournal.adapters import module_stdout
from runjournal.adapters.module_stdout import RedactingLineWriter, module_stdout_to_stderr

# Built at run time, never a literal.
TOKEN = "gh" + "p_" + "Vw3" * 12
TAIL = TOKEN[4:]
MARK = "[REDACTED:github_token]"


def test_complete_lines_are_redacted_and_partial_lines_wait() -> None:
    target = io.StringIO()
    writer = RedactingLineWriter(target)
    writer.write("first " + TOKEN[:10])
    assert target.getvalue() == ""  # half a token is not written on its own
    writer.flush()
    assert target.getvalue() == ""
    writer.write(TOKEN[10:] + " done\nsecond ")
    assert target.getvalue() == "first " + MARK + " done\n"
    writer.write("line\n\nthird")
    assert target.getvalue() == "first " + MARK + " done\nsecond line\n\n"
    writer.close()
    assert target.getvalue() == "first " + MARK + " done\nsecond line\n\nthird\n"
    assert TAIL not in target.getvalue()


def test_close_flushes_a_partial_secret_redacted() -> None:
    target = io.StringIO()
    writer = RedactingLineWriter(target)
    writer.write("no newline " + TOKEN)
    writer.close()
    writer.close()  # idempotent
    assert target.getvalue() == "no newline " + MARK + "\n"
    with pytest.raises(ValueError):
        writer.write("late")


def test_a_multiline_write_is_redacted_as_one_piece() -> None:
    begin, end = "-----BEGIN RSA PRIV" + "ATE KEY-----", "-----END RSA PRIV" + "ATE KEY-----"
    body = "MIIE" + "q" * 60
    target = io.StringIO()
    writer = RedactingLineWriter(target)
    writer.write(f"key:\n{begin}\n{body}\n{body}\n{end}\nafter\n")
    assert body not in target.getvalue()
    assert target.getvalue().endswith("after\n")


def test_an_endless_line_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module_stdout, "MAX_PENDING", 100)
    target = io.StringIO()
    writer = RedactingLineWriter(target)
    for _ in range(30):
        writer.write("abcd ")
    assert target.getvalue() == ("abcd " * 21).rstrip(" ") + " \n"
    writer.write(" ".join([TOKEN] * 30))  # one write over the bound: redacted as a whole
    assert TAIL not in target.getvalue() and MARK in target.getvalue()


def test_lines_are_buffered_per_thread() -> None:
    """Pieces from two threads, strictly interleaved, never splice a token across lines."""
    target = io.StringIO()
    writer = RedactingLineWriter(target)
    turns = [threading.Semaphore(1), threading.Semaphore(0)]
    pieces = ["{n} {i} ", TOKEN[:9], TOKEN[9:], "\n"]

    def speak(n: int) -> None:
        for i in range(50):
            for piece in pieces:
                assert turns[n].acquire(timeout=10)
                writer.write(piece.format(n=n, i=i))
                turns[1 - n].release()  # the other thread writes its next piece now

    threads = [threading.Thread(target=speak, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    writer.close()
    lines = target.getvalue().splitlines()
    assert len(lines) == 100
    assert TAIL not in target.getvalue() and TOKEN[:9] not in target.getvalue()
    for n in range(2):
        assert [line for line in lines if line.startswith(f"{n} ")] == [
            f"{n} {i} {MARK}" for i in range(50)
        ]


def test_print_inside_the_redirect_goes_to_stderr_redacted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with module_stdout_to_stderr() as writer:
        print("plugin says", TOKEN)
        print("and leaves", TOKEN, end="")
        assert sys.stdout is writer
    assert sys.stdout is not writer and writer.closed
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"plugin says {MARK}\nand leaves {MARK}\n"


def test_the_writer_is_a_text_stream() -> None:
    writer = RedactingLineWriter(io.StringIO())
    assert writer.writable() and not writer.isatty()
    assert writer.encoding == "utf-8"
    assert writer.write("") == 0 and writer.write("x\n") == 2
    with pytest.raises(TypeError):
        writer.write(b"bytes")  # type: ignore[arg-type]
