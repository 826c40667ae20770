"""Regressions for the redaction gaps a red-team pass found.

Each gap reached a file or stream in clear before the fix: URL passwords holding `/`,
`#`, `?`, `@` or a space (`config show` text and `--json`; a module warning into stderr,
`report.json`, `--json` and a checkpoint), Google `ya29.` tokens, a bare 40-character AWS
secret in a warning (the journal and `summary/warnings.json`), `--password X`,
`mysql -pX`, `curl -u user:pw` in free text, `X-Amz-Signature=`, Discord webhook URLs and
non-ASCII secret key names (`pässword=`). docs/operations.md "Redaction" lists the shapes.
Every secret is built at run time from random parts.
"""

from __future__ import annotations

import json
import secrets
import string
from pathlib import Path

import pytest
from support.leak_scan import Expanded, files_under, journal_states, leaks

ALNUM = string.ascii_letters + string.digits


def rnd(n: int, alphabet: str = ALNUM) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def url_password(special: str) -> str:
    return "Pw" + rnd(6) + special + rnd(8)


SPECIALS = {"slash": "/", "hash": "#", "question": "?", "space": " ", "at": "@"}


def _pipeline(root: Path, plugin: str | None = None) -> Path:
    pipe = root / "pipe"
    (pipe / "docs").mkdir(parents=True)
    (pipe / "docs" / "a.md").write_text("# A\n\nsome text\n")
    step = 'id = "headings"\nmodule = "builtin.headings"\n'
    if plugin is not None:
        (pipe / "gaps.py").write_text(plugin)
        step = 'id = "gaps"\nmodule = "gaps.py:Gaps"\n'
    (pipe / "pipeline.toml").write_text(
        f'name = "gaps"\ninputs = ["docs/*.md"]\n\n[[steps]]\n{step}'
    )
    return pipe / "pipeline.toml"


class TestConfigShowUrlPasswords:
    @pytest.mark.parametrize("special", list(SPECIALS))
    def test_text_and_json_hide_the_whole_password(self, cli, tmp_path: Path, special: str):
        password = url_password(SPECIALS[special])
        url = f"postgresql://rj:{password}@db.internal:5432/rj?sslmode=disable"
        pipeline = _pipeline(tmp_path)
        text = cli("config", "show", str(pipeline), "--journal", url)
        proc, doc = cli.json("config", "show", str(pipeline), env={"RUNJOURNAL_JOURNAL": url})
        assert text.returncode == 0 and proc.returncode == 0, (text.stderr, proc.stderr)
        for chunk in (password, *password.split(SPECIALS[special])):
            for stream in (text.stdout, text.stderr, proc.stdout, proc.stderr):
                assert chunk not in stream
        shown = "postgresql://rj:***@db.internal:5432/rj?sslmode=disable"
        journal_line = next(line for line in text.stdout.splitlines() if line.startswith("journal"))
        assert journal_line.split()[1] == shown
        rows = doc["settings"] if "settings" in doc else doc["rows"]
        assert next(r for r in rows if r["name"] == "journal")["value"] == shown


GAPS_PLUGIN = """
import json
import os

from runjournal.domain.modules import Module, Normalized

GAPS = json.loads(os.environ["RJ_GAPS"])


class Gaps(Module):
    name = "test.gaps"
    fingerprint = "test.gaps/1"
    artifact_kind = "gaps"
    schema = "test.gaps/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        print("module says:", " | ".join(GAPS.values()))
        if os.environ.get("RJ_RAISE"):
            raise RuntimeError("rejected: " + " ; ".join(GAPS.values()))
        return 1

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        warnings = [name + ": " + text for name, text in GAPS.items()]
        warnings.append("all: " + " | ".join(GAPS.values()) * 8)  # stored zstd-compressed
        return Normalized(merged, warnings=warnings)
"""


def _gaps() -> tuple[dict[str, str], dict[str, tuple[str, ...]], dict[str, str]]:
    """gap -> planted text, gap -> its random secret parts, gap -> the text redacted."""
    texts: dict[str, str] = {}
    needles: dict[str, tuple[str, ...]] = {}
    expected: dict[str, str] = {}

    def gap(name: str, before: str, secret: str, after: str, marker: str) -> None:
        texts[name] = before + secret + after
        needles[name] = (secret,)
        expected[name] = f"{name}: {before}[REDACTED:{marker}]{after}"

    for name, special in SPECIALS.items():
        pw = url_password(special)
        gap(f"url_{name}", "postgresql://app:", pw, "@db.internal/app", "url_password")
    gap("ya29", "token ", "ya" + "29." + rnd(60, ALNUM + "_-"), " expired", "google_oauth_token")
    aws = rnd(39, ALNUM + "/+") + "7"
    gap("bare_aws", "upload failed with ", aws, " (403)", "aws_secret_access_key")
    gap("long_option", "ran tool --password ", rnd(14), " -v", "command_line_secret")
    gap("mysql", "mysql -u root -p", rnd(14), " shop", "command_line_secret")
    gap("curl", "curl -u bob:", rnd(14), " https://h.example/x", "command_line_secret")
    gap(
        "amz_signature",
        "https://b.s3.amazonaws.com/k?X-Amz-Date=20240101T000000Z&X-Amz-Signature=",
        rnd(64, "0123456789abcdef"),
        "&x=1",
        "request_signature",
    )
    hook = "".join(secrets.choice(string.digits) for _ in range(18)) + "/" + rnd(68)
    gap("discord", "https://discord.com/api/webhooks/", hook, "", "discord_webhook")
    gap("non_ascii_name", "pässword=", rnd(14), "", "generic_secret")
    return texts, needles, expected


class TestModuleTextWithGapSecrets:
    def test_warnings_prints_and_errors_leak_nothing(self, cli, tmp_path: Path) -> None:
        texts, needles, expected = _gaps()
        pipeline = _pipeline(tmp_path, GAPS_PLUGIN)
        out, cache, dbg = tmp_path / "out", tmp_path / "cache", tmp_path / "dbg"
        roots = ["--output-root", str(out), "--cache-root", str(cache), "--debug-root", str(dbg)]
        args = ["run", str(pipeline), *roots, "--debug", "summary", "--no-progress"]
        env = {"RJ_GAPS": json.dumps(texts)}

        ok, doc = cli.json(*args, env=env)
        assert ok.returncode == 0, ok.stderr
        plain = cli(*args, "--cache-mode", "refresh", env=env)  # the text summary on stdout
        assert plain.returncode == 0, plain.stderr
        failed, failed_doc = cli.json(
            *args, "--cache-mode", "refresh", env={**env, "RJ_RAISE": "1"}
        )
        assert failed.returncode == 1 and failed_doc["status"] == "failed", failed.stderr

        # the warnings really carried each gap, redacted to exactly what is expected
        shown = [w["message"] for w in doc["warnings"]]
        assert shown[: len(expected)] == list(expected.values())
        report = json.loads(Path(doc["report"]).read_text())
        assert [w["message"] for w in report["warnings"]] == shown
        summary = json.loads((Path(doc["debug_bundle"]) / "summary" / "warnings.json").read_text())
        assert [w["message"] for w in summary["warnings"]] == shown
        assert "rejected: " in failed.stderr and "[REDACTED:" in failed.stderr
        assert "module says:" in ok.stderr and "[REDACTED:" in ok.stderr

        for proc in (ok, plain, failed):
            assert leaks(proc.stdout.encode(), needles) == []
            assert leaks(proc.stderr.encode(), needles) == []
        states, compressed = journal_states(out / "journal.sqlite3")
        assert compressed > 0
        assert [leaks(state, needles) for state in states if leaks(state, needles)] == []
        expand = Expanded()
        leaked = {str(p): leaks(expand(p), needles) for p in files_under(out, cache, dbg)}
        assert {k: v for k, v in leaked.items() if v} == {}
        assert expand.checkpoints > 0  # the normalize checkpoint holds the warnings
