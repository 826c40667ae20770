"""The API key reaches no file under any root, no journal byte, no output: checked byte by byte.

The fake server requires the key, and in the failing run echoes the header it got in
its 401 body, the worst case for an error line. Keys are built at run time, one
credential-shaped (which redaction would also catch) and one plain (which only the
runtime's own scrubbing hides).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import zstandard
from support.llm_servers import start_fake

PIPELINE = """
name = "leak"
inputs = ["docs/*.md"]
[[steps]]
id = "ask"
module = "llm.json"
params = { prompt = "Zanzibar check: {text}", schema = { type = "object" } }
"""
PROFILE = """
[profiles.fake]
provider = "openai"
model = "fake-model"
base_url = "{url}"
api_key_env = "RJ_LEAK_KEY"
backoff_initial = 0.05
backoff_max = 0.1
max_retries = 2
"""


def _keys() -> list[tuple[str, str]]:
    return [
        ("shaped", "sk-" + "proj-" + "K3y" * 14),
        ("plain", "local" + "-access-" + "4711" * 5),
    ]


def _all_bytes(root: Path) -> list[tuple[Path, bytes]]:
    out = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            out.append((path, data))
            if data[:4] == b"\x28\xb5\x2f\xfd":  # a zstd file (an export): look inside too
                out.append((path, zstandard.ZstdDecompressor().decompress(data, 1 << 26)))
    return out


@pytest.mark.parametrize(("kind", "key"), _keys(), ids=[k for k, _ in _keys()])
def test_the_key_is_in_no_byte(cli, tmp_path: Path, kind: str, key: str) -> None:
    wrong = key[::-1]
    project = tmp_path / "project"
    (project / "docs").mkdir(parents=True)
    (project / "docs" / "a.md").write_text("Alpha text.\nFAULTS: 500\n")
    (project / "docs" / "b.md").write_text("Beta text.\n")
    (project / "pipeline.toml").write_text(PIPELINE)
    roots = [
        "--output-root",
        str(tmp_path / "out"),
        "--cache-root",
        str(tmp_path / "cache"),
        "--debug-root",
        str(tmp_path / "debug"),
    ]
    outputs: list[str] = []
    with start_fake(api_key_env="RJ_LEAK_KEY", env={"RJ_LEAK_KEY": key}, echo_auth=True) as fake:
        profiles = project / "profiles.toml"
        profiles.write_text(PROFILE.format(url=fake.url))
        base = ["run", str(project / "pipeline.toml"), "--profiles-file", str(profiles)]
        base += ["--profile", "fake", "--debug", "trace", *roots]

        proc, doc = cli.json(
            *base, "--llm-record", str(tmp_path / "cassette.json"), env={"RJ_LEAK_KEY": key}
        )
        outputs += [proc.stdout, proc.stderr]
        assert proc.returncode == 0, proc.stderr
        assert all(r["authorization"] for r in fake.requests())  # the key was sent
        assert doc["llm"]["spent"]["attempts"] == 3  # one 500, retried

        (project / "docs" / "b.md").write_text("Beta changed.\n")
        proc, failed = cli.json(*base, "--resume", env={"RJ_LEAK_KEY": wrong})
        outputs += [proc.stdout, proc.stderr]
        assert proc.returncode == 1 and failed["error"]["cause"] == "auth_failed"
        assert "invalid api key" in failed["error"]["message"]  # the server's words, scrubbed

    for run in (doc["run_id"], failed["run_id"]):
        for args in (("journal", "show", run), ("explain", run), ("runs", "show", run)):
            proc = cli(*args, "--output-root", str(tmp_path / "out"), "--json")
            assert proc.returncode == 0, proc.stderr
            outputs.append(proc.stdout)
            if args[0] == "journal":
                assert "Zanzibar" not in proc.stdout  # prompt text is never journaled
        proc = cli(
            "journal",
            "export",
            run,
            "-o",
            str(tmp_path / "out" / f"{run}.rjx"),
            "--output-root",
            str(tmp_path / "out"),
        )
        assert proc.returncode == 0, proc.stderr

    files = _all_bytes(tmp_path)
    assert any(p.name == "journal.sqlite3" for p, _ in files)
    assert any(p.name == "cassette.json" for p, _ in files)
    assert any(p.name == "failure.json" for p, _ in files)
    text_trace = [data for p, data in files if p.name == "llm-text.jsonl"]
    assert text_trace and b"Zanzibar" in text_trace[0]  # text lives in --debug trace only
    for secret in (key, wrong):
        needle = secret.encode()
        leaks = [str(p) for p, data in files if needle in data]
        assert leaks == [], f"{kind} key found in {leaks}"
        assert not any(secret in text for text in outputs)
        assert not any(secret[6:30] in text for text in outputs)  # nor a recognisable part
    events = json.loads(outputs[4])["events"]
    attempted = [e for e in events if e["type"] == "LLMCallAttempted"]
    assert attempted and all("authorization" not in json.dumps(e).lower() for e in attempted)
