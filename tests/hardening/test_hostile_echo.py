"""A hostile server echoes the credential it was sent: no byte anywhere holds any of it.

Issue #27 defects 1-5 (docs/internals.md "Known secrets"). The fake server sends back
what the request's `Authorization` header carried: in a 400's message, across the
client's 200-character cut, split by a line break, the whole header (base64 for Basic
auth), in a reply that is not JSON (its preview is cut), and in the content of a valid
reply. Keys: a local server's key (no credential shape, only its value gives it away)
and an `sk-proj-` key; carried as a bearer token from `api_key_env`, or as the password
of `base_url` (Basic auth). Each project is recorded, then replayed from its cassette.

No 8-character piece of the key, of `user:key`, or of their URL, JSON and base64
encodings (at any alignment) is in any byte under the output, cache and debug roots
(journal rows decoded and decompressed, checkpoint payloads, zstd frames), the
cassettes, the exports, the HTML reports, or any command's stdout and stderr; the
replayed run's outputs are byte-identical to the recorded run's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.leak_scan import Expanded, files_under, journal_states, secret_pieces
from support.llm_servers import ServerProcess, start_fake

SCHEMA = '{ type = "object", properties = { topic = { type = "string" } }, required = ["topic"] }'
PIPELINE = f"""
name = "echo"
inputs = ["docs/*.md"]
[[steps]]
id = "ask"
module = "llm.json"
params = {{ prompt = "{{text}}", schema = {SCHEMA}, max_tokens = 40 }}
"""
PROFILE = """
[profiles.fake]
provider = "openai"
model = "fake-model"
base_url = "{url}"
api_key_env = "RJ_ECHO_KEY"
max_retries = 0
backoff_initial = 0.05
backoff_max = 0.1
"""
# Run "fails": each document's stage fails with the server's text in its message.
FAILING = {
    "err.md": "FAULTS: echo400\nAlpha asks once.\n",
    "cut.md": "FAULTS: echocut\nBeta asks once.\n",
    "split.md": "FAULTS: echosplit\nGamma asks once.\n",
    "auth.md": "FAULTS: echoauth\nDelta asks once.\n",
    "junk.md": "FAULTS: echojunk, echojunk, echojunk\nEpsilon never validates.\n",
    "fine.md": "Zeta is answered.\n",
}
# Run "works": the key is echoed in content, and in a reply asked again.
WORKING = {
    "content.md": "FAULTS: echocontent\nEta echoes in content.\n",
    "reask.md": "FAULTS: echojunk, echocontent\nTheta is asked again.\n",
    "plain.md": "Iota is plain.\n",
}
USER = "robot"


def _keys() -> dict[str, str]:
    return {
        "plain": "lan" + "-gateway-" + "5c1e9" * 5,  # a local server's key: no shape
        "sk-proj": "sk-" + "proj-" + "Hx4" * 13,
    }


@pytest.fixture(scope="module")
def fake() -> Iterator[ServerProcess]:
    with start_fake() as server:
        yield server


class Scene:
    """Two projects, one profile, recorded under `rec/` and replayed under `rep/`."""

    def __init__(self, cli: Any, tmp: Path, url: str, key: str, carrier: str) -> None:
        self.cli, self.tmp = cli, tmp
        if carrier == "url":  # the key is base_url's password: Basic auth carries it
            url = url.replace("http://", f"http://{USER}:{key}@")
            self.env = {}
        else:
            self.env = {"RJ_ECHO_KEY": key}
        self.profiles = tmp / "profiles.toml"
        self.profiles.write_text(PROFILE.format(url=url))
        self.projects = {"fails": FAILING, "works": WORKING}
        for name, docs in self.projects.items():
            (tmp / name / "docs").mkdir(parents=True)
            (tmp / name / "pipeline.toml").write_text(PIPELINE)
            for doc, text in docs.items():
                (tmp / name / "docs" / doc).write_text(text)
        self.streams: list[str] = []
        self.shown: dict[str, dict[str, Any]] = {}

    def roots(self, phase: str) -> list[str]:
        base = self.tmp / phase
        return [
            *("--output-root", str(base / "out"), "--cache-root", str(base / "cache")),
            *("--debug-root", str(base / "debug"), "--debug", "trace"),
        ]

    def run(self, project: str, phase: str, *llm: str) -> tuple[int, dict[str, Any]]:
        args = ["run", str(self.tmp / project / "pipeline.toml"), "--no-progress", "--keep-going"]
        args += ["--profiles-file", str(self.profiles), "--profile", "fake", *self.roots(phase)]
        proc, doc = self.cli.json(*args, *llm, env=self.env)
        self.streams += [proc.stdout, proc.stderr]
        assert "Traceback" not in proc.stderr, proc.stderr
        assert doc.get("run_id"), proc.stderr
        return proc.returncode, doc

    def query(self, phase: str, run_id: str) -> dict[str, Any]:
        """`journal show`, `explain`, `runs show` (their documents), `report`, `export`."""
        if run_id in self.shown:
            return self.shown[run_id]
        out = ["--output-root", str(self.tmp / phase / "out")]
        shown: dict[str, Any] = {}
        self.shown[run_id] = shown
        for args in (("journal", "show"), ("explain",), ("runs", "show")):
            proc = self.cli(*args, run_id, *out, "--json")
            assert proc.returncode == 0, proc.stderr
            self.streams += [proc.stdout, proc.stderr]
            shown[args[0]] = json.loads(proc.stdout)
        for args in (
            ("report", run_id, "-o", str(self.tmp / "reports" / f"{run_id}.html")),
            ("journal", "export", run_id, "-o", str(self.tmp / "exports" / f"{run_id}.rjx")),
        ):
            (self.tmp / args[-1]).parent.mkdir(exist_ok=True)
            proc = self.cli(*args, *out)
            assert proc.returncode == 0, proc.stderr
            self.streams += [proc.stdout, proc.stderr]
        return shown


def _failures(events: list[dict[str, Any]]) -> dict[str, str]:
    return {e["data"]["lane"]: e["data"]["message"] for e in events if e["type"] == "StageFailed"}


def _outputs(doc: dict[str, Any]) -> dict[str, bytes]:
    return {o["name"]: Path(o["path"]).read_bytes() for o in doc["outputs"]}


@pytest.mark.parametrize("carrier", ["env", "url"])
@pytest.mark.parametrize("kind", sorted(_keys()))
def test_an_echoed_key_is_in_no_byte_and_replay_is_identical(
    cli: Any, fake: ServerProcess, tmp_path: Path, kind: str, carrier: str
) -> None:
    key = _keys()[kind]
    fake.reset()  # fault scripts count per prompt: start each case afresh
    scene = Scene(cli, tmp_path, fake.url, key, carrier)
    cassettes = {name: tmp_path / f"{name}.cassette.json" for name in scene.projects}

    code, failed = scene.run("fails", "rec", "--llm-record", str(cassettes["fails"]))
    assert code == 1 and failed["status"] == "failed"
    code, worked = scene.run("works", "rec", "--llm-record", str(cassettes["works"]))
    assert code == 0, worked
    code, refailed = scene.run("fails", "rep", "--llm-replay", str(cassettes["fails"]))
    assert code == 1
    code, replayed = scene.run("works", "rep", "--llm-replay", str(cassettes["works"]))
    assert code == 0, replayed

    # the server did echo: the stage messages and the replies carry markers where it was
    recorded = scene.query("rec", failed["run_id"])
    failures = _failures(recorded["journal"]["events"])
    assert set(failures) == {f"docs/{d}" for d in FAILING if d != "fine.md"}
    for lane in ("err", "cut", "split", "auth"):
        assert "HTTP 400" in failures[f"docs/{lane}.md"]
        assert "[REDACTED:" in failures[f"docs/{lane}.md"], failures
    assert "did not validate" in failures["docs/junk.md"]
    # the invalid replies were recorded scrubbed: replayed, they fail the same way
    again = _failures(scene.query("rep", refailed["run_id"])["journal"]["events"])
    assert again["docs/junk.md"] == failures["docs/junk.md"]
    scene.query("rec", worked["run_id"])
    scene.query("rep", replayed["run_id"])

    outputs = _outputs(worked)
    assert outputs and _outputs(replayed) == outputs  # byte-identical
    assert any(b"echo [REDACTED:" in data for data in outputs.values())
    attempts = [
        e["data"]
        for e in scene.query("rep", replayed["run_id"])["journal"]["events"]
        if e["type"] == "LLMCallAttempted"
    ]
    assert attempts and all(a["replayed"] for a in attempts)

    needles = {"key": secret_pieces(key, f"{USER}:{key}")}
    assert all(len(p) == 8 for p in needles["key"])
    expand = Expanded()
    files = files_under(tmp_path / "rec", tmp_path / "rep", tmp_path / "exports")
    files += files_under(tmp_path / "reports", *cassettes.values())
    assert {p.suffix for p in files} >= {".seg", ".rjx", ".html", ".json", ".sqlite3"}
    found = {str(path): [p for p in needles["key"] if p.encode() in expand(path)] for path in files}
    assert {p: hit for p, hit in found.items() if hit} == {}
    assert expand.checkpoints > 0 and expand.frames > 0
    for phase in ("rec", "rep"):
        states, _ = journal_states(tmp_path / phase / "out" / "journal.sqlite3")
        rows = [s for s in states if any(p.encode() in s for p in needles["key"])]
        assert rows == []
    streams = [s for s in scene.streams if any(p in s for p in needles["key"])]
    assert streams == []
