"""Redaction: planted secrets never survive, plain text does, results are fixed points.

Every secret-shaped token here is assembled at run time (string concatenation) so the
repository never holds a literal that a push-protection scanner would flag.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import enum
import json
import pathlib
import random
import string
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
    redact_value,
    safe_error_text,
    scanning,
    shapes,
    views,
)
from support.paths import REPO

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --------------------------------------------------------------------------------------
# Secret builders (run time only)
# --------------------------------------------------------------------------------------

_ALNUM = string.ascii_letters + string.digits


def rand(n: int, seed: int, alphabet: str = _ALNUM) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(n))


def upper(n: int, seed: int) -> str:
    return rand(n, seed, string.ascii_uppercase + string.digits)


def hexs(n: int, seed: int) -> str:
    return rand(n, seed, "0123456789abcdef")


def b64url(data: dict[str, object]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def pem(kind: str = "RSA", newline: str = "\n") -> tuple[str, str]:
    body = [rand(64, 100 + i, _ALNUM + "+/") for i in range(3)]
    head = "-----BEGIN " + kind + " PRIV" + "ATE KEY-----"
    tail = "-----END " + kind + " PRIV" + "ATE KEY-----"
    return newline.join([head, *body, tail]), body[1]


@dataclasses.dataclass(frozen=True)
class Planted:
    """`text` as it would appear in a log line; `secret` must never survive redaction."""

    shape: str
    text: str
    secret: str


def _planted() -> list[Planted]:
    aws_id = "AK" + "IA" + upper(16, 1)
    aws_sts = "AS" + "IA" + upper(16, 2)
    aws_a3t = "A3" + "T" + "X" + upper(16, 3)
    aws_secret = rand(40, 4, _ALNUM + "/+")
    ghp = "gh" + "p_" + rand(36, 5)
    ghs = "gh" + "s_" + rand(36, 6)
    gho = "gh" + "o_" + rand(36, 7)
    pat = "github" + "_pat_" + rand(22, 8) + "_" + rand(59, 9)
    openai = "sk" + "-proj-" + rand(40, 10) + "T3Blbk" + "FJ" + rand(40, 11)
    openai_old = "sk" + "-" + rand(48, 12)
    openai_svc = "sk" + "-svcacct-" + rand(60, 13)
    anthropic = "sk" + "-ant-" + "api03-" + rand(93, 14, _ALNUM + "-_") + "AA"
    anthropic_admin = "sk" + "-ant-" + "admin01-" + rand(80, 15)
    slack_bot = "xo" + "xb-" + rand(12, 16, string.digits) + "-" + rand(24, 17)
    slack_user = "xo" + "xp-" + rand(12, 18, string.digits) + "-" + rand(32, 19)
    google = "AI" + "za" + rand(35, 20, _ALNUM + "-_")
    jwt = (
        b64url({"alg": "HS256", "typ": "JWT"})
        + "."
        + b64url({"sub": "1234567890", "name": "x"})
        + "."
        + rand(43, 21, _ALNUM + "-_")
    )
    stripe = "sk" + "_live_" + rand(24, 22)
    stripe_rk = "rk" + "_test_" + rand(24, 23)
    gitlab = "gl" + "pat-" + rand(20, 24)
    hf = "h" + "f_" + rand(34, 25)
    npm = "np" + "m_" + rand(36, 26)
    pypi = "py" + "pi-" + "AgEIcHlwaS5vcmc" + rand(70, 27, _ALNUM + "-_")
    twilio = "S" + "K" + hexs(32, 28)
    sendgrid = "S" + "G." + rand(22, 29) + "." + rand(43, 30)
    digitalocean = "do" + "p_v1_" + hexs(64, 31)
    age = "AGE-" + "SECRET-KEY-1" + upper(58, 32)
    slack_hook_path = "T" + upper(8, 33) + "/B" + upper(8, 34) + "/" + rand(24, 35)
    bearer = rand(24, 36) + "." + rand(10, 37)
    basic = base64.b64encode(("admin:" + rand(12, 38)).encode()).decode()
    pw = "Pw-" + rand(14, 39)
    cookie = rand(32, 40)
    pem_lf, pem_line = pem()
    pem_crlf, pem_crlf_line = pem("EC", "\r\n")
    pem_ssh, pem_ssh_line = pem("OPENSSH")
    generic = [rand(18, 41 + i) for i in range(6)]
    return [
        Planted("aws_access_key_id", aws_id, aws_id),
        Planted("aws_access_key_id", aws_sts, aws_sts),
        Planted("aws_access_key_id", aws_a3t, aws_a3t),
        Planted("aws_secret_access_key", "aws_secret_access_key = " + aws_secret, aws_secret),
        Planted("aws_secret_access_key", "AWS secret: " + aws_secret, aws_secret),
        Planted("github_token", ghp, ghp),
        Planted("github_token", ghs, ghs),
        Planted("github_token", gho, gho),
        Planted("github_pat", pat, pat),
        Planted("openai_api_key", openai, openai),
        Planted("openai_api_key", openai_old, openai_old),
        Planted("openai_api_key", openai_svc, openai_svc),
        Planted("anthropic_api_key", anthropic, anthropic),
        Planted("anthropic_api_key", anthropic_admin, anthropic_admin),
        Planted("slack_token", slack_bot, slack_bot),
        Planted("slack_token", slack_user, slack_user),
        Planted(
            "slack_webhook", "https://hooks.slack.com/services/" + slack_hook_path, slack_hook_path
        ),
        Planted("google_api_key", google, google),
        Planted("jwt", jwt, jwt),
        Planted("private_key", pem_lf, pem_line),
        Planted("private_key", pem_crlf, pem_crlf_line),
        Planted("private_key", pem_ssh, pem_ssh_line),
        Planted("authorization", "Authorization: Bearer " + bearer, bearer),
        Planted("authorization", "Authorization: Basic " + basic, basic),
        Planted("authorization", "authorization: Token " + bearer, bearer),
        Planted("bearer_token", "Bearer " + bearer, bearer),
        Planted("url_password", "postgresql://app:" + pw + "@db.internal:5432/app", pw),
        Planted("url_password", "redis://:" + pw + "@cache.local:6379/0", pw),
        Planted("stripe_key", stripe, stripe),
        Planted("stripe_key", stripe_rk, stripe_rk),
        Planted("gitlab_token", gitlab, gitlab),
        Planted("huggingface_token", hf, hf),
        Planted("npm_token", npm, npm),
        Planted("pypi_token", pypi, pypi),
        Planted("twilio_api_key", twilio, twilio),
        Planted("sendgrid_api_key", sendgrid, sendgrid),
        Planted("digitalocean_token", digitalocean, digitalocean),
        Planted("age_secret_key", age, age),
        Planted("cookie_header", "Cookie: sid=" + cookie + "; theme=dark", cookie),
        Planted("generic_secret", "password = " + generic[0], generic[0]),
        Planted("generic_secret", "api_key: " + generic[1], generic[1]),
        Planted("generic_secret", "token=" + generic[2], generic[2]),
        Planted("generic_secret", "client_secret: '" + generic[3] + "'", generic[3]),
        Planted("generic_secret", "apikey=" + generic[4], generic[4]),
        Planted("generic_secret", "key = " + generic[5], generic[5]),
    ]


def digits(n: int, seed: int) -> str:
    return rand(n, seed, string.digits)


def lower(n: int, seed: int) -> str:
    return rand(n, seed, string.ascii_lowercase + string.digits)


def bare_aws_secret(seed: int) -> str:
    """A random 40-character AWS secret access key (no context word around it)."""
    return rand(39, seed, _ALNUM + "/+") + "7"


def _planted_gaps() -> list[Planted]:
    """The gaps of the red-team pass (issue 12 item 3): each failed on the old shapes."""
    pws = {c: "Pw" + c + rand(10, 400 + i) for i, c in enumerate("/#? @")}
    pw_mixed = "a/b#c?d@e" + rand(8, 406)
    cli_pw = [rand(14, 410 + i) for i in range(16)]
    ya29 = "ya" + "29." + rand(60, 430, _ALNUM + "_-")
    refresh = "1" + "//0" + rand(70, 431, _ALNUM + "_-")
    aws_bare = bare_aws_secret(432)
    amz_sig = hexs(64, 433)
    goog_sig = hexs(64, 434)
    sas_sig = rand(40, 435) + "%3D"
    hook = digits(18, 436) + "/" + rand(68, 437, _ALNUM + "_-")
    non_ascii = [rand(14, 440 + i) for i in range(6)]
    return [
        Planted("url_password", "postgresql://app:" + pws["/"] + "@db.internal/app", pws["/"]),
        Planted("url_password", "postgresql://app:" + pws["#"] + "@db.internal/app", pws["#"]),
        Planted("url_password", "postgresql://app:" + pws["?"] + "@db.internal/app", pws["?"]),
        Planted("url_password", "postgresql://app:" + pws[" "] + "@db.internal/app", pws[" "]),
        Planted("url_password", "postgresql://app:" + pws["@"] + "@db.internal/app", pws["@"]),
        Planted("url_password", "https://bob@corp.example:" + pw_mixed + "@h/x", pw_mixed),
        Planted("google_oauth_token", "access " + ya29, ya29),
        Planted("google_oauth_token", "refresh " + refresh, refresh),
        Planted("google_client_secret", "GOC" + "SPX-" + rand(28, 438), rand(28, 438)),
        Planted("aws_secret_access_key", "upload failed with " + aws_bare, aws_bare),
        Planted("command_line_secret", "run --password " + cli_pw[0], cli_pw[0]),
        Planted("command_line_secret", "run --api-token=" + cli_pw[1] + " now", cli_pw[1]),
        Planted("command_line_secret", "mysql -u root -p" + cli_pw[2] + " db", cli_pw[2]),
        Planted("command_line_secret", "curl -u bob:" + cli_pw[3] + " https://h", cli_pw[3]),
        Planted("command_line_secret", "curl --user 'bob:" + cli_pw[4] + "' h", cli_pw[4]),
        Planted("command_line_secret", "sshpass -p " + cli_pw[5] + " ssh h", cli_pw[5]),
        Planted("command_line_secret", "redis-cli -h r -a " + cli_pw[6] + " ping", cli_pw[6]),
        Planted("command_line_secret", "docker login -u me -p " + cli_pw[7] + " r.io", cli_pw[7]),
        Planted("command_line_secret", "openssl rsa -passin pass:" + cli_pw[8], cli_pw[8]),
        Planted("command_line_secret", "keytool -list -storepass " + cli_pw[9], cli_pw[9]),
        Planted("command_line_secret", "ldapsearch -x -w " + cli_pw[10] + " -b dc", cli_pw[10]),
        Planted("command_line_secret", "7z a -p" + cli_pw[11] + " out.7z", cli_pw[11]),
        Planted("command_line_secret", "smbclient -U bob%" + cli_pw[12] + " //h/s", cli_pw[12]),
        Planted("command_line_secret", "mongosh -u me -p " + cli_pw[13] + " h", cli_pw[13]),
        Planted("command_line_secret", "sqlcmd -S h -U sa -P " + cli_pw[14], cli_pw[14]),
        Planted("command_line_secret", "app -password " + cli_pw[15] + " -v", cli_pw[15]),
        Planted(
            "request_signature",
            "https://b.s3.amazonaws.com/k?X-Amz-Date=1&X-Amz-Signature=" + amz_sig + "&x=1",
            amz_sig,
        ),
        Planted(
            "request_signature",
            "https://storage.googleapis.com/b/o?X-Goog-Signature=" + goog_sig,
            goog_sig,
        ),
        Planted(
            "request_signature", "https://a.blob.core.windows.net/c?sv=1&sig=" + sas_sig, sas_sig
        ),
        Planted("discord_webhook", "https://discord.com/api/webhooks/" + hook, hook),
        Planted("generic_secret", "pässword=" + non_ascii[0], non_ascii[0]),
        Planted("generic_secret", "contraseña: " + non_ascii[1], non_ascii[1]),
        Planted("generic_secret", "PÄSSWORD = " + non_ascii[2], non_ascii[2]),
        Planted("generic_secret", "Passwort=" + non_ascii[3], non_ascii[3]),
        Planted("generic_secret", "pa\u00dfword=" + non_ascii[4], non_ascii[4]),
        Planted("generic_secret", "mot_de_passe: " + non_ascii[5], non_ascii[5]),
    ]


def _planted_rule_sets() -> list[Planted]:
    """Prefixed shapes of gitleaks' and detect-secrets' rule sets (docs/operations.md)."""

    def whole(shape: str, token: str) -> Planted:
        return Planted(shape, token, token)

    uuid = "-".join(hexs(n, 500 + n) for n in (8, 4, 4, 4, 12))
    discord_bot = "MT" + "k" + rand(20, 501) + "5." + "G" + rand(5, 502) + ".A1" + rand(28, 503)
    teams = uuid + "@" + uuid + "/IncomingWebhook/" + hexs(32, 504) + "/" + uuid
    softlayer = lower(64, 505)
    nuget_pw = rand(16, 506)
    return [
        whole(
            "onepassword_token",
            "A3"
            + "-"
            + upper(6, 510)
            + "-"
            + upper(11, 511)
            + "-"
            + upper(5, 512)
            + "-"
            + upper(5, 513)
            + "-"
            + upper(5, 514),
        ),
        whole("onepassword_token", "ops" + "_eyJ" + rand(120, 515, _ALNUM + "+/")),
        whole("adobe_client_secret", "p8" + "e-" + rand(32, 516)),
        whole("airtable_token", "pa" + "t" + rand(14, 517) + "." + hexs(64, 518)),
        whole("alibaba_access_key_id", "LT" + "AI" + rand(20, 519)),
        whole("artifactory_token", "AK" + "Cp" + rand(69, 520)),
        whole("artifactory_token", "cmV" + "md" + rand(59, 521)),
        whole(
            "authress_key",
            "sc"
            + "_"
            + rand(10, 522)
            + "."
            + rand(5, 523)
            + ".ac"
            + "c_"
            + lower(20, 524)
            + "."
            + rand(60, 525, _ALNUM + "+/_=-"),
        ),
        whole("aws_bedrock_api_key", "AB" + "SK" + rand(130, 526, _ALNUM + "+/")),
        whole("azure_ad_client_secret", rand(3, 527) + "8Q" + "~" + rand(32, 528)),
        whole("clickhouse_api_key", "4b" + "1d" + rand(38, 529)),
        whole("clojars_token", "CLOJ" + "ARS_" + lower(60, 530)),
        whole("cloudflare_origin_ca_key", "v1" + ".0-" + hexs(24, 531) + "-" + hexs(146, 532)),
        whole("databricks_token", "da" + "pi" + hexs(32, 533)),
        whole("doppler_token", "dp" + ".pt." + rand(43, 534)),
        whole("duffel_token", "duf" + "fel_live_" + rand(43, 535)),
        whole("dynatrace_token", "dt0" + "c01." + rand(24, 536) + "." + rand(64, 537)),
        whole("easypost_token", "EZ" + "AK" + rand(54, 538)),
        whole("facebook_token", digits(15, 539) + "|" + rand(32, 540, _ALNUM + "_-")),
        whole("facebook_token", "EAA" + "C" + rand(120, 541)),
        whole(
            "flutterwave_key",
            "FLW" + "SECK_TEST-" + rand(32, 542, "abcdefgh0123456789") + "-X",
        ),
        whole("flyio_token", "fo" + "1_" + rand(43, 543)),
        whole("frameio_token", "fio" + "-u-" + rand(64, 544)),
        whole("grafana_token", "eyJr" + "IjoiN" + rand(80, 545)),
        whole("grafana_token", "gl" + "sa_" + rand(32, 546) + "_" + hexs(8, 547)),
        whole(
            "harness_token",
            "pa" + "t." + rand(22, 548) + "." + rand(24, 549) + "." + rand(20, 550),
        ),
        whole("terraform_token", rand(14, 551) + ".atlas" + "v1." + rand(65, 552)),
        whole("heroku_api_key", "HRKU" + "-AA" + rand(58, 553)),
        whole("infracost_token", "ic" + "o-" + rand(32, 554)),
        whole("intra42_secret", "s-s4t2" + "ud-" + hexs(64, 555)),
        whole("linear_api_key", "lin" + "_api_" + rand(40, 556)),
        whole("mailchimp_api_key", hexs(32, 557) + "-us" + "12"),
        whole("maxmind_license_key", rand(6, 558) + "_" + rand(29, 559) + "_mm" + "k"),
        whole("notion_token", "nt" + "n_" + digits(11, 560) + rand(35, 561)),
        whole("octopus_api_key", "AP" + "I-" + upper(26, 562)),
        whole("openshift_token", "sha256" + "~" + rand(43, 563)),
        whole("perplexity_api_key", "pp" + "lx-" + rand(48, 564)),
        whole("planetscale_token", "pscale" + "_tkn_" + rand(40, 565)),
        whole("postman_api_key", "PM" + "AK-" + hexs(24, 566) + "-" + hexs(34, 567)),
        whole("prefect_api_key", "pn" + "u_" + rand(36, 568)),
        whole("pulumi_token", "pu" + "l-" + hexs(40, 569)),
        whole("readme_api_key", "rd" + "me_" + lower(70, 570)),
        whole("rubygems_token", "ruby" + "gems_" + hexs(48, 571)),
        whole("scalingo_token", "tk-" + "us-" + rand(48, 572)),
        whole("brevo_api_key", "xkey" + "sib-" + hexs(64, 573) + "-" + rand(16, 574)),
        whole("sentry_token", "sntr" + "yu_" + hexs(64, 575)),
        whole("settlemint_token", "sm" + "_pat_" + rand(16, 576)),
        whole("shippo_token", "shi" + "ppo_live_" + hexs(40, 577)),
        whole("shopify_token", "shp" + "at_" + hexs(32, 578)),
        whole("sourcegraph_token", "sg" + "p_" + hexs(40, 579)),
        whole("square_token", "sq0" + "atp-" + rand(22, 580, _ALNUM + "_-")),
        whole("square_token", "sq0" + "csp-" + rand(43, 581, _ALNUM + "_-")),
        whole("telegram_bot_token", digits(9, 582) + ":" + "AA" + rand(33, 583, _ALNUM + "_-")),
        whole("twitter_bearer_token", "A" * 22 + "M" + rand(85, 584, _ALNUM + "%")),
        whole("vault_token", "hv" + "s." + rand(100, 585, _ALNUM + "_-")),
        whole("discord_bot_token", discord_bot),
        Planted("teams_webhook", "https://acme.web" + "hook.office.com/webhookb2/" + teams, teams),
        Planted(
            "softlayer_api_key",
            "https://api.soft" + "layer.com/soap/v3/" + softlayer,
            softlayer,
        ),
        Planted(
            "nuget_config_password",
            '<add key="ClearText' + 'Password" value="' + nuget_pw + '" />',
            nuget_pw,
        ),
        whole("jwt_base64", "ZX" + "lK" + rand(60, 586, _ALNUM + "+/")),
        whole("gitlab_token", "gl" + "ft-" + rand(20, 587)),
        whole("gitlab_token", "GR1348" + "941" + rand(20, 588)),
        whole("slack_token", "xo" + "xe-" + "1-" + rand(140, 589)),
        whole("stripe_key", "s" + "k_prod_" + rand(24, 590)),
        whole(
            "private_key",
            "PuTTY-User"
            + "-Key-File-3: ssh-ed25519\nPrivate-Lines: 1\n"
            + rand(64, 591, _ALNUM + "+/")
            + "\nPrivate-MAC: "
            + hexs(64, 592),
        ),
    ]


PLANTED = _planted() + _planted_gaps() + _planted_rule_sets()
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
    paths += [pathlib.Path(__file__), repo / "README.md"]
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
}


@pytest.mark.parametrize("name", list(_ADVERSARIAL))
def test_adversarial_inputs_stay_linear(name: str) -> None:
    text = _ADVERSARIAL[name]
    started = time.perf_counter()
    out = redact_text(text)
    safe_error_text(text)
    assert time.perf_counter() - started < 3.0
    assert redact_text(out) == out


def test_plain_prose_is_fast() -> None:
    sentence = (
        "the journal records every step so a run can be resumed and explained key author "
        "passage token counts are not secrets, authority session; compass AKIA sk ghp eyJ"
    )
    words = sentence.split(" ")
    rng = random.Random(7)
    prose = " ".join(rng.choice(words) for _ in range(200_000))
    started = time.perf_counter()
    assert redact_text(prose) == prose
    assert time.perf_counter() - started < 3.0


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
