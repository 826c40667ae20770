"""The planted secret corpus: one token (or more) for every redaction shape.

Every token is assembled at run time from random parts (never a literal a push-protection
scanner would flag). `planted()` is deterministic; `planted(salt)` with a fresh salt gives
new random parts, for end-to-end tests that must not find yesterday's values.
The shapes are listed in docs/operations.md "Redaction".
"""

from __future__ import annotations

import base64
import dataclasses
import json
import random
import string

_SALT = [""]  # the salt `planted()` builds with; `rand` reads it


ALNUM = string.ascii_letters + string.digits


def rand(n: int, seed: int, alphabet: str = ALNUM) -> str:
    """`n` characters of `alphabet`, the same for the same seed (and salt)."""
    rng = random.Random(f"{_SALT[0]}:{seed}" if _SALT[0] else seed)
    return "".join(rng.choice(alphabet) for _ in range(n))


def upper(n: int, seed: int) -> str:
    return rand(n, seed, string.ascii_uppercase + string.digits)


def hexs(n: int, seed: int) -> str:
    return rand(n, seed, "0123456789abcdef")


def b64url(data: dict[str, object]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def pem(kind: str = "RSA", newline: str = "\n") -> tuple[str, str]:
    body = [rand(64, 100 + i, ALNUM + "+/") for i in range(3)]
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
    aws_secret = rand(40, 4, ALNUM + "/+")
    ghp = "gh" + "p_" + rand(36, 5)
    ghs = "gh" + "s_" + rand(36, 6)
    gho = "gh" + "o_" + rand(36, 7)
    pat = "github" + "_pat_" + rand(22, 8) + "_" + rand(59, 9)
    openai = "sk" + "-proj-" + rand(40, 10) + "T3Blbk" + "FJ" + rand(40, 11)
    openai_old = "sk" + "-" + rand(48, 12)
    openai_svc = "sk" + "-svcacct-" + rand(60, 13)
    anthropic = "sk" + "-ant-" + "api03-" + rand(93, 14, ALNUM + "-_") + "AA"
    anthropic_admin = "sk" + "-ant-" + "admin01-" + rand(80, 15)
    slack_bot = "xo" + "xb-" + rand(12, 16, string.digits) + "-" + rand(24, 17)
    slack_user = "xo" + "xp-" + rand(12, 18, string.digits) + "-" + rand(32, 19)
    google = "AI" + "za" + rand(35, 20, ALNUM + "-_")
    jwt = (
        b64url({"alg": "HS256", "typ": "JWT"})
        + "."
        + b64url({"sub": "1234567890", "name": "x"})
        + "."
        + rand(43, 21, ALNUM + "-_")
    )
    stripe = "sk" + "_live_" + rand(24, 22)
    stripe_rk = "rk" + "_test_" + rand(24, 23)
    gitlab = "gl" + "pat-" + rand(20, 24)
    hf = "h" + "f_" + rand(34, 25)
    npm = "np" + "m_" + rand(36, 26)
    pypi = "py" + "pi-" + "AgEIcHlwaS5vcmc" + rand(70, 27, ALNUM + "-_")
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
    return rand(39, seed, ALNUM + "/+") + "7"


def _planted_gaps() -> list[Planted]:
    """The gaps a red-team pass found: each leaked with the shapes before them."""
    pws = {c: "Pw" + c + rand(10, 400 + i) for i, c in enumerate("/#? @")}
    pw_mixed = "a/b#c?d@e" + rand(8, 406)
    cli_pw = [rand(14, 410 + i) for i in range(16)]
    ya29 = "ya" + "29." + rand(60, 430, ALNUM + "_-")
    refresh = "1" + "//0" + rand(70, 431, ALNUM + "_-")
    aws_bare = bare_aws_secret(432)
    amz_sig = hexs(64, 433)
    goog_sig = hexs(64, 434)
    sas_sig = rand(40, 435) + "%3D"
    hook = digits(18, 436) + "/" + rand(68, 437, ALNUM + "_-")
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
        whole("onepassword_token", "ops" + "_eyJ" + rand(120, 515, ALNUM + "+/")),
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
            + rand(60, 525, ALNUM + "+/_=-"),
        ),
        whole("aws_bedrock_api_key", "AB" + "SK" + rand(130, 526, ALNUM + "+/")),
        whole("azure_ad_client_secret", rand(3, 527) + "8Q" + "~" + rand(32, 528)),
        whole("clickhouse_api_key", "4b" + "1d" + rand(38, 529)),
        whole("clojars_token", "CLOJ" + "ARS_" + lower(60, 530)),
        whole("cloudflare_origin_ca_key", "v1" + ".0-" + hexs(24, 531) + "-" + hexs(146, 532)),
        whole("databricks_token", "da" + "pi" + hexs(32, 533)),
        whole("doppler_token", "dp" + ".pt." + rand(43, 534)),
        whole("duffel_token", "duf" + "fel_live_" + rand(43, 535)),
        whole("dynatrace_token", "dt0" + "c01." + rand(24, 536) + "." + rand(64, 537)),
        whole("easypost_token", "EZ" + "AK" + rand(54, 538)),
        whole("facebook_token", digits(15, 539) + "|" + rand(32, 540, ALNUM + "_-")),
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
        whole("square_token", "sq0" + "atp-" + rand(22, 580, ALNUM + "_-")),
        whole("square_token", "sq0" + "csp-" + rand(43, 581, ALNUM + "_-")),
        whole("telegram_bot_token", digits(9, 582) + ":" + "AA" + rand(33, 583, ALNUM + "_-")),
        whole("twitter_bearer_token", "A" * 22 + "M" + rand(85, 584, ALNUM + "%")),
        whole("vault_token", "hv" + "s." + rand(100, 585, ALNUM + "_-")),
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
        whole("jwt_base64", "ZX" + "lK" + rand(60, 586, ALNUM + "+/")),
        whole("gitlab_token", "gl" + "ft-" + rand(20, 587)),
        whole("gitlab_token", "GR1348" + "941" + rand(20, 588)),
        whole("slack_token", "xo" + "xe-" + "1-" + rand(140, 589)),
        whole("stripe_key", "s" + "k_prod_" + rand(24, 590)),
        whole(
            "private_key",
            "PuTTY-User"
            + "-Key-File-3: ssh-ed25519\nPrivate-"
            + "Lines: 1\n"
            + rand(64, 591, ALNUM + "+/")
            + "\nPrivate-"
            + "MAC: "
            + hexs(64, 592),
        ),
    ]


def planted_corpus(salt: str = "") -> list[Planted]:
    """The whole corpus; every shape of `SHAPE_NAMES` has at least one entry."""
    _SALT[0] = salt
    try:
        return _planted() + _planted_gaps() + _planted_rule_sets()
    finally:
        _SALT[0] = ""
