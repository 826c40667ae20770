"""A planted corpus of secrets never leaves the process unredacted.

docs/operations.md "Hardening guarantees" (redaction), docs/internals.md "Redaction".

Every secret-shaped token is built at run time from random parts (never a literal in
this file). The tokens are planted in the environment, `--set` values, profile fields
(the model name too), module trace material, module warnings, module `print()` output,
an LLM prompt and exception messages; then no file under any root (output, cache,
debug; zstd payloads of checkpoints, chunk plans and journal rows decompressed), no
event of the decompressed journal (`journal show --json`), and nothing on stdout or
stderr may contain any of them. Pipelines that fail at resolution (a plugin raising a
credential at import, a plugin declaring a credential as metadata) leak nothing either.

The corpus holds at least one token for every shape of `SHAPE_NAMES` (the shared
`support.secret_corpus`, salted afresh for each test). Besides the channels above, a
second plugin step carries every token in its params and warns each of them (and all of
them in one warning large enough to be stored zstd-compressed); journal URLs whose
password holds `/`, `#`, `?`, `@` or a space go through `config show` and a run. Every
row of the journal database is decoded (format byte, zstd, msgpack) and grepped too.
"""

from __future__ import annotations

import base64
import json
import secrets
import string
from pathlib import Path

import pytest
from runjournal.domain.redaction import SHAPE_NAMES, redact_text
from support.leak_scan import Expanded, files_under, journal_states, leaks
from support.secret_corpus import planted_corpus

ALNUM = string.ascii_letters + string.digits
UPPER = string.ascii_uppercase + string.digits


def rnd(n: int, alphabet: str = ALNUM) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def build_corpus() -> dict[str, tuple[str, tuple[str, ...]]]:
    """shape -> (token, needles): needles are the random parts that must never appear."""
    out: dict[str, tuple[str, tuple[str, ...]]] = {}

    def add(name: str, token: str, *needles: str) -> None:
        out[name] = (token, needles)

    b = rnd(16, UPPER)
    add("aws_access_key_id", "AK" + "IA" + b, b)
    b = rnd(40, ALNUM + "/+")
    add("aws_secret_access_key", "aws_secret" + "_access_key = " + b, b)
    for p in "pousr":
        b = rnd(36)
        add("github_gh" + p, "gh" + p + "_" + b, b)
    b1, b2 = rnd(22), rnd(59)
    add("github_pat", "github" + "_pat_" + b1 + "_" + b2, b1, b2)
    b = rnd(48)
    add("openai", "s" + "k-" + b, b)
    b = rnd(48)
    add("openai_project", "s" + "k-" + "proj-" + b, b)
    b = rnd(93, ALNUM + "_-")
    add("anthropic", "s" + "k-ant-" + "api03-" + b + "AA", b)
    b = rnd(24)
    digits = string.digits
    add("slack", "xo" + "xb-" + rnd(11, digits) + "-" + rnd(12, digits) + "-" + b, b)
    b = rnd(35, ALNUM + "_-")
    add("google", "AI" + "za" + b, b)
    b = rnd(24)
    add("stripe_secret", "s" + "k_" + "live_" + b, b)
    b = rnd(24)
    add("stripe_restricted", "r" + "k_" + "live_" + b, b)
    b = rnd(20)
    add("gitlab", "gl" + "pat-" + b, b)
    b = rnd(36)
    add("npm", "np" + "m_" + b, b)
    b = rnd(60, ALNUM + "_-")
    add("pypi", "py" + "pi-" + "AgEIcHlwaS5vcmc" + b, b)
    b1, b2, b3 = rnd(24, ALNUM + "_-"), rnd(40, ALNUM + "_-"), rnd(43, ALNUM + "_-")
    add("jwt", "ey" + "J" + b1 + ".ey" + "J" + b2 + "." + b3, b1, b2, b3)
    b1, b2 = rnd(64, ALNUM + "+/"), rnd(64, ALNUM + "+/")
    begin, end = "-----BEGIN RSA PRIVATE" + " KEY-----", "-----END RSA PRIVATE" + " KEY-----"
    add("pem_private_key", begin + "\n" + b1 + "\n" + b2 + "\n" + end, b1, b2)
    b = rnd(32)
    add("authorization_bearer", "Authorization: " + "Bearer " + b, b)
    b = base64.b64encode(("user:" + rnd(20)).encode()).decode()
    add("authorization_basic", "Authorization: " + "Basic " + b, b)
    b = rnd(20)
    add("url_userinfo", "https://deploy:" + b + "@git.example.com/repo.git", b)
    b = rnd(34)
    add("huggingface", "h" + "f_" + b, b)
    b = rnd(32, "0123456789abcdef")
    add("twilio", "S" + "K" + b, b)
    for i, entry in enumerate(planted_corpus(secrets.token_hex(8))):
        add(f"{entry.shape}-{i}", entry.text, *_secret_parts(entry.secret))
    return out


def _secret_parts(secret: str) -> tuple[str, ...]:
    """What must never appear: the secret, and its middle and end (a partial leak)."""
    if len(secret) < 24:
        return (secret,)
    mid = len(secret) // 2
    return (secret, secret[mid - 6 : mid + 6], secret[-12:])


def test_corpus_covers_every_shape() -> None:
    assert {e.shape for e in planted_corpus(secrets.token_hex(8))} == set(SHAPE_NAMES)


LEAKY_PLUGIN = """
import json
import os

from runjournal.domain.modules import Module, Normalized

TOKENS = json.loads(os.environ["RJ_PLANTED"])
PLAIN = os.environ["RJ_PLAIN"]


class Leaky(Module):
    name = "test.leaky"
    fingerprint = "test.leaky/1"
    artifact_kind = "leaky"
    schema = "test.leaky/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        ctx.trace.record(
            "planted",
            {
                "tokens": TOKENS,
                "joined": " | ".join(TOKENS),
                "api_key": PLAIN,
                "client_secret": PLAIN,
                "headers": {"Authorization": "Bearer " + PLAIN, "Cookie": "sid=" + PLAIN},
                "overrides": dict(ctx.overrides),
                "params": dict(ctx.params),
                "env_key": os.environ.get("RJ_API_KEY"),
            },
        )
        ctx.trace.record("planted " + TOKENS[0], {"n": 1})
        print("leaky print:", " | ".join(TOKENS))
        print("leaky glued:m-" + os.environ["RJ_GLUED"], end="")  # a partial line
        answer = ctx.llm.complete("context: " + " ".join(TOKENS) + " " + PLAIN, system=PLAIN)
        part = os.environ.get("RJ_RAISE_PART")
        if part is not None and "explode" in chunk.text:
            chosen = TOKENS[int(part) :: 3]
            raise RuntimeError("upstream rejected credentials: " + " ; ".join(chosen))
        return len(answer) % 7

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        return Normalized(merged, warnings=["credential seen: " + t for t in TOKENS[:4]])
"""


WARNER_PLUGIN = """
from runjournal.domain.modules import Module, Normalized


class Warner(Module):
    name = "test.warner"
    fingerprint = "test.warner/1"
    artifact_kind = "warner"
    schema = "test.warner/v1"
    chunk_type = int
    merged_type = int
    artifact_type = int

    def extract(self, chunk, ctx):
        return 1

    def merge(self, parts, ctx):
        return sum(parts)

    def normalize(self, merged, ctx):
        notes = list(ctx.params["notes"])  # every token, planted as a param
        warnings = ["seen in a param: " + note for note in notes]
        warnings.append("all of them: " + " | ".join(notes))  # compressed in the journal
        return Normalized(merged, warnings=warnings)
"""


def _toml_strings(values: list[str]) -> str:
    """A TOML array of basic strings (JSON string escapes are TOML's too)."""
    return "[\n" + "".join(f"  {json.dumps(v)},\n" for v in values) + "]"


@pytest.fixture
def planted(tmp_path: Path):
    corpus = build_corpus()
    tokens = [token for token, _ in corpus.values()]
    needles = {name: needles for name, (_, needles) in corpus.items()}
    plain = rnd(24)  # secret only by its key: never credential-shaped
    needles["plain"] = (plain,)
    # precondition: the redaction component recognises every planted shape
    for name, (token, parts) in corpus.items():
        redacted = redact_text("seen " + token + " here")
        assert not any(p in redacted for p in parts), name

    pipe = tmp_path / "pipe"
    (pipe / "docs").mkdir(parents=True)
    (pipe / "plugins").mkdir()
    (pipe / "plugins" / "leaky.py").write_text(LEAKY_PLUGIN)
    (pipe / "plugins" / "warner.py").write_text(WARNER_PLUGIN)
    (pipe / "docs" / "a.md").write_text("# Alpha\n\nThe **event journal** records runs.\n")
    (pipe / "docs" / "zz.md").write_text("please explode here\n")
    (pipe / "pipeline.toml").write_text(
        'name = "leaky"\ninputs = ["docs/*.md"]\n\n'
        "[[steps]]\n"
        'id = "terms"\nmodule = "builtin.terms"\nparams = { min_count = 1 }\n\n'
        "[[steps]]\n"
        'id = "leaky"\nmodule = "plugins/leaky.py:Leaky"\nprofile = "p1"\n'
        f'params = {{ api_key = "{plain}", lang = "en" }}\n\n'
        "[[steps]]\n"
        'id = "warner"\nmodule = "plugins/warner.py:Warner"\n\n'
        f"[steps.params]\nnotes = {_toml_strings(tokens)}\n"
    )
    url_pw = rnd(20)
    needles["profile_url_password"] = (url_pw,)
    profile_token = corpus["gitlab"][0]
    model_part = rnd(48)
    needles["profile_model"] = (model_part,)
    model = "echo-1-" + "s" + "k-" + model_part  # glued to `-`: redacted since the fix
    glued_part = rnd(48)
    needles["glued_print"] = (glued_part,)
    (pipe / "profiles.toml").write_text(
        "[profiles.p1]\n"
        f'provider = "offline"\nmodel = "{model}"\n'
        f'base_url = "https://svc:{url_pw}@llm.example.com/v1"\n'
        'api_key_env = "RJ_API_KEY"\n'
        f'params = {{ api_key = "{plain}", note = "{profile_token}", temperature = 0.2 }}\n'
    )
    env = {
        "RJ_PLANTED": json.dumps(tokens),
        "RJ_GLUED": "s" + "k-" + glued_part,
        "RJ_PLAIN": plain,
        "RJ_API_KEY": corpus["openai_project"][0],
        "AWS_SECRET_ACCESS_KEY": corpus["aws_secret_access_key"][0].rsplit(" ", 1)[-1],
        "GITHUB_TOKEN": corpus["github_ghp"][0],
    }
    sets = ["--set", f"api_token={plain}", "--set", f"db_password={plain}"]
    for i, token in enumerate(tokens):
        sets += ["--set", f"k{i}={token}"]
    return {
        "pipeline": pipe / "pipeline.toml",
        "profiles": pipe / "profiles.toml",
        "env": env,
        "sets": sets,
        "needles": needles,
        "count": len(tokens),
    }


class TestRedactionEverywhere:
    def test_planted_corpus_never_appears(self, cli, tmp_path: Path, planted) -> None:
        out, cache, dbg = tmp_path / "out", tmp_path / "cache", tmp_path / "dbg"
        base = [
            "run",
            str(planted["pipeline"]),
            "--output-root",
            str(out),
            "--cache-root",
            str(cache),
            "--debug-root",
            str(dbg),
            "--profiles-file",
            str(planted["profiles"]),
            "--debug",
            "trace",
            "--no-progress",
            *planted["sets"],
        ]
        streams: list[tuple[str, str]] = []
        shown: list[str] = []

        ok, ok_doc = cli.json(*base, env=planted["env"])  # zz.md does not explode
        assert ok.returncode == 0, ok.stderr
        streams.append((ok.stdout, ok.stderr))
        run_ids = [ok_doc["run_id"]]
        failed_stderr = []
        for part in range(3):
            proc, doc = cli.json(*base, env={**planted["env"], "RJ_RAISE_PART": str(part)})
            assert proc.returncode == 1, proc.stderr
            assert doc["status"] == "failed"
            streams.append((proc.stdout, proc.stderr))
            failed_stderr.append(proc.stderr)
            run_ids.append(doc["run_id"])
        for run_id in run_ids:
            events = cli("journal", "show", run_id, "--json", "--output-root", str(out))
            assert events.returncode == 0, events.stderr
            shown.append(events.stdout)

        needles = planted["needles"]
        # every row of the journal database, compressed payloads decompressed
        states, compressed = journal_states(out / "journal.sqlite3")
        assert len(states) > 50 and compressed > 0
        leaked_rows = {i: leaks(state, needles) for i, state in enumerate(states)}
        assert {i: names for i, names in leaked_rows.items() if names} == {}
        for stdout, stderr in streams:
            assert leaks(stdout.encode(), needles) == []
            assert leaks(stderr.encode(), needles) == []
        for text in shown:
            assert leaks(text.encode(), needles) == []
        files = files_under(out, cache, dbg)
        assert len(files) > 20
        expand = Expanded()
        leaked = {str(p): leaks(expand(p), needles) for p in files}
        assert {k: v for k, v in leaked.items() if v} == {}
        # compressed content was really looked into
        assert expand.checkpoints > 0 and expand.plans > 0
        assert expand.frames >= expand.compressed_checkpoints + expand.plans

        # The corpus really reached every boundary (the test is not vacuous).
        bundle = Path(ok_doc["debug_bundle"])
        trace = [
            json.loads(x) for x in (bundle / "trace" / "events.jsonl").read_text().splitlines()
        ]
        material = [r for r in trace if r["kind"] == "module" and r["name"] == "planted"]
        assert material
        data = material[0]["data"]["data"]
        assert len(data["tokens"]) == planted["count"]
        assert all("[REDACTED" in t for t in data["tokens"])
        assert data["api_key"] == "[REDACTED]" and data["headers"]["Authorization"] == "[REDACTED]"
        assert data["overrides"]["api_token"] == "[REDACTED]"
        assert any(r["kind"] == "llm" and r["name"] == "request" for r in trace)
        command = json.loads((bundle / "summary" / "command.json").read_text())
        assert command["overrides"]["api_token"] == "[REDACTED]"
        assert command["overrides"]["k0"] == "[REDACTED]"  # credential-shaped value: marker
        resolution = json.loads((bundle / "summary" / "resolution.json").read_text())
        step = next(s for s in resolution["pipeline"]["steps"] if s["id"] == "leaky")
        assert step["params"]["api_key"] == "[REDACTED]"
        assert "api_key" not in step["profile"]["params"]  # not even a marker: non-secret view
        assert "[REDACTED:gitlab_token]" in step["profile"]["params"]["note"]
        assert step["profile"]["api_key_env"] == "[REDACTED]"  # over-redacted: a key name
        assert "[REDACTED:url_password]" in step["profile"]["base_url"]
        warnings = json.loads((bundle / "summary" / "warnings.json").read_text())
        leaky_warnings = [w for w in warnings["warnings"] if w["step"] == "leaky"]
        assert len(leaky_warnings) == 4 * 2  # two lanes, four warnings each
        assert all("[REDACTED:" in w["message"] for w in leaky_warnings)
        # every token reached a warning (from the params) and was redacted there
        warner = [w for w in warnings["warnings"] if w["step"] == "warner"]
        assert len(warner) == (planted["count"] + 1) * 2
        assert all("[REDACTED:" in w["message"] for w in warner)
        report = json.loads(Path(ok_doc["report"]).read_text())
        for doc in (ok_doc, report):
            assert [w for w in doc["warnings"] if w["step"] == "warner"] == [
                {k: w[k] for k in ("lane", "message", "step")} for w in warner
            ]
        for stderr in failed_stderr:
            assert "upstream rejected credentials" in stderr and "[REDACTED:" in stderr
        allocated = json.loads(shown[0])["events"][0]
        assert allocated["type"] == "RunAllocated"
        assert "api_token=[REDACTED]" in allocated["data"]["argv"]
        observed = [e for e in json.loads(shown[0])["events"] if e["type"] == "ProfileObserved"]
        assert [e["data"]["model"] for e in observed] == ["echo-1-[REDACTED:openai_api_key]"]
        # the plugin's print() reached stderr, redacted, its last partial line included
        printed = [line for line in ok.stderr.splitlines() if line.startswith("leaky ")]
        assert printed
        assert all("[REDACTED:" in line for line in printed)
        assert "leaky glued:m-[REDACTED:openai_api_key]" in printed


RAISING_PLUGIN = """
import os

raise RuntimeError("cannot start: token " + os.environ["RJ_IMPORT_TOKEN"])
"""

DECLARING_PLUGIN = """
import os

from runjournal.domain.modules import Module, Normalized


class Declares(Module):
    name = "test.declares"
    fingerprint = "test.declares/1"
    artifact_kind = "declares"
    schema = "test.declares/" + os.environ["RJ_SCHEMA_TOKEN"]

    def extract(self, chunk, ctx):
        return 0

    def merge(self, parts, ctx):
        return 0

    def normalize(self, merged, ctx):
        return Normalized(merged)
"""


def _one_step_pipeline(root: Path, name: str, plugin: str) -> Path:
    pipe = root / name
    (pipe / "docs").mkdir(parents=True)
    (pipe / "plugin.py").write_text(plugin)
    (pipe / "docs" / "a.md").write_text("# A\n\nsome text\n")
    (pipe / "pipeline.toml").write_text(
        f'name = "{name}"\ninputs = ["docs/*.md"]\n\n'
        '[[steps]]\nid = "only"\nmodule = "plugin.py:Declares"\n'
    )
    return pipe / "pipeline.toml"


class TestResolutionFailuresLeakNothing:
    def test_plugin_import_error_and_credential_metadata(self, cli, tmp_path: Path) -> None:
        import_part, glued_part, schema_part = rnd(36), rnd(48), rnd(36)
        needles = {
            "import_token": (import_part,),
            "import_glued": (glued_part,),
            "schema_token": (schema_part,),
        }
        env = {
            # a GitHub token, then an OpenAI key glued to `m-` (both redacted)
            "RJ_IMPORT_TOKEN": "gh" + "p_" + import_part + " m-" + "s" + "k-" + glued_part,
            "RJ_SCHEMA_TOKEN": "gh" + "o_" + schema_part,
        }
        out, cache, dbg = tmp_path / "out", tmp_path / "cache", tmp_path / "dbg"
        roots = ["--output-root", str(out), "--cache-root", str(cache), "--debug-root", str(dbg)]
        raising = _one_step_pipeline(tmp_path, "raising", RAISING_PLUGIN)
        declaring = _one_step_pipeline(tmp_path, "declaring", DECLARING_PLUGIN)

        stderrs = []
        for pipeline in (raising, declaring):
            proc = cli("run", str(pipeline), *roots, "--debug", "summary", "--no-progress", env=env)
            assert proc.returncode == 2, proc.stderr  # found before the run (issue 32)
            assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
            stderrs.append(proc.stderr)
            checked = cli("check", str(pipeline), env=env)
            assert checked.returncode == 2 and checked.stderr == proc.stderr

        for text in stderrs:
            assert leaks(text.encode(), needles) == []
        # Nothing allocated, so nothing written that could hold it.
        assert files_under(out, cache, dbg) == []

        # the failures really carried the planted text, redacted
        expected = "cannot start: token [REDACTED:github_token] m-[REDACTED:openai_api_key]"
        assert expected in stderrs[0]
        assert "declares a credential-shaped `schema`" in stderrs[1]


class TestJournalUrlsInConfigLeakNothing:
    """A journal URL's password (every URL password of the corpus, and ones holding
    `/`, `#`, `?`, `@` and spaces) set in the pipeline file, the user config file, the
    environment or a flag: `config show` (text, `--json`) and a run whose journal cannot
    be opened (loopback port 1) show it nowhere, and the run writes nothing with it."""

    def test_config_show_and_run(self, cli, tmp_path: Path) -> None:
        corpus = planted_corpus(secrets.token_hex(8))
        passwords = [e.secret for e in corpus if e.shape == "url_password"]
        passwords += [rnd(6) + c + rnd(6) for c in ("/", "#", "?", "@", " ", "/#? @")]
        needles = {f"pw{i}": (pw,) for i, pw in enumerate(passwords)}
        out, cache, dbg = tmp_path / "out", tmp_path / "cache", tmp_path / "dbg"
        roots = ["--output-root", str(out), "--cache-root", str(cache), "--debug-root", str(dbg)]
        user_config = cli.home / ".config" / "runjournal" / "config.toml"
        user_config.parent.mkdir(parents=True)
        streams: list[str] = []
        for i, pw in enumerate(passwords):
            url = f"postgresql://rj:{pw}@127.0.0.1:1/rj?connect_timeout=2"
            pipeline = _one_step_pipeline(tmp_path / f"p{i}", "urls", DECLARING_PLUGIN)
            where = i % 4
            text = pipeline.read_text()
            if where == 0:
                pipeline.write_text(text + f"\n[runjournal]\njournal = {json.dumps(url)}\n")
            elif where == 1:
                user_config.write_text(f"journal = {json.dumps(url)}\n")
            flag = ["--journal", url] if where == 3 else []
            env = {"RJ_SCHEMA_TOKEN": "v1"}  # the plugin's schema: nothing secret here
            if where == 2:
                env["RUNJOURNAL_JOURNAL"] = url
            shown = cli("config", "show", str(pipeline), *roots, *flag, env=env)
            assert shown.returncode == 0, shown.stderr
            assert "postgresql://rj:***@127.0.0.1:1/rj" in shown.stdout
            as_json = cli("config", "show", str(pipeline), *roots, *flag, "--json", env=env)
            assert as_json.returncode == 0, as_json.stderr
            assert "postgresql://rj:***@127.0.0.1:1/rj" in as_json.stdout
            run = cli("run", str(pipeline), *roots, *flag, "--json", "--no-progress", env=env)
            assert run.returncode != 0 and "[REDACTED:url_password]" in run.stdout
            streams += [shown.stdout, shown.stderr, as_json.stdout, as_json.stderr]
            streams += [run.stdout, run.stderr]
            user_config.write_text("")
        for stream in streams:
            assert leaks(stream.encode(), needles) == []
        expand = Expanded()
        leaked = {str(p): leaks(expand(p), needles) for p in files_under(out, cache, dbg)}
        assert {k: v for k, v in leaked.items() if v} == {}
