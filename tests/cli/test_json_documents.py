"""Every command's `--json` document, in-process through CliRunner: shape and keys.

The expected top-level keys come from docs/operations.md "JSON documents", so the table
there and the code cannot drift apart. Each command runs once where it succeeds and once
per way it fails; every time stdout must be exactly one JSON document, and a failure's
document must be the error document whose message is the one stderr line.
"""

from __future__ import annotations

import http.server
import json
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import Result
from runjournal.cli.main import cli as cli_group
from runjournal.domain.reasons import ReasonCode
from support.inprocess import InProcess
from support.paths import DOCS, EXAMPLE

RUN_ID = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}")
ERROR_KEYS = {"step", "lane", "reason_code", "message"}

BOOM_PLUGIN = """
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
        raise RuntimeError("the boom module always fails")

    def merge(self, parts, ctx):
        return 0

    def normalize(self, merged, ctx):
        return Normalized(0)
"""

FAILING_PIPELINE = """
name = "boom"
inputs = ["docs/*.md"]

[[steps]]
id = "boom"
module = "plugins/boom.py:Boom"
"""

UNLOADABLE_PIPELINE = """
name = "unloadable"
inputs = ["docs/*.md"]

[[steps]]
id = "nothing"
module = "plugins/does_not_exist.py:Nothing"
"""


def documented_keys() -> dict[str, set[str]]:
    text = (DOCS / "operations.md").read_text()
    block = text.split("<!-- json-documents:begin -->")[1].split("<!-- json-documents:end -->")[0]
    table: dict[str, set[str]] = {}
    for line in block.strip().splitlines()[2:]:
        name, keys = (cell.strip() for cell in line.strip().strip("|").split("|"))
        table[name.strip("`")] = set(re.findall(r"`([a-z0-9_]+)`", keys))
    return table


DOCUMENTED = documented_keys()


def leaf_commands(group: click.Group = cli_group, prefix: tuple[str, ...] = ()) -> list[str]:
    names = []
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            names += leaf_commands(command, (*prefix, name))
        else:
            names.append(" ".join((*prefix, name)))
    return names


@dataclass
class World:
    """A workspace with real runs: one succeeded, one failed at a stage, and an export."""

    tmp: Path
    invoke: InProcess
    pipeline: str
    failing: str
    unloadable: str
    out: str
    cache: str
    ok_run: str
    failed_run: str
    export: str
    sink: str  # a loopback HTTP server that takes any POST (OTLP, OpenLineage)

    def where(self) -> list[str]:
        return ["--output-root", self.out]

    def run_args(self, pipeline: str, *extra: str) -> list[str]:
        return ["run", pipeline, "--no-progress", *self.where(), "--cache-root", self.cache, *extra]

    def published(self) -> str:
        """The ok run's checkpoint in a file, as `journal checkpoint` prints it."""
        path = self.tmp / "published.note"
        if not path.exists():
            result = self.invoke("journal", "checkpoint", self.ok_run, *self.where())
            assert result.exit_code == 0, result.output
            path.write_text(result.stdout)
        return str(path)

    def fresh(self, name: str) -> str:
        """A path in this world that does not exist yet."""
        path = self.tmp / name
        n = 0
        while path.exists():
            n += 1
            path = self.tmp / f"{name}-{n}"
        return str(path)


class _Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("json-documents")
    project = tmp / "glossary"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    (project / "plugins" / "boom.py").write_text(BOOM_PLUGIN)
    (project / "boom.toml").write_text(FAILING_PIPELINE)
    (project / "unloadable.toml").write_text(UNLOADABLE_PIPELINE)
    invoke = InProcess(tmp / "home")
    out, cache = str(tmp / "out"), str(tmp / "cache")
    roots = ["--output-root", out, "--cache-root", cache, "--no-progress", "--json"]
    ok = invoke("run", str(project / "pipeline.toml"), *roots)
    assert ok.exit_code == 0, ok.output
    failed = invoke("run", str(project / "boom.toml"), *roots)
    assert failed.exit_code == 1, failed.output
    export = str(tmp / "ok.rjx")
    ok_id = json.loads(ok.stdout)["run_id"]
    exported = invoke("journal", "export", ok_id, "-o", export, "--output-root", out)
    assert exported.exit_code == 0, exported.output
    sink = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    thread = threading.Thread(target=sink.serve_forever, daemon=True)
    thread.start()
    yield World(
        sink=f"http://127.0.0.1:{sink.server_address[1]}",
        tmp=tmp,
        invoke=invoke,
        pipeline=str(project / "pipeline.toml"),
        failing=str(project / "boom.toml"),
        unloadable=str(project / "unloadable.toml"),
        out=out,
        cache=cache,
        ok_run=ok_id,
        failed_run=json.loads(failed.stdout)["run_id"],
        export=export,
    )
    sink.shutdown()
    sink.server_close()
    thread.join()


def one_document(result: Result) -> dict[str, Any]:
    """stdout is exactly one JSON object (json.loads refuses anything after it)."""
    assert result.stdout.strip(), result.output
    doc = json.loads(result.stdout)
    assert isinstance(doc, dict)
    return doc


def keys_of(items: list[dict[str, Any]]) -> set[str]:
    assert items, "expected at least one item"
    shapes = {frozenset(item) for item in items}
    assert len(shapes) == 1, shapes
    return set(shapes.pop())


# --- success: command, argv, expected exit, and a check of the nested shape -----------


def check_run_succeeded(doc: dict[str, Any], w: World) -> None:
    assert RUN_ID.fullmatch(doc["run_id"]) and doc["status"] == "succeeded"
    assert doc["error"] is None and doc["failure_report"] is None and doc["error_log"] is None
    assert doc["persistence_errors"] == [] and doc["debug_bundle"] is None
    assert doc["report_html"] is None  # only with --report
    for key in ("run_dir", "manifest", "report"):
        assert Path(doc[key]).is_absolute() and Path(doc[key]).exists(), key
    assert keys_of(doc["outputs"]) == {"name", "path", "sha256", "size"}
    assert all(Path(o["path"]).is_absolute() for o in doc["outputs"])
    assert set(doc["decisions"]) <= {c.value for c in ReasonCode}
    assert set(doc["plans"]) <= {"reused", "computed", "published", "corrupt", "bypassed"}
    assert set(doc["roots"]) == {"output", "cache", "debug"}
    assert set(doc["recompute"]) == {"selected", "forced"}
    assert isinstance(doc["module_calls"], int) and isinstance(doc["journal"], str)
    if doc["warnings"]:
        assert keys_of(doc["warnings"]) == {"step", "lane", "message"}
    assert doc["main_outputs"] == [str(Path(doc["run_dir"]) / "glossary.md")]
    assert Path(doc["latest"]).is_symlink() and isinstance(doc["hints"], list)


def check_run_resumed(doc: dict[str, Any], w: World) -> None:
    check_run_succeeded(doc, w)
    assert set(doc["decisions"]) == {"reused"} and doc["module_calls"] == 0


def check_run_with_report(doc: dict[str, Any], w: World) -> None:
    assert doc["status"] == "succeeded"
    assert doc["report_html"] == str(Path(doc["run_dir"]) / "report.html")
    assert Path(doc["report_html"]).read_bytes().startswith(b"<!DOCTYPE html>")


def check_run_failed(doc: dict[str, Any], w: World) -> None:
    assert doc["status"] == "failed" and doc["report"] is None and doc["outputs"] == []
    assert Path(doc["failure_report"]).exists() and Path(doc["error_log"]).exists()
    assert set(doc["error"]) == ERROR_KEYS
    assert doc["error"]["step"] == "boom" and doc["error"]["reason_code"] == "stage_failed"
    assert doc["decisions"]["stage_failed"] >= 1


def check_check(doc: dict[str, Any], w: World) -> None:
    assert doc["pipeline"] == "glossary" and doc["probed"] == []
    assert keys_of(doc["steps"]) == {"id", "module", "profile"}


def check_plan(doc: dict[str, Any], w: World) -> None:
    assert doc["pipeline"] == "glossary" and doc["resume"] is True and doc["stopped"] is None
    assert set(doc["decisions"]) == {"reused"}
    assert sum(doc["decisions"].values()) == len(doc["stages"])
    assert keys_of(doc["stages"]) == {
        "step",
        "lane",
        "stage",
        "chunk",
        "code",
        "possible",
        "waits_on",
    }
    assert set(doc["estimate"]) == {"module_calls", "llm"}
    assert doc["estimate"]["module_calls"] == {"certain": 0, "pending": 0}
    llm = doc["estimate"]["llm"]
    assert set(llm) == {"executed", "pending", "saved", "online", "batch"}
    assert set(llm["online"]) == set(llm["batch"]) == {"executed", "pending"}
    assert set(doc["roots"]) == {"output", "cache", "debug"}
    assert set(doc["recompute"]) == {"selected", "forced"}


def check_runs_list(doc: dict[str, Any], w: World) -> None:
    runs = doc["runs"]
    assert keys_of(runs) == {"run_id", "pipeline", "status", "started", "ended", "run_dir"}
    assert {w.ok_run, w.failed_run} <= {r["run_id"] for r in runs}


def check_runs_show(doc: dict[str, Any], w: World) -> None:
    assert doc["run_id"] == w.ok_run and doc["status"] == "succeeded"
    assert doc["workspace_schema_version"] == 3
    assert set(doc["validation"]) == {"status", "outputs_checked", "refused"}
    assert doc["validation"]["status"] == "passed"
    assert set(doc["projection"]) == {"name", "version"}
    assert keys_of(doc["outputs"]) == {"name", "sha256", "size"}


def check_runs_diff(doc: dict[str, Any], w: World) -> None:
    assert (doc["a"]["run_id"], doc["b"]["run_id"]) == (w.ok_run, w.failed_run)
    assert doc["a"]["pipeline"] == "glossary" and doc["b"]["pipeline"] == "boom"
    for files in ("inputs", "references", "outputs"):
        assert set(doc[files]) == {"added", "removed", "changed", "unchanged"}
    assert doc["outputs"]["added"] == [] and doc["outputs"]["removed"]  # a failed run has none
    assert keys_of(doc["steps"]) == {
        "step",
        "only_in",
        "components",
        "fingerprint",
        "source_changed",
        "lanes_added",
        "lanes_removed",
    }
    assert keys_of(doc["decisions"]) == {"step", "code", "a", "b"}


def check_journal_show(doc: dict[str, Any], w: World) -> None:
    assert doc["run_id"] == w.ok_run
    assert keys_of(doc["events"]) == {"type", "version", "class_version", "timestamp", "data"}
    assert doc["events"][0]["type"] == "RunAllocated"
    assert [e["version"] for e in doc["events"]] == list(range(1, len(doc["events"]) + 1))


def check_otel(doc: dict[str, Any], w: World) -> None:
    assert doc["run_id"] == w.ok_run and re.fullmatch(r"[0-9a-f]{32}", doc["trace_id"])
    assert doc["spans"] > 1 and doc["llm_attempts"] == 0
    assert doc["endpoint"] == w.sink + "/v1/traces"


def check_lineage(doc: dict[str, Any], w: World) -> None:
    assert doc["run_id"] == w.ok_run and doc["to"] == "stdout"
    assert doc["run_states"] == ["START", "RUNNING", "COMPLETE"]
    assert [e["eventType"] for e in doc["events"]][-1] == "COMPLETE"


def check_audit(doc: dict[str, Any], w: World) -> None:
    assert doc["verdict"] == "ok" and doc["differences"] == doc["violations"] == []
    assert isinstance(doc["events"], int) and isinstance(doc["decisions"], int)


def check_checkpoint(doc: dict[str, Any], w: World) -> None:
    assert doc["run_id"] == w.ok_run and doc["note"].startswith(f"runjournal/run/{w.ok_run}\n")
    assert doc["size"] > 0 and doc["key"] is None  # no key was made before the run
    assert len(doc["root"]) == 64


def check_verify(doc: dict[str, Any], w: World) -> None:
    assert doc["run_id"] == w.ok_run and doc["verdict"] == "consistent" and doc["problems"] == []
    assert 0 < doc["checkpoint_size"] <= doc["tree_size"]


def check_keys(doc: dict[str, Any], w: World) -> None:
    assert doc["name"] == "json-test" and doc["public_key"].startswith("json-test+")
    assert Path(doc["key_file"]).stat().st_mode & 0o777 == 0o600


def check_export(doc: dict[str, Any], w: World) -> None:
    assert doc["run_id"] == w.ok_run and Path(doc["file"]).exists()
    assert len(doc["sha256"]) == 64 and doc["bytes"] == Path(doc["file"]).stat().st_size


def check_report(doc: dict[str, Any], w: World) -> None:
    assert doc["run_id"] == w.ok_run and doc["status"] == "succeeded"
    assert Path(doc["file"]).read_bytes().startswith(b"<!DOCTYPE html>")
    assert len(doc["sha256"]) == 64 and doc["bytes"] == Path(doc["file"]).stat().st_size


def check_import(doc: dict[str, Any], w: World) -> None:
    assert doc["run_id"] == w.ok_run and doc["status"] in {"imported", "already_imported"}
    assert isinstance(doc["events"], int) and isinstance(doc["resumed_after"], int)


def check_projection_status(doc: dict[str, Any], w: World) -> None:
    assert keys_of(doc["projections"]) == {
        "name",
        "scope",
        "version",
        "materialised",
        "views",
        "stale",
        "stale_views",
        "reasons",
        "storage",
    }
    assert {"manifest", "reasons", "runs_index"} <= {p["name"] for p in doc["projections"]}


def check_projection_rebuild(doc: dict[str, Any], w: World) -> None:
    assert keys_of(doc["projections"]) == {
        "name",
        "version",
        "written",
        "skipped",
        "replaced",
        "failures",
        "storage",
    }


def check_explain(doc: dict[str, Any], w: World) -> None:
    assert doc["run_id"] == w.ok_run and doc["status"] == "succeeded" and doc["error"] is None
    assert keys_of(doc["steps"]) == {"step", "lanes"}
    lane = doc["steps"][0]["lanes"][0]
    assert set(lane) == {"lane", "stages", "decisions"}
    assert keys_of(lane["decisions"]) == {
        "stage",
        "chunk",
        "code",
        "category",
        "detail",
        "differs",
        "outcome",
    }
    assert doc["not_started"] == {} and "not_started" not in doc["outcomes"]


def check_explain_failed(doc: dict[str, Any], w: World) -> None:
    assert doc["status"] == "failed" and set(doc["error"]) == ERROR_KEYS
    assert doc["failures"]


def check_reasons(doc: dict[str, Any], w: World) -> None:
    assert keys_of(doc["reasons"]) == {"code", "category", "description"}
    assert [r["code"] for r in doc["reasons"]] == [c.value for c in ReasonCode]


def check_config_show(doc: dict[str, Any], w: World) -> None:
    assert doc["pipeline"] == w.pipeline
    assert keys_of(doc["settings"]) == {"name", "value", "origin", "source"}
    assert {s["origin"] for s in doc["settings"]} <= {
        "flag",
        "env",
        "pipeline",
        "user-config",
        "default",
    }


def check_recover(doc: dict[str, Any], w: World) -> None:
    assert doc["dry_run"] is True and doc["abandoned"] == []
    assert isinstance(doc["temp_files"], dict)


def check_gc_keeps_all(doc: dict[str, Any], w: World) -> None:
    assert doc["dry_run"] is True and doc["runs"] == [] and doc["removed"] == []


def check_gc_dry_run(doc: dict[str, Any], w: World) -> None:
    assert doc["dry_run"] is True and {w.ok_run, w.failed_run} <= set(doc["runs"])
    assert doc["removed"] and all(Path(path).exists() for path in doc["removed"])  # dry run


def check_init(doc: dict[str, Any], w: World) -> None:
    assert Path(doc["pipeline"]).exists() and doc["files"]


Argv = Callable[[World], list[str]]

SUCCESS: list[tuple[str, str, Argv, int, Callable[[dict[str, Any], World], None]]] = [
    ("run", "run", lambda w: w.run_args(w.pipeline), 0, check_run_succeeded),
    ("run --resume", "run", lambda w: w.run_args(w.pipeline, "--resume"), 0, check_run_resumed),
    (
        "run --report",
        "run",
        lambda w: w.run_args(w.pipeline, "--resume", "--report"),
        0,
        check_run_with_report,
    ),
    ("run (stage failure)", "run", lambda w: w.run_args(w.failing), 1, check_run_failed),
    (
        "plan",
        "plan",
        lambda w: ["plan", w.pipeline, *w.where(), "--cache-root", w.cache, "--resume"],
        0,
        check_plan,
    ),
    ("check", "check", lambda w: ["check", w.pipeline], 0, check_check),
    ("runs list", "runs list", lambda w: ["runs", "list", *w.where()], 0, check_runs_list),
    (
        "runs show",
        "runs show",
        lambda w: ["runs", "show", w.ok_run, *w.where()],
        0,
        check_runs_show,
    ),
    (
        "runs diff",
        "runs diff",
        lambda w: ["runs", "diff", w.ok_run, w.failed_run, *w.where()],
        0,
        check_runs_diff,
    ),
    (
        "journal show",
        "journal show",
        lambda w: ["journal", "show", w.ok_run, *w.where()],
        0,
        check_journal_show,
    ),
    (
        "journal audit",
        "journal audit",
        lambda w: ["journal", "audit", w.ok_run, *w.where()],
        0,
        check_audit,
    ),
    (
        "journal checkpoint",
        "journal checkpoint",
        lambda w: ["journal", "checkpoint", w.ok_run, *w.where()],
        0,
        check_checkpoint,
    ),
    (
        "journal verify",
        "journal verify",
        lambda w: ["journal", "verify", w.ok_run, "--checkpoint", w.published(), *w.where()],
        0,
        check_verify,
    ),
    (
        "journal otel",
        "journal otel",
        lambda w: ["journal", "otel", w.ok_run, "--endpoint", w.sink, *w.where()],
        0,
        check_otel,
    ),
    (
        "journal lineage",
        "journal lineage",
        lambda w: ["journal", "lineage", w.ok_run, *w.where()],
        0,
        check_lineage,
    ),
    (
        "keys init",
        "keys init",
        lambda w: ["keys", "init", "--name", "json-test", "--force"],
        0,
        check_keys,
    ),
    (
        "journal export",
        "journal export",
        lambda w: ["journal", "export", w.ok_run, "-o", w.fresh("x.rjx"), *w.where()],
        0,
        check_export,
    ),
    (
        "journal import",
        "journal import",
        lambda w: ["journal", "import", w.export, "--output-root", w.fresh("elsewhere")],
        0,
        check_import,
    ),
    (
        "journal import (again)",
        "journal import",
        lambda w: ["journal", "import", w.export, *w.where()],
        0,
        check_import,
    ),
    (
        "projections status",
        "projections status",
        lambda w: ["projections", "status", *w.where()],
        0,
        check_projection_status,
    ),
    (
        "projections rebuild",
        "projections rebuild",
        lambda w: ["projections", "rebuild", *w.where()],
        0,
        check_projection_rebuild,
    ),
    ("explain", "explain", lambda w: ["explain", w.ok_run, *w.where()], 0, check_explain),
    (
        "report",
        "report",
        lambda w: ["report", w.ok_run, "-o", w.fresh("page.html"), *w.where()],
        0,
        check_report,
    ),
    (
        "explain (failed run)",
        "explain",
        lambda w: ["explain", w.failed_run, *w.where()],
        0,
        check_explain_failed,
    ),
    ("reasons", "reasons", lambda w: ["reasons"], 0, check_reasons),
    (
        "report",
        "report",
        lambda w: ["report", w.ok_run, "-o", w.fresh("page.html"), *w.where()],
        0,
        check_report,
    ),
    (
        "config show",
        "config show",
        lambda w: ["config", "show", w.pipeline, *w.where()],
        0,
        check_config_show,
    ),
    ("recover", "recover", lambda w: ["recover", "--dry-run", *w.where()], 0, check_recover),
    ("gc", "gc", lambda w: ["gc", "--keep", "100", "--dry-run", *w.where()], 0, check_gc_keeps_all),
    (
        "gc --keep 0 --dry-run",
        "gc",
        lambda w: ["gc", "--keep", "0", "--dry-run", *w.where()],
        0,
        check_gc_dry_run,
    ),
    ("init", "init", lambda w: ["init", w.fresh("starter")], 0, check_init),
]


@pytest.mark.parametrize(
    ("document", "argv", "exit_code", "check"),
    [pytest.param(doc, argv, code, check, id=label) for label, doc, argv, code, check in SUCCESS],
)
def test_result_document(
    world: World,
    document: str,
    argv: Argv,
    exit_code: int,
    check: Callable[[dict[str, Any], World], None],
) -> None:
    result = world.invoke(*argv(world), "--json")
    assert result.exit_code == exit_code, result.output
    doc = one_document(result)
    assert set(doc) == DOCUMENTED[document]
    check(doc, world)


# --- failure: every command's error document ----------------------------------------

ERRORS: list[tuple[str, Argv, int, bool]] = [
    # label, argv, exit code, whether a run id was allocated
    ("run: no pipeline file", lambda w: w.run_args(w.fresh("missing.toml")), 2, False),
    ("run: invalid setting", lambda w: w.run_args(w.pipeline, "--jobs", "0"), 2, False),
    (
        "run: unknown --recompute step",
        lambda w: w.run_args(w.pipeline, "--recompute", "x"),
        2,
        False,
    ),
    # Found before anything is allocated since issue 32 (`check`'s checks at the start of run).
    ("run: module cannot be loaded (P1)", lambda w: w.run_args(w.unloadable), 2, False),
    ("check: module cannot be loaded", lambda w: ["check", w.unloadable], 2, False),
    ("plan: module cannot be loaded", lambda w: ["plan", w.unloadable, *w.where()], 2, False),
    (
        "plan: unknown --recompute step",
        lambda w: ["plan", w.pipeline, "--recompute", "x", *w.where()],
        2,
        False,
    ),
    (
        "runs list: no journal",
        lambda w: ["runs", "list", "--output-root", w.fresh("empty")],
        2,
        False,
    ),
    ("runs show: unknown run", lambda w: ["runs", "show", "nope", *w.where()], 1, False),
    (
        "runs diff: unknown run",
        lambda w: ["runs", "diff", w.ok_run, "nope", *w.where()],
        1,
        False,
    ),
    ("report: unknown run", lambda w: ["report", "nope", *w.where()], 1, False),
    ("journal show: unknown run", lambda w: ["journal", "show", "nope", *w.where()], 1, False),
    ("journal audit: unknown run", lambda w: ["journal", "audit", "nope", *w.where()], 1, False),
    (
        "journal checkpoint: unknown run",
        lambda w: ["journal", "checkpoint", "nope", *w.where()],
        1,
        False,
    ),
    (
        "journal verify: not a checkpoint",
        lambda w: ["journal", "verify", w.ok_run, "--checkpoint", w.pipeline, *w.where()],
        2,
        False,
    ),
    (
        "journal otel: not an http(s) URL",
        lambda w: ["journal", "otel", w.ok_run, "--endpoint", "ftp://x/y", *w.where()],
        2,
        False,
    ),
    (
        "journal lineage: file transport without --path",
        lambda w: ["journal", "lineage", w.ok_run, "--transport", "file", *w.where()],
        2,
        False,
    ),
    ("keys init: a name with a space", lambda w: ["keys", "init", "--name", "a b"], 2, False),
    (
        "journal export: existing file",
        lambda w: ["journal", "export", w.ok_run, "-o", w.export, *w.where()],
        2,
        False,
    ),
    (
        "journal import: missing file",
        lambda w: ["journal", "import", w.fresh("missing.rjx"), *w.where()],
        2,
        False,
    ),
    (
        "journal import: not an export",
        lambda w: ["journal", "import", w.pipeline, *w.where()],
        2,
        False,
    ),
    (
        "projections status: no journal",
        lambda w: ["projections", "status", "--output-root", w.fresh("empty")],
        2,
        False,
    ),
    (
        "projections rebuild: unknown projection",
        lambda w: ["projections", "rebuild", "nope", *w.where()],
        2,
        False,
    ),
    ("explain: unknown run", lambda w: ["explain", "nope", *w.where()], 1, False),
    (
        "report: existing file",
        lambda w: ["report", w.ok_run, "-o", w.export, *w.where()],
        2,
        False,
    ),
    (
        "config show: invalid setting",
        lambda w: ["config", "show", w.pipeline, "--cache-mode", "fast"],
        2,
        False,
    ),
    (
        "config show: no pipeline file",
        lambda w: ["config", "show", w.fresh("missing.toml")],
        2,
        False,
    ),
    # Without a journal recover still sweeps temp files (exit 0, issue 12 item 11): its
    # error case is a journal setting that names no usable journal.
    (
        "recover: invalid journal",
        lambda w: ["recover", "--output-root", w.fresh("empty"), "--journal", "ftp://x/y"],
        2,
        False,
    ),
    ("gc: no retention given", lambda w: ["gc", *w.where()], 2, False),
    ("gc: bad age", lambda w: ["gc", "--older-than", "soon", *w.where()], 2, False),
    ("init: directory not empty", lambda w: ["init", str(Path(w.pipeline).parent)], 2, False),
]


@pytest.mark.parametrize(
    ("argv", "exit_code", "allocated"),
    [pytest.param(argv, code, allocated, id=label) for label, argv, code, allocated in ERRORS],
)
def test_error_document(world: World, argv: Argv, exit_code: int, allocated: bool) -> None:
    result = world.invoke(*argv(world), "--json")
    assert result.exit_code == exit_code, result.output
    doc = one_document(result)
    assert set(doc) == DOCUMENTED["error"]
    assert doc["exit_code"] == exit_code
    assert set(doc["error"]) == ERROR_KEYS
    if allocated:
        assert doc["status"] == "failed" and RUN_ID.fullmatch(doc["run_id"])
    else:
        assert doc["status"] == "error" and doc["run_id"] is None
    assert [doc["error"][k] for k in ("step", "lane", "reason_code")] == [None, None, None]
    lines = result.stderr.strip().splitlines()
    assert lines == [f"runjournal: error: {doc['error']['message']}"]


# --- coverage: the matrices cover every command, and the docs table every document -----


def test_every_command_takes_json_and_has_a_success_and_an_error_case() -> None:
    commands = leaf_commands()
    for name in commands:
        command = cli_group
        for part in name.split():
            command = command.commands[part]  # type: ignore[attr-defined]
        assert "--json" in {opt for p in command.params for opt in p.opts}, name
    assert {doc for _, doc, _, _, _ in SUCCESS} == set(commands)
    assert set(DOCUMENTED) == {*commands, "error"}
    failing = {label.split(":")[0] for label, _, _, _ in ERRORS}
    assert failing == set(commands) - {"reasons"}  # `reasons` reads nothing and cannot fail
