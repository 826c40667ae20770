"""`runjournal report RUN [-o FILE]` and `run --report`, in-process through click's CliRunner.

What is checked: where the page goes, the same bytes from every way of building it
(live at the end of `run`, `report`, `projections rebuild`), exit codes and one-line
errors, a failed write of `report.html` (exit 3, journaled), and `report.html` being
reserved for the CLI.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from runjournal.adapters.fsroot import FsIOError
from runjournal.cli.compose import Factories
from runjournal.cli.main import cli
from runjournal.projections.html_report import HtmlReportProjection
from support.faulty_fs import Fault, faulty_factories
from support.paths import EXAMPLE

FAILING_PLUGIN = """
from runjournal.domain.modules import Module, Normalized

class Boom(Module):
    name = "test.boom"
    fingerprint = "test.boom/1"
    artifact_kind = "boom"
    schema = "test.boom/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        raise ValueError("boom in " + ctx.lane)

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged)
"""


@pytest.fixture
def base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated environment and a private copy of the glossary example."""
    home = tmp_path / "home"
    home.mkdir()
    for key in list(os.environ):
        if key.startswith("RUNJOURNAL_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    shutil.copytree(EXAMPLE, tmp_path / "glossary", ignore=shutil.ignore_patterns("runs"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(
    monkeypatch: pytest.MonkeyPatch, *args: str, factories: Factories | None = None
) -> Result:
    monkeypatch.setattr(sys, "argv", ["runjournal", *args])
    return CliRunner().invoke(cli, list(args), obj=factories, catch_exceptions=False)


def roots(base: Path) -> list[str]:
    return ["--output-root", str(base / "out"), "--cache-root", str(base / "cache")]


def out(base: Path) -> list[str]:
    return ["--output-root", str(base / "out")]


def run_json(
    monkeypatch: pytest.MonkeyPatch, base: Path, *extra: str, factories: Factories | None = None
) -> tuple[Result, dict]:
    result = invoke(
        monkeypatch,
        "run",
        "glossary/pipeline.toml",
        *roots(base),
        "--no-progress",
        "--json",
        *extra,
        factories=factories,
    )
    return result, json.loads(result.stdout)


def error_lines(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


class TestRunReport:
    def test_run_report_writes_the_page_every_other_way_builds_the_same(
        self, base: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        result, doc = run_json(monkeypatch, base, "--report")
        assert result.exit_code == 0, result.stderr
        page = Path(doc["report_html"])
        assert page == Path(doc["run_dir"]) / "report.html"
        live = page.read_bytes()
        assert live.startswith(b"<!DOCTYPE html>") and doc["run_id"].encode() in live
        assert "report.html" not in {o["name"] for o in doc["outputs"]}
        # report RUN -o FILE, report RUN (into the run dir), projections rebuild: same bytes
        shown = invoke(monkeypatch, "report", "latest", *out(base), "-o", "copy.html", "--json")
        assert shown.exit_code == 0, shown.stderr
        written = json.loads(shown.stdout)
        assert written["file"] == str(base / "copy.html") and written["bytes"] == len(live)
        assert (base / "copy.html").read_bytes() == live
        assert invoke(monkeypatch, "report", doc["run_id"], *out(base)).exit_code == 0
        assert page.read_bytes() == live
        rebuilt = invoke(monkeypatch, "projections", "rebuild", "html_report", *out(base))
        assert rebuilt.exit_code == 0, rebuilt.stderr
        version = HtmlReportProjection.VERSION
        assert f"html_report    v{version}: wrote 1" in rebuilt.stdout
        assert page.read_bytes() == live

    def test_without_report_no_page_and_the_document_says_so(
        self, base: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        result, doc = run_json(monkeypatch, base)
        assert result.exit_code == 0 and doc["report_html"] is None
        assert not (Path(doc["run_dir"]) / "report.html").exists()
        text = invoke(
            monkeypatch, "run", "glossary/pipeline.toml", *roots(base), "--no-progress", "--report"
        )
        assert text.exit_code == 0
        line = next(x for x in text.stdout.splitlines() if x.startswith("  report:"))
        assert line.endswith("/report.html") and Path(line.split()[-1]).is_file()

    def test_a_failed_run_gets_its_page_too(
        self, base: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        plugins = base / "glossary" / "plugins"
        (plugins / "boom.py").write_text(FAILING_PLUGIN)
        pipeline = base / "glossary" / "pipeline.toml"
        pipeline.write_text(
            pipeline.read_text() + '\n[[steps]]\nid = "boom"\nmodule = "plugins/boom.py:Boom"\n'
        )
        result, doc = run_json(monkeypatch, base, "--report")
        assert result.exit_code == 1 and doc["status"] == "failed"
        page = Path(doc["report_html"]).read_text()
        assert "ValueError: boom in docs/01-overview.md" in page
        assert '<meta name="runjournal-status" content="failed">' in page

    def test_a_page_that_cannot_be_written_exits_3_and_is_journaled(
        self, base: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        failing = Fault(
            "write_bytes",
            lambda root, name: name == "report.html",
            lambda name: FsIOError(name, errno.EIO, "input/output error (injected)"),
        )
        result, doc = run_json(monkeypatch, base, "--report", factories=faulty_factories(failing))
        assert result.exit_code == 3
        assert doc["status"] == "succeeded" and doc["report_html"] is None
        assert [e for e in doc["persistence_errors"] if "could not write report_html" in e]
        assert error_lines(result) == [
            "runjournal: error: not persisted: could not write report_html: "
            "'report.html': input/output error (injected)"
        ]
        shown = invoke(monkeypatch, "journal", "show", "latest", "--json", *out(base))
        last = json.loads(shown.stdout)["events"][-1]
        assert last["type"] == "TerminalPersistenceFailed"
        assert last["data"]["target"] == "report_html"

    def test_a_module_may_not_name_an_output_report_html(
        self, base: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        pipeline = base / "glossary" / "pipeline.toml"
        pipeline.write_text(pipeline.read_text().replace('"glossary.md"', '"report.html"'))
        result, doc = run_json(monkeypatch, base)
        assert result.exit_code == 1 and doc["status"] == "failed"
        assert doc["error"]["message"] == ("refused output name 'report.html': reserved")


class TestReportCommand:
    @pytest.fixture
    def run_id(self, base: Path, monkeypatch: pytest.MonkeyPatch) -> str:
        result, doc = run_json(monkeypatch, base)
        assert result.exit_code == 0, result.stderr
        return str(doc["run_id"])

    def test_into_the_run_directory_by_default(
        self, base: Path, run_id: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        result = invoke(monkeypatch, "report", run_id[:12], *out(base))
        assert result.exit_code == 0, result.stderr
        page = base / "out" / run_id / "report.html"
        assert result.stdout == (
            f"report of run {run_id} (succeeded): {page} ({page.stat().st_size} bytes)\n"
        )
        assert oct(page.stat().st_mode & 0o777) == "0o600"

    def test_to_a_file_never_over_one_without_force(
        self, base: Path, run_id: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        target = base / "page.html"
        target.write_text("mine")
        refused = invoke(monkeypatch, "report", "latest", *out(base), "-o", str(target))
        assert refused.exit_code == 2
        assert error_lines(refused) == [
            f"runjournal: error: {target} exists (use --force to replace it)"
        ]
        assert target.read_text() == "mine"
        forced = invoke(monkeypatch, "report", "latest", *out(base), "-o", str(target), "--force")
        assert forced.exit_code == 0 and target.read_bytes().startswith(b"<!DOCTYPE html>")

    def test_to_stdout(self, base: Path, run_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
        result = invoke(monkeypatch, "report", "latest", *out(base), "-o", "-")
        assert result.exit_code == 0
        assert result.stdout.startswith("<!DOCTYPE html>") and result.stdout.endswith("</html>\n")
        assert invoke(monkeypatch, "report", "latest", *out(base), "-o", "f.html").exit_code == 0
        assert result.stdout_bytes == (base / "f.html").read_bytes()
        both = invoke(monkeypatch, "report", "latest", *out(base), "-o", "-", "--json")
        assert both.exit_code == 2 and json.loads(both.stdout)["exit_code"] == 2

    @pytest.mark.parametrize(
        ("args", "code", "message"),
        [
            (("nope",), 1, "no run matches 'nope'"),
            (("latest", "-o", "missing/dir/page.html"), 2, "no such directory"),
            (("latest", "-o", "."), 2, "names a directory, not a file"),
        ],
    )
    def test_errors_are_one_line_with_their_exit_code(
        self,
        base: Path,
        run_id: str,
        monkeypatch: pytest.MonkeyPatch,
        args: tuple[str, ...],
        code: int,
        message: str,
    ) -> None:
        result = invoke(monkeypatch, "report", *args, *out(base), "--json")
        assert result.exit_code == code
        (line,) = error_lines(result)
        assert line.startswith("runjournal: error: ") and message in line
        assert json.loads(result.stdout)["exit_code"] == code

    def test_a_run_without_its_directory_needs_o(
        self, base: Path, run_id: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        shutil.rmtree(base / "out" / run_id)
        result = invoke(monkeypatch, "report", "latest", *out(base))
        assert result.exit_code == 2
        assert error_lines(result) == [
            f"runjournal: error: run {run_id} has no run directory here "
            f"({base / 'out' / run_id}); use -o FILE"
        ]
        assert invoke(monkeypatch, "report", "latest", *out(base), "-o", "p.html").exit_code == 0
