"""`runjournal report RUN --watch`: the HTML report kept current while a run goes
(docs/operations.md "The HTML run report").

The run's module waits for a gate file, so the test sees the run going, then lets it
finish: the page reloads itself while the run goes, shows more events after, and its
last version is byte for byte the page `report` writes of the ended run. In headless
Chromium (when installed) the open page follows by itself, through its meta refresh.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support.console import CLI, console_script

PLUGIN = """
import os
import time

from runjournal.domain.modules import Module, Normalized


class Gated(Module):
    fingerprint = "test.gated/1"
    artifact_kind = "count"
    schema = "test.count/v1"
    chunk_type = int
    merged_type = int
    artifact_type = dict[str, int]

    def extract(self, chunk, ctx):
        with open(os.environ["PROBE_LOG"], "a", encoding="utf-8") as fh:
            fh.write(f"{ctx.lane}\\n")
        while not os.path.exists(os.environ["GATE"]):
            time.sleep(0.02)
        return len(chunk.text.split())

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized({"words": merged})
"""

PIPELINE = """
name = "watched"
inputs = ["docs/*.md"]

[chunking]
strategy = "paragraphs"
max_chars = 40

[[steps]]
id = "count"
module = "plugins/gated.py:Gated"
scope = "document"
"""

META = re.compile(rb'<meta name="runjournal-(status|events)" content="([^"]*)">')


def _meta(data: bytes) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in META.findall(data)}


def _wait(predicate, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"waited for {what}"
        time.sleep(0.05)


@pytest.fixture
def project(tmp_path: Path) -> dict:
    root = tmp_path / "p"
    (root / "plugins").mkdir(parents=True)
    (root / "plugins" / "gated.py").write_text(PLUGIN)
    (root / "docs").mkdir()
    for i in range(6):
        (root / "docs" / f"d{i}.md").write_text(f"Document {i} opens.\n\nDocument {i} ends.\n")
    (root / "pipeline.toml").write_text(PIPELINE)
    return {
        "root": root,
        "where": ["--output-root", str(root / "out")],
        "env": {"PROBE_LOG": str(root / "calls.log"), "GATE": str(root / "gate")},
    }


def test_watch_follows_a_run_to_its_end(cli: CLI, project: dict, request) -> None:
    root, where, env = project["root"], project["where"], project["env"]
    page = root / "live.html"
    full_env = {**cli.env, **env}
    run_argv = [*console_script(), "run", str(root / "pipeline.toml"), *where, "--cache-root",
                str(root / "cache"), "--jobs", "4", "--no-progress"]  # fmt: skip
    run = subprocess.Popen(run_argv, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watch = None
    try:
        _wait(lambda: Path(env["PROBE_LOG"]).exists(), "the first extract")
        watch_argv = [*console_script(), "report", "latest", *where, "-o", str(page),
                      "--watch", "--interval", "0.2", "--json"]  # fmt: skip
        watch = subprocess.Popen(
            watch_argv, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        _wait(page.exists, "the first page")
        first = page.read_bytes()
        assert _meta(first)["status"] == "running"
        assert b'<meta http-equiv="refresh" content="1">' in first

        browser = _browser(request)
        tab = None
        if browser is not None:
            tab = browser.new_page()
            tab.open(page.as_uri())
            assert _status_in(tab) == "running"

        Path(env["GATE"]).touch()  # let the run finish
        _, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
        _, err = watch.communicate(timeout=120)
        assert watch.returncode == 0, err  # it stopped by itself once the run had ended
    finally:
        for proc in (run, watch):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()

    last = page.read_bytes()
    assert _meta(last)["status"] == "succeeded"
    assert int(_meta(last)["events"]) > int(_meta(first)["events"])
    assert b'http-equiv="refresh"' not in last
    shown = cli("report", "latest", *where, "-o", "-")
    assert shown.returncode == 0, shown.stderr
    assert last == shown.stdout.encode()  # the last version is `report`'s page

    if tab is not None:  # the open tab followed by itself, through its refresh
        _wait(lambda: _status_in(tab) == "succeeded", "the browser's reload")
        assert tab.errors == []


def _browser(request):
    """The `chromium` fixture when the browser is installed, else None (the file checks
    above still run)."""
    if not any(shutil.which(name) for name in ("chromium", "chromium-browser")):
        return None
    return request.getfixturevalue("chromium")


def _status_in(tab) -> str | None:
    try:
        return tab.evaluate(
            "document.querySelector('meta[name=\"runjournal-status\"]')?.content ?? null"
        )
    except AssertionError:  # the page was reloading
        return None


def test_watch_refuses_stdout_and_a_bad_interval(cli: CLI, project: dict) -> None:
    where = project["where"]
    for args, text in (
        (["-o", "-"], "cannot be combined with -o -"),
        (["--interval", "0"], "between 0.1 and 3600"),
    ):
        proc = cli("report", "latest", *where, "--watch", *args)
        assert proc.returncode == 2, proc.stderr
        assert text in proc.stderr and "Traceback" not in proc.stderr
    assert not os.path.exists(project["root"] / "out")


def test_ctrl_c_stops_watching_with_one_line_and_130(cli: CLI, project: dict) -> None:
    root, where, env = project["root"], project["where"], project["env"]
    page = root / "live.html"
    full_env = {**cli.env, **env}
    run_argv = [*console_script(), "run", str(root / "pipeline.toml"), *where, "--cache-root",
                str(root / "cache"), "--no-progress"]  # fmt: skip
    run = subprocess.Popen(run_argv, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watch = None
    try:
        _wait(lambda: Path(env["PROBE_LOG"]).exists(), "the first extract")
        watch_argv = [*console_script(), "report", "latest", *where, "-o", str(page),
                      "--watch", "--interval", "0.2"]  # fmt: skip
        watch = subprocess.Popen(
            watch_argv, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        _wait(page.exists, "the first page")
        watch.send_signal(signal.SIGINT)
        _, err = watch.communicate(timeout=120)
        assert watch.returncode == 130, err
        assert err.strip().splitlines() == [
            next(line for line in err.splitlines() if line.startswith("runjournal: error: "))
        ]
        assert "stopped watching run" in err and "Traceback" not in err
        assert _meta(page.read_bytes())["status"] == "running"  # left as it was
    finally:
        Path(env["GATE"]).touch()  # the run finishes either way
        if watch is not None and watch.poll() is None:
            watch.kill()
            watch.communicate()
        try:
            run.communicate(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
                run.communicate()
    assert run.returncode == 0


def test_ctrl_c_just_after_the_first_page_names_the_run(
    project: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the test above once lost: Ctrl-C arriving after the first page is written
    and before `report` remembered which run "latest" was said "stopped watching latest".
    Here the interrupt comes right after the write, every time."""
    from runjournal.cli import report_cmds
    from support.inprocess import InProcess

    root, where, env = project["root"], project["where"], project["env"]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    Path(env["GATE"]).touch()  # the run does not wait
    invoke = InProcess(tmp_path / "home")
    ran = invoke("run", str(root / "pipeline.toml"), *where, "--cache-root",
                 str(root / "cache"), "--no-progress", "--json")  # fmt: skip
    assert ran.exit_code == 0, ran.output
    run_id = re.search(r'"run_id": ?"([^"]+)"', ran.stdout).group(1)  # type: ignore[union-attr]
    written = report_cmds._into_file

    def then_ctrl_c(*args: object, **kwargs: object) -> str:
        written(*args, **kwargs)  # type: ignore[arg-type]
        raise KeyboardInterrupt

    monkeypatch.setattr(report_cmds, "_into_file", then_ctrl_c)
    page = root / "live.html"
    result = invoke("report", "latest", *where, "-o", str(page), "--watch", "--interval", "0.2")
    assert result.exit_code == 130, result.output
    assert page.exists()
    assert f"stopped watching run {run_id} " in result.stderr, result.stderr
