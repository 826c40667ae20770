"""Redaction: planted secrets never survive, plain text does, results are fixed points.

Every secret-shaped token here is assembled at run time (string concatenation) so the
repository never holds a literal that a push-protection scanner would flag.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import pathlib
import random
import time
import unicodedata
from collections.abc import Callable

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runjournal.domain.redaction import (
    SECRET_MARKER,
    SHAPE_NAMES,
    find_secrets,
    is_credential_shaped,
    is_secret_key,
    redact_argv,
    redact_obj,
    redact_text,
    redact_url,
    redact_value,
    safe_error_text,
    scanning,
    shapes,
    views,
)
from support.paths import REPO
from support.secret_corpus import ALNUM as _ALNUM
from support.secret_corpus import (
    Planted,
    b64url,
    bare_aws_secret,
    hexs,
    pem,
    planted_corpus,
    rand,
    upper,
)

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PLANTED = planted_corpus()
PLANTED_IDS = [f"{p.shape}-{i}" for i, p in enumerate(PLANTED)]

EMBEDDINGS: dict[str, Callable[[str], tuple[str, list[str]]]] = {
    "bare": lambda s: (s, []),
    "prose": lambda s: (
        f"While retrying step extract we logged {s} and then carried on.",
        ["While retrying step extract we logged", "and then carried on."],
    ),
    "json": lambda s: (
        json.dumps({"message": s, "step": "extract_entities", "attempt": 2}),
        ['"step": "extract_entities"', '"attempt": 2', '{"message": "'],
    ),
    "url": lambda s: (
        f"GET https://example.com/callback?page=2&next={s} HTTP/1.1",
        ["GET https://example.com/callback?page=2&next=", " HTTP/1.1"],
    ),
    "multiline": lambda s: (
        f"first line of the report\n    {s}\nlast line: ok",
        ["first line of the report\n", "\nlast line: ok"],
    ),
}


# --------------------------------------------------------------------------------------
# Planted corpus
# --------------------------------------------------------------------------------------


def test_corpus_covers_every_shape_and_at_least_twenty() -> None:
    assert len(SHAPE_NAMES) >= 20
    assert len(set(SHAPE_NAMES)) == len(SHAPE_NAMES)
    assert {p.shape for p in PLANTED} == set(SHAPE_NAMES)


@pytest.mark.parametrize("planted", PLANTED, ids=PLANTED_IDS)
@pytest.mark.parametrize("embedding", list(EMBEDDINGS))
def test_planted_secret_never_survives_and_context_does(planted: Planted, embedding: str) -> None:
    text, context = EMBEDDINGS[embedding](planted.text)
    out = redact_text(text)
    assert planted.secret not in out
    assert "[REDACTED:" in out
    for piece in context:
        assert piece in out
    assert redact_text(out) == out
    assert find_secrets(out) == []


@pytest.mark.parametrize("planted", PLANTED, ids=PLANTED_IDS)
def test_planted_secret_is_named_after_its_shape(planted: Planted) -> None:
    spans = find_secrets(planted.text)
    start = planted.text.index(planted.secret)
    covering = [name for s, e, name in spans if s <= start < e]
    assert covering == [planted.shape]


@pytest.mark.parametrize("planted", PLANTED, ids=PLANTED_IDS)
def test_planted_secret_is_credential_shaped(planted: Planted) -> None:
    assert is_credential_shaped(planted.text)


def test_context_words_around_values_are_kept() -> None:
    pw = "Pw-" + rand(14, 90)
    assert redact_text("postgresql://app:" + pw + "@db.internal:5432/app") == (
        "postgresql://app:[REDACTED:url_password]@db.internal:5432/app"
    )
    tok = rand(30, 91) + "9"
    assert redact_text("Authorization: Bearer " + tok) == (
        "Authorization: Bearer [REDACTED:authorization]"
    )
    assert redact_text('{"password": "' + pw + '", "user": "bob"}') == (
        '{"password": "[REDACTED:generic_secret]", "user": "bob"}'
    )


def test_pem_with_escaped_newlines_in_json_is_redacted_through_end_line() -> None:
    block, line = pem()
    doc = json.dumps({"key_material": block, "after": "kept"})
    assert "\\n" in doc
    out = redact_text(doc)
    assert line not in out
    assert "END" not in out
    assert '"after": "kept"' in out


def test_pem_without_end_line_redacts_the_body() -> None:
    block, line = pem()
    truncated = block.split("-----END")[0]
    out = redact_text("dump: " + truncated)
    assert line not in out
    assert out.startswith("dump: [REDACTED:private_key]")


def test_digest_authorization_hides_all_parameters() -> None:
    resp = hexs(32, 92)
    text = 'Authorization: Digest username="bob", realm="x", response="' + resp + '"'
    out = redact_text(text)
    assert resp not in out
    assert out.startswith("Authorization: Digest [REDACTED:authorization]")


def test_secret_inside_secret_context_is_one_span_named_specifically() -> None:
    ghp = "gh" + "p_" + rand(36, 93)
    assert find_secrets("GITHUB_TOKEN=" + ghp) == [(13, 13 + len(ghp), "github_token")]
    _, _, name = find_secrets("Authorization: Bearer " + PLANTED_JWT)[0]
    assert name == "jwt"


PLANTED_JWT = next(p.secret for p in PLANTED if p.shape == "jwt")


@pytest.mark.parametrize(
    "text",
    [
        "The key to a good pipeline is a journal you can replay.",
        "max_tokens=4096 temperature=0.2",
        "author: Jane Doe; authors: 3; passages: 12",
        "cache_key=sha256:" + "ab" * 32,
        "step extract_entities finished in 1.2s",
        "sha256:" + "0f" * 32,
        "2024-01-01T12:00:00Z run started",
        "https://example.com/docs/page?lang=en",
        "mail bob@example.com about git@github.com:org/repo.git",
        "task-runner-with-a-very-long-name-here and disk-usage-monitor-service",
        "Bearer authentication failed for this request",
        "bearer tokens are opaque",
        "sk-learn is not a key; ghp_short neither",
        "AKIA alone is fine",
        "password == other  # a comparison",
        "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG AGAIN",
        "",
        "[REDACTED] and [REDACTED:github_token] stay as they are",
    ],
)
def test_plain_text_is_returned_unchanged(text: str) -> None:
    assert redact_text(text) == text
    assert find_secrets(text) == []
    assert not is_credential_shaped(text)


def test_redact_text_returns_same_object_when_nothing_found() -> None:
    text = "nothing to see here, carry on: ok"
    assert redact_text(text) is text


def test_repository_sources_hold_no_secret_literals() -> None:
    """The module, these tests and the docs note never spell a token out."""
    contextual = {
        "generic_secret",
        "authorization",
        "bearer_token",
        "cookie_header",
        "url_password",
        "aws_secret_access_key",
        "command_line_secret",
        "request_signature",
    }
    repo = REPO
    paths = sorted((repo / "domain" / "redaction").glob("*.py"))
    assert len(paths) >= 6
    paths += [pathlib.Path(__file__), repo / "tests" / "support" / "secret_corpus.py"]
    paths += [repo / "README.md"]
    paths += sorted((repo / "docs").glob("*.md"))
    for path in paths:
        assert path.exists(), path
        found = [s for s in find_secrets(path.read_text()) if s[2] not in contextual]
        assert found == [], (path, found)


# --------------------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------------------

SECRET_KEYS = [
    "password",
    "PASSWORD",
    "passwd",
    "pwd",
    "db_password",
    "DB_PASSWORD",
    "dbpassword",
    "db_pass",
    "secret",
    "client_secret",
    "clientSecret",
    "token",
    "access_token",
    "accessToken",
    "refresh-token",
    "XAuthToken",
    "x-auth-token",
    "xapitoken",
    "apikey",
    "api_key",
    "apiKey",
    "API_KEY",
    "APIKey",
    "x-api-key",
    "openai.api_key",
    "auth",
    "Authorization",
    "cookie",
    "Set-Cookie",
    "session",
    "sessionId",
    "credential",
    "credentials",
    "aws.credentials",
    "private_key",
    "privateKey",
    "privatekey",
    "access_key",
    "AccessKey",
    "dsn",
    "SENTRY_DSN",
    "github-token",
    "passwords",
]
PLAIN_KEYS = [
    "max_tokens",
    "maxTokens",
    "prompt_tokens",
    "tokens",
    "tokenizer",
    "author",
    "authors",
    "authority",
    "passages",
    "passage",
    "compass",
    "bypass_cache",
    "model",
    "temperature",
    "key",
    "cache_key",
    "monkey",
    "keyboard",
    "description",
    "path",
    "",
]


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_secret_keys(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", PLAIN_KEYS)
def test_plain_keys(key: str) -> None:
    assert not is_secret_key(key)


def test_secret_marker_constant() -> None:
    assert SECRET_MARKER == "[REDACTED]"


# --------------------------------------------------------------------------------------
# Structured data
# --------------------------------------------------------------------------------------


class Color(enum.Enum):
    RED = 1


class Profile(msgspec.Struct, frozen=True):
    provider: str
    api_key: str
    params: dict[str, object]


@dataclasses.dataclass
class Resolution:
    model: str
    session: str


def test_redact_obj_hides_secret_keys_and_shapes_without_mutating() -> None:
    ghp = "gh" + "p_" + rand(36, 94)
    data = {
        "api_key": "plain-value",
        "nested": {"Password": ["a", "b"], "note": "used " + ghp},
        "items": [{"token": 123}, ("ok", ghp)],
        "blob": b"raw " + ghp.encode() + b" \xff end",
        b"byte_key": "fine",
        "flags": {1, 2},
        "max_tokens": 100,
        "author": "Jane",
        "color": Color.RED,
        "none": None,
        7: "int key " + ghp,
    }
    before = copy.deepcopy(data)
    out = redact_obj(data)
    assert data == before
    assert out == {
        "api_key": SECRET_MARKER,
        "nested": {"Password": SECRET_MARKER, "note": "used [REDACTED:github_token]"},
        "items": [{"token": SECRET_MARKER}, ("ok", "[REDACTED:github_token]")],
        "blob": "raw [REDACTED:github_token] \udcff end",
        "byte_key": "fine",
        "flags": {1, 2},
        "max_tokens": 100,
        "author": "Jane",
        "color": Color.RED,
        "none": None,
        7: "int key [REDACTED:github_token]",
    }


def test_redact_obj_turns_structs_and_dataclasses_into_redacted_dicts() -> None:
    key = "sk" + "-" + rand(48, 95)
    profile = Profile("openai", key, {"base_url": "https://u:" + rand(10, 96) + "@h/v1"})
    out = redact_obj([profile, Resolution("gpt", "abc")])
    assert out == [
        {
            "provider": "openai",
            "api_key": SECRET_MARKER,
            "params": {"base_url": "https://u:[REDACTED:url_password]@h/v1"},
        },
        {"model": "gpt", "session": SECRET_MARKER},
    ]
    assert profile.api_key == key


def test_redact_value_uses_the_key_then_the_shape() -> None:
    assert redact_value("client_secret", {"anything": 1}) == SECRET_MARKER
    assert (
        redact_value(None, "x-" + "AK" + "IA" + upper(16, 97)) == "x-[REDACTED:aws_access_key_id]"
    )
    assert redact_value("model", "gpt-4o") == "gpt-4o"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30) | st.binary(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["a", "token", "max_tokens", "note"]), children, max_size=4
        )
    ),
    max_leaves=20,
)


@PROPERTY
@given(json_values)
def test_redact_obj_never_mutates_or_raises(value: object) -> None:
    before = copy.deepcopy(value)
    redact_obj(value)
    assert value == before


# --------------------------------------------------------------------------------------
# Command lines
# --------------------------------------------------------------------------------------


def test_redact_argv() -> None:
    pw = rand(12, 98)
    ghp = "gh" + "p_" + rand(36, 99)
    argv = [
        "runjournal",
        "run",
        "--set",
        "api_key=" + pw,
        "--set=db.password=" + pw,
        "--set",
        "model=gpt-4o",
        "--set",
        "note=" + ghp,
        "--api-key",
        pw,
        "--token=" + pw,
        "--dsn",
        "postgresql://u:" + pw + "@h/db",
        "--out",
        "results",
        "--",
        "--token",
        "positional",
    ]
    before = list(argv)
    out = redact_argv(argv)
    assert argv == before
    assert out == [
        "runjournal",
        "run",
        "--set",
        "api_key=[REDACTED]",
        "--set=db.password=[REDACTED]",
        "--set",
        "model=gpt-4o",
        "--set",
        "note=[REDACTED:github_token]",
        "--api-key",
        SECRET_MARKER,
        "--token=[REDACTED]",
        "--dsn",
        SECRET_MARKER,
        "--out",
        "results",
        "--",
        "--token",
        "positional",
    ]
    assert all(pw not in arg and ghp not in arg for arg in out)
    assert redact_argv(out) == out


def test_redact_argv_edges() -> None:
    assert redact_argv(["--token", "--verbose"]) == ["--token", "--verbose"]
    assert redact_argv(["--set"]) == ["--set"]
    assert redact_argv(["--password"]) == ["--password"]
    assert redact_argv(["-", "--max-tokens", "5"]) == ["-", "--max-tokens", "5"]
    url = "postgresql://u:" + rand(8, 100) + "@h/db"
    assert redact_argv(["sync", url]) == ["sync", "postgresql://u:[REDACTED:url_password]@h/db"]


# --------------------------------------------------------------------------------------
# Error text
# --------------------------------------------------------------------------------------

_BIDI = {chr(c) for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]}


def assert_safe(out: str, limit: int) -> None:
    assert len(out.encode("utf-8")) <= limit
    for ch in out:
        assert ch not in _BIDI
        assert unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Zl", "Zp"), repr(ch)


def test_safe_error_text_escapes_controls_ansi_and_bidi() -> None:
    text = "line1\nline2\ttab \x1b[31mred\x1b[0m \u202eevil\u202c \u2066iso\u2069 zw\u200b\u2028"
    out = safe_error_text(text)
    assert out == (
        "line1\\x0aline2\\x09tab \\x1b[31mred\\x1b[0m \\u202eevil\\u202c "
        "\\u2066iso\\u2069 zw\\u200b\\u2028"
    )
    assert_safe(out, 500)


def test_safe_error_text_replaces_lone_surrogates() -> None:
    text = b"bad \xff byte".decode("utf-8", "surrogateescape") + " and \ud800"
    out = safe_error_text(text)
    assert out == "bad \\xff byte and \\ud800"
    out.encode("utf-8")


def test_safe_error_text_redacts() -> None:
    pw = rand(12, 101)
    out = safe_error_text("cannot connect to postgresql://app:" + pw + "@db/app\nretrying")
    assert pw not in out
    assert out == "cannot connect to postgresql://app:[REDACTED:url_password]@db/app\\x0aretrying"


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("abc", 3, "abc"),
        ("abcd", 3, "…"),
        ("abcd", 2, ""),
        ("abcd", 0, ""),
        ("é" * 10, 11, "éééé…"),
        ("a" * 8 + "\n", 10, "a" * 7 + "…"),
        ("ok", 500, "ok"),
    ],
)
def test_safe_error_text_bounds_on_character_boundaries(
    text: str, limit: int, expected: str
) -> None:
    out = safe_error_text(text, limit)
    assert out == expected
    assert_safe(out, limit)


def _escaped_and_cut(text: str, limit: int) -> str:
    """The character loop of `safe_error_text` after redaction, as it was before its
    printable-ASCII shortcut (issue 29): the oracle the shortcut must agree with."""
    from runjournal.domain.redaction.error_text import _escape_char, _needs_escape

    pieces: list[str] = []
    used, cut_at = 0, None
    for ch in text:
        piece = _escape_char(ch) if _needs_escape(ch) else ch
        size = len(piece.encode("utf-8"))
        if used + 3 <= limit:
            cut_at = len(pieces)
        if used + size > limit:
            return "" if cut_at is None else "".join(pieces[:cut_at]) + "\u2026"
        pieces.append(piece)
        used += size
    return "".join(pieces)


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x2070), max_size=40)
    | st.text(alphabet=st.characters(min_codepoint=0x1F, max_codepoint=0x80), max_size=40),
    limit=st.integers(min_value=0, max_value=45),
)
def test_safe_error_text_shortcut_agrees_with_the_character_loop(text: str, limit: int) -> None:
    # printable ASCII that fits is returned as it is; anything else goes through the loop
    assert safe_error_text(text, limit) == _escaped_and_cut(redact_text(text), limit)


def test_safe_error_text_default_limit() -> None:
    out = safe_error_text("x" * 10_000)
    assert len(out.encode()) == 500
    assert out.endswith("…")


_NASTY = [
    *("\n", "\r", "\t", "\x1b[2J", "\x00", "\x7f", "\x85", "\u2028", "\u200b", "\ufeff"),
    *("\u202e", "\u2067", "\udcff", "\ud800", "é", "日本", "🙂", "password=", "Bearer "),
]
_nasty = st.sampled_from(_NASTY)
error_texts = st.lists(
    st.text(st.characters(exclude_categories=()), max_size=20) | _nasty, max_size=30
).map("".join)


@PROPERTY
@given(error_texts, st.integers(min_value=0, max_value=120))
def test_safe_error_text_is_printable_bounded_utf8(text: str, limit: int) -> None:
    out = safe_error_text(text, limit)
    assert_safe(out, limit)
    if len(text.encode("utf-8", "surrogatepass")) * 10 <= limit:
        assert not out.endswith("…") or text.endswith("…")


# --------------------------------------------------------------------------------------
# Properties of redact_text
# --------------------------------------------------------------------------------------

_FRAGMENTS = [
    "password",
    "api_key",
    "token",
    "secret",
    "aws",
    "key",
    "Cookie",
    "Authorization",
    "Bearer ",
    "Digest ",
    "=",
    ":",
    ":=",
    "=>",
    "==",
    " ",
    "\t",
    "\n",
    '"',
    "'",
    "\\",
    "\\n",
    ",",
    ";",
    "&",
    "/",
    "+",
    "@",
    "://",
    "-----BEGIN ",
    "PRIV" + "ATE KEY-----",
    "-----END ",
    "ey" + "J",
    ".",
    "AK" + "IA",
    "sk" + "-",
    "sk" + "-ant-api03-",
    "gh" + "p_",
    "xo" + "xb-",
    "[REDACTED",
    "[REDACTED:jwt]",
    "]",
    rand(40, 102, _ALNUM + "/+"),
    rand(20, 103),
    upper(16, 104),
    # the shapes added with the gitleaks / detect-secrets comparison, and the gaps
    "--pass" + "word ",
    "-p",
    "-u ",
    "mysql ",
    "curl ",
    "docker login ",
    "-passin pass:",
    "ya" + "29.",
    "Private-",
    "PuTTY-User-Key" + "-File-2:",
    "Q~",
    ":AA",
    "|",
    "%7C",
    "-us",
    "_mmk",
    "A" * 21,
    "ZX" + "lK",
    "sig=",
    "X-Amz-Signature=",
    "discord.com/api/webhooks/",
    "ä",
    "\\u00e4",
    "pässword",
    "contraseña",
    "4b" + "1d",
    "hv" + "s.",
    "MT",
    rand(30, 105),
    "1234567890",
    "İ",
    "ß",
]
fragment_texts = st.lists(st.sampled_from(_FRAGMENTS) | st.text(max_size=8), max_size=25).map(
    "".join
)


@PROPERTY
@given(fragment_texts)
def test_redact_text_is_idempotent_and_total(text: str) -> None:
    out = redact_text(text)
    assert redact_text(out) == out
    assert find_secrets(out) == []


@PROPERTY
@given(st.text(max_size=200))
def test_redact_text_never_raises_on_any_text(text: str) -> None:
    out = redact_text(text)
    assert redact_text(out) == out


@PROPERTY
@given(fragment_texts)
def test_spans_are_sorted_disjoint_and_within_text(text: str) -> None:
    spans = find_secrets(text)
    last = 0
    for start, end, name in spans:
        assert last <= start < end <= len(text)
        assert name in SHAPE_NAMES
        last = end


@PROPERTY
@given(fragment_texts)
def test_candidate_preselection_never_drops_a_matching_shape(text: str) -> None:
    view = views.View(text)
    chosen = set(scanning.candidate_shapes_short(view))
    for index, shape in enumerate(shapes.SHAPES):
        if list(shape.spans(views.View(text))):
            assert index in chosen, shape.name


@PROPERTY
@given(fragment_texts)
def test_needle_lookup_and_compiled_alternation_choose_the_same_shapes(text: str) -> None:
    # A process's first short scans look for each needle with `in`, later ones use the
    # compiled alternation (docs/performance.md "Start-up"): the same shapes either way.
    view = views.View(text)
    assert scanning._by_needles(view) == scanning._by_index(view)


def test_both_candidate_paths_see_an_overlapping_needle() -> None:
    view = views.View("pypi-A" + "g" + "hp_" + rand(36, 105))
    by_needles, by_index = scanning._by_needles(view), scanning._by_index(view)
    assert by_needles == by_index
    assert shapes.SHAPE_NAMES.index("github_token") in by_needles


def test_needle_hidden_by_an_overlapping_needle_is_still_found() -> None:
    # The pre-selection regex consumes "pypi-Ag", which hides the "gh" + "p_" needle.
    token = "g" + "hp_" + rand(36, 105)
    text = "pypi-A" + token
    assert find_secrets(text) == [(6, len(text), "github_token")]
    assert find_secrets("aw" + "secret: " + "hunter2") == [(10, 17, "generic_secret")]


@PROPERTY
@given(
    st.text(max_size=40),
    st.sampled_from(PLANTED),
    st.text(max_size=40),
    st.sampled_from([" ", "\n", "\t"]),
)
def test_planted_secret_never_survives_random_surroundings(
    before: str, planted: Planted, after: str, gap: str
) -> None:
    out = redact_text(before + gap + planted.text + gap + after)
    assert planted.secret not in out


# --------------------------------------------------------------------------------------
# Performance guards
# --------------------------------------------------------------------------------------

_ADVERSARIAL = {
    "pem_heads": ("-----BEGIN " + "PRIV" + "ATE KEY----- ") * 3000,
    "jwt_prefixes": "ey" + "J" * 1 + ("ey" + "J") * 30000,
    "separators": ":=" * 50000,
    "assign_chain": "password=" * 10000,
    "open_quotes": 'password="' * 10000,
    "url_chain": "://a:" * 20000,
    "letters": "A" * 100000,
    "aws_words": "aws " * 20000,
    "names": "key" * 30000 + "=x",
    "digest": "authorization: digest a=" * 4000,
    "jwt_payload_dots": (".ey" + "J") * 40000,
    "jwt_segments": ("ey" + "J" + "a" * 8 + ".") * 20000,
    "jwt_glued_runs": ("x" * 50 + ".ey" + "J" + "b" * 10) * 5000,
    "openai_glued": ("xs" + "k-") * 30000,
    "openai_hyphens": ("-s" + "k-") * 30000,
    "openai_almost": ("as" + "k-" + "a" * 31 + ".") * 3000,
    "openai_prefixed": ("zs" + "k-proj-" + "c" * 39 + " ") * 3000,
    "long_options": ("--pass" + "word ") * 30000,
    "dash_runs": "-a" * 60000,
    "glued_options": "x-" * 60000,
    "commands": "mysql -p" * 20000,
    "command_words": "mysql curl sshpass " * 10000,
    "curl_users": "curl -u a:" * 20000,
    "url_spaced": "://a:b c " * 20000,
    "url_one_run": "://a:" + "/" * 100000,
    "url_users": "://" + "a@" * 50000,
    "base64_runs": ("A" * 39 + " ") * 5000,
    "base64_long": "Ab1/" * 50000,
    "putty_heads": ("Private-" + "Lines: ") * 20000,
    "non_ascii_names": "ä=" * 50000,
    "json_escapes": "\\u00e4=" * 30000,
    "signatures": "&sig=" * 40000,
}


@pytest.mark.parametrize("name", list(_ADVERSARIAL))
def test_adversarial_inputs_stay_linear(name: str) -> None:
    text = _ADVERSARIAL[name]
    # cpu of this thread, not wall: a loaded machine (CI, other jobs) stretches wall time
    # by whole seconds, while a super-linear pattern costs minutes of cpu on these inputs
    started = time.thread_time()
    out = redact_text(text)
    safe_error_text(text)
    assert time.thread_time() - started < 3.0
    assert redact_text(out) == out


def test_plain_prose_is_fast() -> None:
    sentence = (
        "the journal records every step so a run can be resumed and explained key author "
        "passage token counts are not secrets, authority session; compass AKIA sk ghp eyJ"
    )
    words = sentence.split(" ")
    rng = random.Random(7)
    prose = " ".join(rng.choice(words) for _ in range(200_000))
    started = time.thread_time()  # cpu, not wall (see above)
    assert redact_text(prose) == prose
    assert time.thread_time() - started < 3.0


# --------------------------------------------------------------------------------------
# Shapes glued to a preceding character
# --------------------------------------------------------------------------------------

GLUED_OPENAI = "sk" + "-" + rand(48, 200)
GLUED_OPENAI_PROJ = "sk" + "-proj-" + rand(60, 201) + "_" + rand(40, 202, _ALNUM + "-_")
GLUED_JWT = (
    b64url({"alg": "RS256"}) + "." + b64url({"sub": "42"}) + "." + rand(43, 203, _ALNUM + "-_")
)
GLUED_NPM = "np" + "m_" + rand(36, 204)
GLUED_AWS = "AK" + "IA" + upper(16, 205)
GLUED: dict[str, tuple[str, str]] = {
    # (token, shape); the token's own prefix is distinctive enough to need no boundary
    "openai": (GLUED_OPENAI, "openai_api_key"),
    "openai_proj": (GLUED_OPENAI_PROJ, "openai_api_key"),
    "jwt": (GLUED_JWT, "jwt"),
    "npm": (GLUED_NPM, "npm_token"),
}


@pytest.mark.parametrize("glue", ["m-", "x_", "a", "Z", "7", "-", "_", "abc.", "q-1_"])
@pytest.mark.parametrize("name", list(GLUED))
def test_shapes_glued_to_a_preceding_character_are_redacted(name: str, glue: str) -> None:
    token, shape = GLUED[name]
    out = redact_text("seen " + glue + token + " here")
    assert out == "seen " + glue + "[REDACTED:" + shape + "] here"
    assert redact_text(out) == out


@pytest.mark.parametrize("glue", ["1", "9", "-", "_", "x", "id="])
def test_aws_key_id_after_a_digit_or_lowercase_is_redacted(glue: str) -> None:
    out = redact_text(glue + GLUED_AWS)
    assert out == glue + "[REDACTED:aws_access_key_id]"


def test_glued_jwt_is_one_span_from_the_first_header_in_its_run() -> None:
    text = "seen x_" + "ey" + "J" + "q" + GLUED_JWT + " ok"
    spans = find_secrets(text)
    assert spans == [(len("seen x_"), len(text) - len(" ok"), "jwt")]


@pytest.mark.parametrize(
    "text",
    [
        # `sk-` inside a word needs a long unbroken body (or a `proj-`-like prefix and 40+)
        "task-runner-with-a-very-long-name-here and disk-usage-monitor-service",
        "risk-internationalization and whisk-counterrevolutionaries",
        "desk-admin-console-for-operators is on the second floor",
        "kiosk-proj-" + "x" * 30 + " is a short slug",
        "npm_install_helper_script_for_the_build",
        "the eyJ prefix alone.eyJ is not a token",
        "xeyJshort.eyJshort.sig",
    ],
)
def test_glued_looking_prose_is_not_redacted(text: str) -> None:
    assert redact_text(text) == text


@PROPERTY
@given(
    st.text(alphabet=_ALNUM + "-_./:= ", max_size=20),
    st.sampled_from(sorted(GLUED)),
    st.text(alphabet=" ,;)\n\"'", max_size=3),
)
def test_glued_secret_never_survives_any_left_neighbour(before: str, name: str, after: str) -> None:
    token, _ = GLUED[name]
    out = redact_text(before + token + after)
    assert token not in out
    assert token[-12:] not in out
    assert redact_text(out) == out


def test_two_github_tokens_glued_together_are_both_redacted():
    first = "gh" + "p_" + "A" * 36
    second = "gh" + "o_" + "B" * 40
    out = redact_text(first + second)
    assert "AAAA" not in out and "BBBB" not in out
    assert out == "[REDACTED:github_token][REDACTED:github_token]"


# --------------------------------------------------------------------------------------
# The gaps of the red-team pass, and what must stay untouched
# --------------------------------------------------------------------------------------

_WORDS = (
    "the",
    "journal",
    "records",
    "every",
    "step",
    "of",
    "a",
    "run",
    "so",
    "it",
    "can",
    "be",
    "resumed",
    "explained",
    "and",
    "audited",
    "passage",
    "author",
    "authority",
    "tokens",
    "compass",
    "keyboard",
    "monkey",
    "cache",
    "sort",
    "index",
    "session",
    "password",
    "token",
    "secret",
    "key",
    "auth",
    "options",
    "flags",
    "value",
    "prompt",
    "docker",
    "run",
    "curl",
    "mysql",
    "AKIA",
    "ghp",
    "sk",
    "eyJ",
    "ya29",
    "Q~",
    "pat.",
    "hvs.",
    "4b1d",
    "dapi",
    "-us",
    "_mmk",
    "EAAA",
)
# No `name: value` / `name = value` separators: after a secret word that is an assignment,
# redacted on purpose (docs/operations.md "Redaction").
_PUNCT = [" ", " ", " ", ", ", ". ", "; ", " - ", " (", ") ", "\n", " == ", " / "]


@st.composite
def ordinary_text(draw: st.DrawFn) -> str:
    """Prose and log lines: words, punctuation, digests, run ids, chunk ids, paths."""
    parts: list[str] = []
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            parts.append(draw(st.sampled_from(["sha256:", ""])) + draw(_HEX64))
        elif kind == 1:
            parts.append(draw(_RUN_ID))
        elif kind == 2:
            parts.append(draw(_HEX40))  # a git commit or SHA-1 digest
        elif kind == 3:
            parts.append("docs/" + draw(st.sampled_from(_WORDS)) + ".md-" + draw(_HEX8))
        else:
            parts.append(draw(st.sampled_from(_WORDS)))
        parts.append(draw(st.sampled_from(_PUNCT)))
    return "".join(parts)


_HEX8 = st.text("0123456789abcdef", min_size=8, max_size=8)
_HEX40 = st.text("0123456789abcdef", min_size=40, max_size=40)
_HEX64 = st.text("0123456789abcdef", min_size=64, max_size=64)
_RUN_ID = st.builds(lambda d, h: f"2026{d:04d}T120000Z-{h}", st.integers(101, 1231), _HEX8)


@PROPERTY
@given(ordinary_text())
def test_ordinary_text_digests_run_ids_and_chunk_ids_are_untouched(text: str) -> None:
    assert redact_text(text) == text
    assert find_secrets(text) == []


@pytest.mark.parametrize(
    "text",
    [
        # command lines and prose about options
        "use --password to set it, or --token when prompted",
        "pass --token and --user to the tool",
        "see the --password-file option and --auth-type basic",
        "docker run -p 8080:80 nginx",
        "mysql -p prompts for the password",
        "curl -u bob https://example.com asks for it",
        "pymysql -pfoo is a word, not a command",
        "a non-secret value",
        # URLs that are not userinfo
        "GET http://localhost:5173/@vite/client 404",
        "see https://registry.example.org:443/@scope/pkg for it",
        "open http://localhost:8080 and mail bob@example.com",
        "ssh://git@github.com:org/repo.git and mail me@example.com",
        # digests, identifiers, a camel-case name without a digit
        "commit " + "0f" * 20 + " and " + "AB" * 20,
        "ThisIsAVeryLongCamelCaseIdentifierNameXY in the stack trace",
        "base64 digest " + "Q29uZ3JhdHVsYXRpb25zIHlvdSBmb3VuZCBpdCBhZ2Fpbg==" + " ok",
        # non-ASCII names that are not secret
        "größe=12 café: ouvert naïve=true 名前: 値",
        "signature: valid, sig: ok",
    ],
)
def test_gap_lookalikes_are_not_redacted(text: str) -> None:
    assert find_secrets(text) == []


@pytest.mark.parametrize(
    "key",
    [
        "pässword",
        "PÄSSWORD",
        "contraseña",
        "Passwort",
        "paßword",
        "\uff50\uff41\uff53\uff53\uff57\uff4f\uff52\uff44",
        "hasło",
        "mot_de_passe",
    ],
)
def test_non_ascii_secret_keys(key: str) -> None:
    assert is_secret_key(key)
    value = rand(14, 700)
    assert redact_obj({key: value}) == {key: SECRET_MARKER}
    assert value not in redact_text(key + "=" + value)


@pytest.mark.parametrize("key", ["größe", "café", "naïve", "名前", "clé_publique", "übersicht"])
def test_non_ascii_plain_keys(key: str) -> None:
    assert not is_secret_key(key)


def test_json_escaped_non_ascii_names_are_read_as_their_letters() -> None:
    value = rand(14, 701)
    doc = json.dumps({"pässword": value, "größe": 3})
    assert "\\u00e4" in doc
    out = redact_text(doc)
    assert value not in out and '"gr\\u00f6\\u00dfe": 3' in out


@pytest.mark.parametrize("special", ["/", "#", "?", " ", "@", "/#? @"])
def test_url_passwords_with_special_characters(special: str) -> None:
    pw = "Pw" + rand(6, 702) + special + rand(8, 703)
    url = "postgresql://app:" + pw + "@db.internal:5432/app"
    shown = "postgresql://app:[REDACTED:url_password]@db.internal:5432/app"
    assert redact_text("warning: cannot reach " + url + " now") == (
        "warning: cannot reach " + shown + " now"
    )
    assert redact_url(url) == shown
    assert redact_url(url, mask="***") == "postgresql://app:***@db.internal:5432/app"


def test_redact_url_hides_query_secrets_and_is_idempotent() -> None:
    pw, q, sig = rand(10, 704), rand(10, 705), hexs(64, 706)
    url = f"postgresql://me:{pw}@db/rj?sslmode=require&password={q}&X-Amz-Signature={sig}"
    masked = redact_url(url, mask="***")
    assert masked == "postgresql://me:***@db/rj?sslmode=require&password=***&X-Amz-Signature=***"
    assert redact_url(masked, mask="***") == masked
    marked = redact_url(url)
    assert pw not in marked and q not in marked and sig not in marked
    assert redact_url(marked) == marked
    assert redact_url("/var/lib/runs/journal.sqlite3") == "/var/lib/runs/journal.sqlite3"
    assert redact_url("sqlite:///var/lib/runs/journal.sqlite3") == (
        "sqlite:///var/lib/runs/journal.sqlite3"
    )
    assert redact_url("http://localhost:5173/@vite/client") == "http://localhost:5173/@vite/client"


def test_bare_aws_secret_needs_to_look_random() -> None:
    secret = bare_aws_secret(707)
    assert find_secrets("got " + secret + ".") == [(4, 44, "aws_secret_access_key")]
    assert find_secrets("got " + secret + "==") == []  # 40 characters plus padding: base64 data
    assert find_secrets("got " + secret + "x") == []  # 41 characters


def test_putty_key_cut_before_its_last_line_is_redacted() -> None:
    body, mac = rand(64, 708, _ALNUM + "+/"), hexs(64, 709)
    key = (
        "PuTTY-User-Key"
        + "-File-3: ssh-ed25519\nEncryption: none\nPrivate-"
        + "Lines: 1\n"
        + body
        + "\nPrivate-"
        + "MAC: "
        + mac
    )
    assert body not in redact_text(key) and mac not in redact_text(key)
    # module output is redacted up to the last newline of a write, then the rest
    head, _, last = key.rpartition("\n")
    pieces = [redact_text(head), redact_text(last)]
    assert not any(body in piece or mac in piece for piece in pieces)


def test_import_compiles_no_regex_and_loads_no_heavy_module() -> None:
    """Start-up time is measured: the package compiles its patterns on first use."""
    import subprocess
    import sys

    probe = (
        "import re, sys\n"
        "calls = []\n"
        "compile = re.compile\n"
        "re.compile = lambda *a, **k: calls.append(a) or compile(*a, **k)\n"
        "import runjournal.domain.redaction as r\n"
        "heavy = sorted({'msgspec', 'dataclasses', 'typing'} & set(sys.modules))\n"
        "print(len(calls), heavy)\n"
        "r.redact_text('password=x')\n"
        "print(len(calls) > 0)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == "0 []"
    assert out[1] == "True"


def _bare_aws_spans_scanned(text: str) -> list[tuple[int, int]]:
    """`_bare_aws_secret_spans` without its first scan for a 40-character base64 run
    (issue 29): the oracle the shortcut must agree with."""
    from runjournal.domain.redaction.finders import (
        _BASE64_BACK,
        _BASE64_FORWARD,
        _BASE64_SPECIAL,
        looks_like_bare_aws_secret,
    )
    from runjournal.domain.redaction.views import View

    view = View(text)
    n, pos, found = len(text), 0, []
    while (special := _BASE64_SPECIAL().search(text, pos)) is not None:
        at = special.start()
        start = n - _BASE64_BACK().match(view.reversed_lowered, n - 1 - at).end()
        end = _BASE64_FORWARD().match(text, at).end()
        pos = max(end, at + 1)
        padded = end < n and text[end] == "="
        if not padded and looks_like_bare_aws_secret(text[start:end]):
            found.append((start, end))
    return found


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(
        st.one_of(
            st.text(alphabet="aB3/+=z9 \n\u212a\u0130.:-", max_size=50),
            st.text(alphabet=_ALNUM + "/+", min_size=38, max_size=42),
        ),
        max_size=4,
    )
)
def test_bare_aws_key_shortcut_agrees_with_the_scan(pieces: list[str]) -> None:
    from runjournal.domain.redaction.finders import _bare_aws_secret_spans
    from runjournal.domain.redaction.views import View

    text = "".join(pieces)
    assert list(_bare_aws_secret_spans(View(text))) == _bare_aws_spans_scanned(text)


def test_bare_aws_key_is_still_found_in_a_warning() -> None:
    key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    out = safe_error_text(f"docs/d000001.md: 3 term(s) dropped near {key} (kept)")
    assert key not in out and "[REDACTED:" in out
