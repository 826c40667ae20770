"""`runjournal journal lineage`: a run's OpenLineage run events, validated against the
schema of openlineage-python's own model (docs/operations.md "Traces and lineage").

A succeeded run gives START, RUNNING, COMPLETE for the run and START, COMPLETE per step;
a failed run ends in FAIL (with its error message), an interrupted one in ABORT. The
console, file and HTTP transports carry the same events.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.console import CLI, console_script
from support.sleepy_project import write_sleepy_project

jsonschema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")
pytest.importorskip("openlineage.client", reason="the test extra installs openlineage-python")

from support.openlineage_schema import facet_schemas, run_event_schema  # noqa: E402


class Project:
    def __init__(self, cli: CLI, root: Path, docs: int, delay: float, failing: str = "") -> None:
        self.cli, self.root = cli, root
        self.env = write_sleepy_project(
            root, name="counted", docs=docs, delay=delay, failing=failing
        )
        self.log = root / "calls.log"

    def where(self) -> list[str]:
        return ["--output-root", str(self.root / "out")]

    def run_args(self) -> list[str]:
        pipeline = str(self.root / "pipeline.toml")
        return ["run", pipeline, *self.where(), "--cache-root", str(self.root / "cache")]

    def run(self) -> subprocess.CompletedProcess[str]:
        return self.cli(*self.run_args(), "--no-progress", env=self.env)

    def interrupted(self) -> None:
        env = {**self.cli.env, **self.env}
        argv = [*console_script(), *self.run_args(), "--no-progress"]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not self._calls():
                time.sleep(0.02)
            assert self._calls(), "no extract started"
            os.kill(proc.pid, signal.SIGINT)
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 130

    def _calls(self) -> int:
        return len(self.log.read_text().splitlines()) if self.log.exists() else 0

    def lineage(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.cli("journal", "lineage", "latest", *self.where(), *args)

    def events(self) -> list[dict[str, Any]]:
        proc = self.lineage()
        assert proc.returncode == 0, proc.stderr
        events = [json.loads(line) for line in proc.stdout.splitlines()]
        validate(events)
        return events


def validate(events: list[dict[str, Any]]) -> None:
    schema, facets = run_event_schema(), facet_schemas()
    for event in events:
        jsonschema.validate(event, schema)
        assert event["eventType"] in {"START", "RUNNING", "COMPLETE", "FAIL", "ABORT"}
        holders = [event["run"].get("facets", {}), event["job"].get("facets", {})]
        for d in [*event.get("inputs", []), *event.get("outputs", [])]:
            holders += [d.get("facets", {}), d.get("inputFacets", {}), d.get("outputFacets", {})]
        for held in holders:
            for name, facet in held.items():
                assert facet["_producer"] and facet["_schemaURL"]
                if name in facets:
                    jsonschema.validate(facet, facets[name])


def _run_states(events: list[dict[str, Any]], job: str) -> list[str]:
    return [e["eventType"] for e in events if e["job"]["name"] == job]


def test_a_succeeded_run_completes_with_its_datasets(cli: CLI, tmp_path: Path) -> None:
    project = Project(cli, tmp_path / "p", docs=2, delay=0)
    assert project.run().returncode == 0
    events = project.events()
    assert _run_states(events, "counted") == ["START", "RUNNING", "COMPLETE"]
    assert _run_states(events, "counted.count") == ["START", "COMPLETE"]
    end = events[-1]
    assert end["eventType"] == "COMPLETE" and end["job"]["name"] == "counted"
    names = {d["name"] for d in end["inputs"]}
    assert {"docs/d0.md", "docs/d1.md"} <= names
    source = next(d for d in end["inputs"] if d["name"] == "docs/d0.md")
    data = (project.root / "docs" / "d0.md").read_bytes()
    assert source["facets"]["version"]["datasetVersion"] == hashlib.sha256(data).hexdigest()
    assert source["inputFacets"]["inputStatistics"]["size"] == len(data)
    assert end["outputs"] and all(o["facets"]["runjournal_digest"]["size"] for o in end["outputs"])
    assert end["run"]["facets"]["runjournal_run"]["status"] == "succeeded"
    step_end = [e for e in events if e["job"]["name"] == "counted.count"][-1]
    assert step_end["run"]["facets"]["parent"]["run"]["runId"] == end["run"]["runId"]
    decisions = step_end["run"]["facets"]["runjournal_decisions"]
    assert decisions["outcomes"]["executed"] > 0 and sum(decisions["reasonCodes"].values()) > 0
    assert step_end["outputs"]
    assert {d["name"] for d in step_end["inputs"]} == {"docs/d0.md", "docs/d1.md"}
    # the same run, emitted twice, names the same runs
    assert project.events() == events
    # and the schema does refuse what the spec refuses
    for broken in (
        {k: v for k, v in end.items() if k != "job"},
        {**end, "run": {**end["run"], "runId": "not-a-uuid"}},
        {**end, "eventType": "DONE"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            validate([broken])


def test_a_failed_run_emits_fail(cli: CLI, tmp_path: Path) -> None:
    project = Project(cli, tmp_path / "p", docs=2, delay=0, failing="d1.md")
    assert project.run().returncode == 1
    events = project.events()
    assert _run_states(events, "counted")[-1] == "FAIL"
    assert _run_states(events, "counted.count")[-1] == "FAIL"
    assert "refused" in events[-1]["run"]["facets"]["errorMessage"]["message"]


def test_an_interrupted_run_emits_abort(cli: CLI, tmp_path: Path) -> None:
    project = Project(cli, tmp_path / "p", docs=6, delay=0.4)
    project.interrupted()
    events = project.events()
    assert _run_states(events, "counted")[-1] == "ABORT"
    assert events[-1]["run"]["facets"]["runjournal_run"]["status"] == "interrupted"


def test_file_and_http_transports_carry_the_same_events(cli: CLI, tmp_path: Path) -> None:
    project = Project(cli, tmp_path / "p", docs=1, delay=0)
    assert project.run().returncode == 0
    console = project.events()

    target = tmp_path / "lineage.jsonl"
    proc = project.lineage("--path", str(target))
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line) for line in target.read_text().splitlines()] == console
    again = project.lineage("--path", str(target))
    assert again.returncode == 2 and "exists" in again.stderr

    received: list[tuple[str, dict[str, Any]]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            received.append((self.path, json.loads(body)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        proc = project.lineage("--url", f"http://127.0.0.1:{server.server_address[1]}", "--json")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert proc.returncode == 0, proc.stderr
    assert {path for path, _ in received} == {"/api/v1/lineage"}
    assert [body for _, body in received] == console
    doc = json.loads(proc.stdout)
    assert doc["run_states"] == ["START", "RUNNING", "COMPLETE"] and doc["events"] == console


def test_bad_transport_options_are_one_line_exit_2(cli: CLI, tmp_path: Path) -> None:
    project = Project(cli, tmp_path / "p", docs=1, delay=0)
    assert project.run().returncode == 0
    for args, text in (
        (("--transport", "file"), "needs --path"),
        (("--transport", "http"), "needs --url"),
        (("--url", "ftp://x/y"), "not an http(s) URL"),
    ):
        proc = project.lineage(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert text in proc.stderr and "Traceback" not in proc.stderr
