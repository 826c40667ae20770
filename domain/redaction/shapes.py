"""The credential shapes, in priority order (listed in docs/operations.md "Redaction").

Patterns are kept as text and compiled on first use, not at import.
"""

from __future__ import annotations

import re

from runjournal.domain.redaction import finders
from runjournal.domain.redaction.finders import NOT_MARKER_FOLDED, SCHEMES
from runjournal.domain.redaction.views import View

# Annotations only (never evaluated): importing `typing` would cost start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import Final

_VALUE_GROUPS: Final = ("v", "w", "v1", "v2", "v3", "v4")


class Shape:
    """One credential shape.

    `needles` (in the text) or `folded_needles` (in its lowercase view): at least one
    occurs wherever the shape matches; they select candidate shapes for short texts.
    `min_length` instead makes the shape a candidate for every text at least that long,
    and `non_ascii` for every text with a non-ASCII character. Long texts skip that
    step; a regex shape is skipped when none of its `gate` substrings (by default its
    needles) occurs, which `str` finds much faster than `re` tries a pattern that does
    not start with one literal. A regex's `v`/`w`/`v1`..`v4`
    group (or the whole match) is the secret span; `finder` replaces the regex where
    the shape needs context around an anchor. `folded` regexes read the lowercase view.
    """

    __slots__ = (
        "_groups",
        "_regex",
        "finder",
        "folded",
        "folded_needles",
        "gate",
        "min_length",
        "name",
        "needles",
        "non_ascii",
        "pattern",
    )

    def __init__(
        self,
        name: str,
        pattern: str | None = None,
        *,
        needles: Iterable[str] = (),
        folded_needles: Iterable[str] = (),
        folded: bool = False,
        gate: Iterable[str] = (),
        finder: Callable[[View], Iterator[tuple[int, int]]] | None = None,
        min_length: int | None = None,
        non_ascii: bool = False,
    ) -> None:
        self.name = name
        self.pattern = pattern
        self.needles = tuple(needles)
        self.folded_needles = tuple(folded_needles)
        self.folded = folded
        self.gate = tuple(gate)
        self.finder = finder
        self.min_length = min_length
        self.non_ascii = non_ascii
        self._regex: re.Pattern[str] | None = None
        self._groups = False

    def regex(self) -> re.Pattern[str]:
        if self._regex is None:
            assert self.pattern is not None
            regex = re.compile(self.pattern)
            self._groups = any(g in regex.groupindex for g in _VALUE_GROUPS)
            self._regex = regex
        return self._regex

    def spans(self, view: View) -> Iterator[tuple[int, int]]:
        if self.finder is not None:
            yield from self.finder(view)
            return
        hay = view.lowered if self.folded else view.text
        if self.gate and not any(map(hay.__contains__, self.gate)):
            return
        regex = self.regex()
        for m in regex.finditer(hay):
            # Value groups are alternatives and close last, so `lastgroup` names the one.
            start, end = m.span(m.lastgroup) if self._groups else m.span()
            if end > start:
                yield start, end


def _rx(
    name: str,
    pattern: str,
    needles: Iterable[str],
    *,
    folded: bool = False,
    gate: Iterable[str] = (),
) -> Shape:
    """A regex shape; with `folded=True` the needles are read in the lowercase view."""
    needles = tuple(needles)
    return Shape(
        name,
        pattern,
        needles=() if folded else needles,
        folded_needles=needles if folded else (),
        folded=folded,
        gate=tuple(gate) or needles,
    )


def _w(prefix: str, before: str = "A-Za-z0-9") -> str:
    """`prefix`, not preceded by a `before` character: for prefixes short enough to occur
    inside words. The check follows the literal, so `re` can still scan for the literal
    at memchr-like speed (a leading lookbehind would make it try every position)."""
    return re.escape(prefix) + "(?<![" + before + "]" + "." * len(prefix) + ")"


# Not followed by a letter or digit: bodies of a fixed length.
_E = r"(?![A-Za-z0-9])"

# One `name=value` (or bare attribute) of a Cookie / Set-Cookie header.
_COOKIE_PAIR = r"[^\s;=\"'\\]+(?:=[^\s;\"'\\]*)?"
# `Digest k="v", k2=v2, ...` (quotes possibly JSON-escaped), read from the lowercase view.
_DIGEST_PARAMS = (
    r"(?:[a-z0-9_-]+=(?:\"[^\"\r\n]*\"|\\\"[^\"\\\r\n]*\\\"|[^\s,\"'\\]+)(?:,[ \t]*)?)+"
)
_GITLAB_PREFIXES: Final = (
    "pat",
    "dt",
    "rt",
    "ptt",
    "cbt",
    "soat",
    "ffct",
    "imt",
    "agent",
    "ft",
    "oas",
)

# Order is priority: overlapping spans are merged and named after the earliest shape
# here, so the specific shapes win over the context-based ones at the end.
SHAPES: Final[tuple[Shape, ...]] = (
    Shape(
        "private_key",
        needles=("PRIVATE KEY", "PuTTY-User-Key-File-", "Private-"),
        finder=finders.private_key_spans,
    ),
    Shape("jwt", needles=("eyJ",), finder=finders.jwt_spans),
    _rx(
        "aws_access_key_id",
        r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])(?<![A-Z]....)[A-Z0-9]{16,}",
        ["AKIA", "ASIA", "ABIA", "ACCA", "A3T"],
    ),
    _rx("github_pat", r"github_pat_[A-Za-z0-9_]{22,}", ["github_pat_"]),
    _rx(
        "github_token",
        # Lazy up to the next token's prefix, so two tokens glued together are both caught.
        r"gh[pousr]_[A-Za-z0-9]{36,}?(?=gh[pousr]_|[^A-Za-z0-9]|\Z)",
        ["ghp_", "gho_", "ghu_", "ghs_", "ghr_"],
    ),
    _rx("anthropic_api_key", r"sk-ant-[a-z]+[0-9]{2}-[A-Za-z0-9_-]{16,}", ["sk-ant-"]),
    _rx(
        "openai_api_key",
        r"sk-(?!ant-)(?:(?<![A-Za-z0-9]...)(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,}"
        r"|(?:proj-|svcacct-|admin-|None-)[A-Za-z0-9_-]{40,}|[A-Za-z0-9]{32,}[A-Za-z0-9_-]*)",
        ["sk-"],
    ),
    _rx(
        "stripe_key",
        r"(?:[sr]k_(?:live|test|prod)_[A-Za-z0-9]{10,}|whsec_[A-Za-z0-9]{20,})",
        ["k_live_", "k_test_", "k_prod_", "whsec_"],
        gate=["k_live_", "k_test_", "k_prod_", "whsec_"],
    ),
    _rx(
        "slack_webhook",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<v>[A-Za-z0-9+/_-]{20,})",
        ["hooks.slack.com/"],
    ),
    _rx(
        "discord_webhook",
        r"discord(?:app)?\.com/api/(?:v[0-9]+/)?webhooks/(?P<v>[0-9]{5,30}/[a-z0-9_-]{20,})",
        ["discord"],
        folded=True,
    ),
    _rx(
        "teams_webhook",
        r"\.webhook\.office\.com/webhookb2/(?P<v>[a-z0-9@/_-]{40,})",
        [".webhook.office.com/"],
        folded=True,
    ),
    _rx(
        "slack_token",
        r"x(?:ox[abposre]-[A-Za-z0-9-]{11,}|oxe\.xox[bp]-[A-Za-z0-9-]{11,}"
        r"|app-[0-9]-[A-Za-z0-9-]{10,})",
        ["xox", "xapp-"],
    ),
    _rx("google_api_key", r"AIza[0-9A-Za-z_-]{35}", ["AIza"]),
    _rx(
        "google_oauth_token",
        r"ya29\.[0-9A-Za-z_-]{20,}|" + _w("1//0", "A-Za-z0-9/:") + r"[0-9A-Za-z_-]{40,}",
        ["ya29.", "1//0"],
    ),
    _rx("google_client_secret", r"GOCSPX-[A-Za-z0-9_-]{28}", ["GOCSPX-"]),
    _rx(
        "gitlab_token",
        r"gl(?:" + "|".join(_GITLAB_PREFIXES) + r")-[A-Za-z0-9_-]{20,}"
        r"|GR1348941[A-Za-z0-9_-]{20,}",
        [f"gl{k}-" for k in _GITLAB_PREFIXES] + ["GR1348941"],
    ),
    _rx(
        "huggingface_token",
        r"(?:hf_|api_org_)[A-Za-z0-9]{30,}",
        ["hf_", "api_org_"],
        gate=["hf_", "api_org_"],
    ),
    _rx("npm_token", r"npm_[A-Za-z0-9]{36,}", ["npm_"]),
    _rx(
        "pypi_token",
        r"pypi-(?:AgEIcHlwaS5vcmc|AgENdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{16,}",
        ["pypi-Ag"],
    ),
    _rx("twilio_api_key", r"SK(?<![A-Za-z0-9]..)[0-9a-fA-F]{32}(?![A-Za-z0-9])", ["SK"]),
    _rx("sendgrid_api_key", r"SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}", ["SG."]),
    _rx("digitalocean_token", r"do[opr]_v1_[a-f0-9]{64}", ["_v1_"], gate=["_v1_"]),
    _rx("age_secret_key", r"AGE-SECRET-KEY-1[0-9A-Z]{50,}", ["AGE-SECRET-KEY-1"]),
    # --- the prefixed tokens of gitleaks' and detect-secrets' rule sets -----------------
    _rx(
        "onepassword_token",
        _w("A3-")
        + r"[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})(?:-[A-Z0-9]{5}){3}"
        + _E
        + r"|ops_eyJ[A-Za-z0-9+/]{100,}={0,3}",
        ["A3-", "ops_eyJ"],
    ),
    _rx("adobe_client_secret", _w("p8e-") + r"[A-Za-z0-9]{32}" + _E, ["p8e-"]),
    _rx("airtable_token", _w("pat") + r"[A-Za-z0-9]{14}\.[a-f0-9]{64}" + _E, ["pat"]),
    _rx("alibaba_access_key_id", _w("LTAI") + r"[A-Za-z0-9]{20}" + _E, ["LTAI"]),
    _rx(
        "artifactory_token",
        "(?:" + _w("AKCp") + r"[A-Za-z0-9]{60,}|" + _w("cmVmd") + r"[A-Za-z0-9]{59})" + _E,
        ["AKCp", "cmVmd"],
    ),
    _rx(
        "authress_key",
        r"(?<![A-Za-z0-9])(?:sc|ext|scauth|authress)_[A-Za-z0-9]{5,30}\.[A-Za-z0-9]{4,6}\.acc[_-]"
        r"[A-Za-z0-9-]{10,32}\.[A-Za-z0-9+/_=-]{30,120}",
        [".acc_", ".acc-"],
        gate=[".acc_", ".acc-"],
    ),
    _rx(
        "aws_bedrock_api_key",
        _w("ABSK") + r"[A-Za-z0-9+/]{109,269}={0,2}"
        r"|bedrock-api-key-(?:YmVkcm9jay5hbWF6b25hd3MuY29t)[A-Za-z0-9+/=_%-]*",
        ["ABSK", "bedrock-api-key-"],
    ),
    _rx(
        "azure_ad_client_secret",
        r"[A-Za-z0-9_~.](?<![A-Za-z0-9_~.].)[A-Za-z0-9_~.]{2}[0-9]Q~[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])",
        ["Q~"],
        gate=["Q~"],
    ),
    _rx("clickhouse_api_key", _w("4b1d") + r"[A-Za-z0-9]{38}" + _E, ["4b1d"]),
    _rx("clojars_token", r"clojars_[a-z0-9]{60}", ["clojars_"], folded=True),
    _rx("cloudflare_origin_ca_key", r"v1\.0-[a-f0-9]{24}-[a-f0-9]{146}", ["v1.0-"]),
    _rx("databricks_token", _w("dapi") + r"[a-f0-9]{32}(?:-[0-9])?" + _E, ["dapi"]),
    _rx("doppler_token", r"dp\.(?:pt|st|ct|sa|scim|audit)\.[A-Za-z0-9]{40,44}", ["dp."]),
    _rx("duffel_token", r"duffel_(?:test|live)_[A-Za-z0-9_=-]{43}", ["duffel_"]),
    _rx("dynatrace_token", r"dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}", ["dt0c01."]),
    _rx("easypost_token", r"EZ[AT]K(?<![A-Za-z0-9]....)[A-Za-z0-9]{54}" + _E, ["EZAK", "EZTK"]),
    _rx(
        "facebook_token",
        r"[0-9](?<![0-9][0-9])[0-9]{14,15}(?:\||%7[Cc])[0-9A-Za-z_-]{27,40}(?![0-9A-Za-z_-])"
        r"|EAA[MC](?<![A-Za-z0-9]....)[A-Za-z0-9]{100,}",
        ["|", "%7", "EAAM", "EAAC"],
        gate=["|", "%7", "EAAM", "EAAC"],
    ),
    _rx(
        "flutterwave_key",
        r"FLW(?:SECK|PUBK)(?:_TEST)?-[A-Ha-h0-9]{12,32}(?:-X)?",
        ["FLWSECK", "FLWPUBK"],
    ),
    _rx(
        "flyio_token",
        r"(?:fo1_[A-Za-z0-9_-]{43}|fm1[ar]_[A-Za-z0-9+/]{100,}={0,3}"
        r"|fm2_[A-Za-z0-9+/]{100,}={0,3})",
        ["fo1_", "fm1a_", "fm1r_", "fm2_"],
    ),
    _rx("frameio_token", r"fio-u-[A-Za-z0-9_=-]{64}", ["fio-u-"]),
    _rx(
        "grafana_token",
        r"eyJrIjoi[A-Za-z0-9]{70,400}={0,3}|glc_[A-Za-z0-9+/]{32,400}={0,3}"
        r"|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}",
        ["eyJrIjoi", "glc_", "glsa_"],
    ),
    _rx(
        "harness_token",
        r"[ps]at\.(?<![A-Za-z0-9]....)[A-Za-z0-9_-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}",
        ["pat.", "sat."],
    ),
    _rx(
        "terraform_token",
        r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,70}",
        [".atlasv1."],
        gate=[".atlasv1."],
    ),
    _rx("heroku_api_key", r"HRKU-AA[0-9A-Za-z_-]{58}", ["HRKU-AA"]),
    _rx("infracost_token", _w("ico-") + r"[A-Za-z0-9]{32}" + _E, ["ico-"]),
    _rx("intra42_secret", r"s-s4t2(?:ud|af)-[a-f0-9]{64}", ["s-s4t2"]),
    _rx("linear_api_key", r"lin_api_[A-Za-z0-9]{40}", ["lin_api_"]),
    _rx(
        "mailchimp_api_key",
        r"[0-9a-f](?<![A-Za-z0-9].)[0-9a-f]{31}-us[0-9]{1,2}(?![0-9])",
        ["-us"],
        gate=["-us"],
    ),
    _rx(
        "maxmind_license_key",
        r"[A-Za-z0-9](?<![A-Za-z0-9].)[A-Za-z0-9]{5}_[A-Za-z0-9]{29}_mmk" + _E,
        ["_mmk"],
        gate=["_mmk"],
    ),
    _rx("notion_token", _w("ntn_") + r"[0-9]{11}[A-Za-z0-9]{35}" + _E, ["ntn_"]),
    _rx("octopus_api_key", _w("API-") + r"[A-Z0-9]{26}" + _E, ["API-"]),
    _rx("openshift_token", r"sha256~[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])", ["sha256~"]),
    _rx("perplexity_api_key", r"pplx-[A-Za-z0-9]{48}", ["pplx-"]),
    _rx("planetscale_token", r"pscale_(?:tkn|oauth|pw)_[A-Za-z0-9_=.-]{32,64}", ["pscale_"]),
    _rx("postman_api_key", r"PMAK-[A-Fa-f0-9]{24}-[A-Fa-f0-9]{34}", ["PMAK-"]),
    _rx("prefect_api_key", _w("pnu_") + r"[A-Za-z0-9]{36}" + _E, ["pnu_"]),
    _rx("pulumi_token", _w("pul-") + r"[a-f0-9]{40}" + _E, ["pul-"]),
    _rx("readme_api_key", r"rdme_[a-z0-9]{70}", ["rdme_"]),
    _rx("rubygems_token", r"rubygems_[a-f0-9]{48}", ["rubygems_"]),
    _rx("scalingo_token", r"tk-us-[A-Za-z0-9_-]{48}", ["tk-us-"]),
    _rx(
        "brevo_api_key",
        r"x(?:keysib|smtpsib)-[a-f0-9]{64}-[A-Za-z0-9]{16}",
        ["xkeysib-", "xsmtpsib-"],
    ),
    _rx(
        "sentry_token",
        r"sntryu_[a-f0-9]{64}|sntrys_[A-Za-z0-9+/=_]{40,}",
        ["sntryu_", "sntrys_"],
    ),
    _rx(
        "settlemint_token",
        r"sm_(?:aat|pat|sat)_[A-Za-z0-9]{16}",
        ["sm_aat_", "sm_pat_", "sm_sat_"],
    ),
    _rx("shippo_token", r"shippo_(?:live|test)_[A-Fa-f0-9]{40}", ["shippo_"]),
    _rx(
        "shopify_token",
        r"shp(?:at|ca|pa|ss)_[A-Fa-f0-9]{32}",
        ["shpat_", "shpca_", "shppa_", "shpss_"],
    ),
    _rx(
        "sourcegraph_token",
        r"sgp_(?:(?:[A-Fa-f0-9]{16}|local)_)?[A-Fa-f0-9]{40}",
        ["sgp_"],
    ),
    _rx(
        "square_token",
        r"sq0(?:atp|csp)-[A-Za-z0-9_-]{22,60}|" + _w("EAAA") + r"[A-Za-z0-9_-]{22,60}(?![\w-])",
        ["sq0atp-", "sq0csp-", "EAAA"],
    ),
    _rx(
        "telegram_bot_token",
        r"[0-9](?<![0-9][0-9])[0-9]{7,9}:AA[A-Za-z0-9_-]{33}(?![A-Za-z0-9_-])",
        [":AA"],
        gate=[":AA"],
    ),
    _rx(
        "twitter_bearer_token",
        r"A(?<![A-Za-z0-9%]A)A{19,23}[B-Za-z0-9%][A-Za-z0-9%]{70,110}(?![A-Za-z0-9%])",
        ["A" * 20],
        gate=["A" * 20],
    ),
    _rx(
        "vault_token",
        r"hv[sbr]\.(?<![A-Za-z0-9]....)"
        r"(?:(?<=b\.)[A-Za-z0-9_-]{138,300}|(?<![b]\.)[A-Za-z0-9_-]{90,120})",
        ["hvs.", "hvb.", "hvr."],
    ),
    _rx(
        "discord_bot_token",
        # base64 of the user id (with a digit), a 6-character timestamp that is not a
        # lowercase word, then an HMAC with an uppercase letter and a digit
        r"[MNO](?<![A-Za-z0-9_-].)(?=[A-Za-z0-9_-]{0,24}[0-9])[A-Za-z0-9_-]{23,25}\."
        r"(?=[A-Za-z0-9_-]{0,5}[A-Z0-9_-])[A-Za-z0-9_-]{6}\."
        r"(?=[A-Za-z0-9_-]{0,37}[A-Z])(?=[A-Za-z0-9_-]{0,37}[0-9])[A-Za-z0-9_-]{27,38}"
        r"(?![A-Za-z0-9_-])",
        ["."],
        gate=["."],
    ),
    _rx(
        "softlayer_api_key",
        r"api\.softlayer\.com/soap/v3(?:\.1)?/(?P<v>[a-z0-9]{64})",
        ["api.softlayer.com/"],
        folded=True,
    ),
    _rx(
        "nuget_config_password",
        r"<add[ \t]+key=\\?\"(?:cleartext)?password\\?\"[ \t]+value=\\?\"(?P<v>"
        + NOT_MARKER_FOLDED
        + r"[^\"\\]+)",
        ["<add"],
        folded=True,
    ),
    _rx("jwt_base64", _w("ZXlK", "A-Za-z0-9+/") + r"[A-Za-z0-9+/]{40,}={0,2}", ["ZXlK"]),
    # --- shapes that need context ----------------------------------------------------
    Shape("url_password", needles=("://",), finder=finders.url_password_spans),
    _rx(
        "request_signature",
        # presigned URLs (AWS, GCS, Azure SAS) and SigV4 `Authorization` parameters
        "(?:"
        + "|".join(
            _w(n, "a-z0-9_-") for n in ("x-amz-signature", "x-goog-signature", "signature", "sig")
        )
        + ")="
        r"(?P<v>" + NOT_MARKER_FOLDED + r"[^&\s#\"'<>,;\\]+)",
        ["signature=", "sig="],
        folded=True,
    ),
    Shape(
        "aws_secret_access_key",
        folded_needles=finders.AWS_WORDS,
        finder=finders.aws_secret_spans,
        min_length=finders.AWS_SECRET_LENGTH,
    ),
    Shape(
        "command_line_secret",
        needles=("-",),
        finder=finders.command_line_spans,
    ),
    _rx(
        "authorization",
        r"authorization\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?"
        r"(?:digest[ \t]+(?P<v>" + _DIGEST_PARAMS + r")"
        r"|(?:" + SCHEMES + r"[ \t]+|(?!" + SCHEMES + r"[ \t]))"
        r"(?P<w>" + NOT_MARKER_FOLDED + r"[^\s\"'\\,;&<>]+))",
        ["authorization"],
        folded=True,
    ),
    _rx(
        "bearer_token",
        r"bearer[ \t]+(?P<v>" + NOT_MARKER_FOLDED + r"(?:(?=[a-z]*[0-9._~+/=-])"
        r"[a-z0-9._~+/=-]{8,}|[a-z0-9._~+/=-]{20,}))",
        ["bearer"],
        folded=True,
    ),
    _rx(
        "cookie_header",
        r"cookie[ \t]*:[ \t]*(?P<v>"
        + NOT_MARKER_FOLDED
        + _COOKIE_PAIR
        + r"(?:;[ \t]*"
        + _COOKIE_PAIR
        + r")*)",
        ["cookie"],
        folded=True,
    ),
    Shape(
        "generic_secret",
        folded_needles=finders.GENERIC_NEEDLES,
        finder=finders.generic_spans,
        non_ascii=True,
    ),
)

SHAPE_NAMES: Final = tuple(s.name for s in SHAPES)
"""Every shape name that can appear in `[REDACTED:<shape>]`, in priority order."""
