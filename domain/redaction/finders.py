"""Shapes that need context around an anchor, so a single regex cannot find them.

Each finder takes a `View` and yields `(start, end)` spans of secret text. All of them
stay linear on adversarial input (docs/internals.md "Redaction", "Guarantees"): every
anchor is looked at once and a span already yielded is never scanned again.
"""

from __future__ import annotations

import math
import re

from runjournal.domain.redaction.keys import is_secret_assignment_key, is_secret_option
from runjournal.domain.redaction.views import MARKER_PREFIX, View, lazy_regex

# Annotations only (never evaluated): importing `typing` would cost start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Final

NOT_MARKER: Final = r"(?!\[REDACTED)"
"""A value never starts with a marker, so redacted text does not match again."""
NOT_MARKER_FOLDED: Final = r"(?!\[redacted)"
"""The same for shapes that read the lowercase view."""

SCHEMES: Final = r"(?:bearer|basic|token|apikey|digest|negotiate)"
"""HTTP auth scheme words, kept in front of the credential they introduce."""

# --- private keys: PEM blocks through the END line, PuTTY key files -------------------

# A PuTTY key file may be cut into lines (module output is redacted line by line), so
# its private-lines header and its MAC line start a span on their own too.
_PEM_HEAD: Final = lazy_regex(
    r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"
    r"|PuTTY-User-Key-File-[0-9]+:|Private-(?:Lines|MAC):"
)
_PEM_TAIL: Final = lazy_regex(r"-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----")
_PUTTY_TAIL: Final = lazy_regex(r"Private-MA[C]:[ \t]*[0-9A-Fa-f]*")  # [C]: not a literal here
# Without an END line (truncated text) the block runs while it looks like base64, PEM
# or PuTTY headers, whitespace (CRLF too) or `\n` escapes.
_PEM_BODY: Final = lazy_regex(r"(?:[A-Za-z0-9+/=:,.\- \t\r\n]|\\[rnt/])*")


def private_key_spans(view: View) -> Iterator[tuple[int, int]]:
    """Linear even with many BEGIN lines: each END search and body run is done once."""
    text = view.text
    covered = 0
    exhausted = {"pem": False, "putty": False}
    for head in _PEM_HEAD().finditer(text):
        if head.start() < covered:
            continue
        kind = "pem" if text.startswith("-----", head.start()) else "putty"
        tail_rx = _PUTTY_TAIL() if kind == "putty" else _PEM_TAIL()
        # from the head's start: a MAC line is its own head and tail
        tail = None if exhausted[kind] else tail_rx.search(text, head.start())
        if tail is None:
            exhausted[kind] = True
            body = _PEM_BODY().match(text, head.end())
            covered = body.end() if body is not None else head.end()
        else:
            covered = tail.end()
        yield head.start(), covered


# --- JWT: `eyJ<header>.eyJ<payload>.<signature>`, even glued to what precedes it -------

# From the `.eyJ` that starts the payload: the header is the base64url run before that
# dot, from its first `eyJ`. Runs before distinct dots are disjoint, so the scan stays
# linear even on `eyJeyJeyJ...` (a regex without a left boundary would not).
_JWT_REST: Final = lazy_regex(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_=-]*")
_B64URL_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_JWT_MIN_HEAD: Final = 11  # `eyJ` and at least 8 more characters before the dot


def jwt_spans(view: View) -> Iterator[tuple[int, int]]:
    text = view.text
    covered = 0
    dot = text.find(".eyJ")
    while dot != -1:
        rest = _JWT_REST().match(text, dot + 1) if dot >= covered else None
        if rest is not None:
            start = dot
            while start > covered and text[start - 1] in _B64URL_CHARS:
                start -= 1
            last = dot - _JWT_MIN_HEAD  # the last index where the header may start
            head = text.find("eyJ", start, last + 3) if last >= start else -1
            if head != -1:
                covered = rest.end()
                yield head, covered
        dot = text.find(".eyJ", dot + 1)


# --- AWS secret access key: 40 base64 characters ---------------------------------------

AWS_WORDS: Final = ("aws", "secret")
_AWS_SECRET_VALUE: Final = lazy_regex(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}")
_AWS_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/+")
_AWS_GAP: Final = 40
# A bare key is looked for around its digits, `/` and `+` (rare in prose, so `re` skips
# to them quickly): the base64 run around one is measured backwards in the reversed
# lowercase view (case does not change what is base64) and forwards in the text.
_BASE64_SPECIAL: Final = lazy_regex(r"[0-9/+]")
_BASE64_BACK: Final = lazy_regex(r"[a-z0-9/+]*")
_BASE64_FORWARD: Final = lazy_regex(r"[A-Za-z0-9/+]*")
_BASE64_KEY: Final = lazy_regex(r"[A-Za-z0-9/+]{40}")
AWS_SECRET_LENGTH: Final = 40
_MIN_ENTROPY: Final = 3.5  # bits per character; random 40-character keys score 4.1 to 5.3


def _entropy(s: str) -> float:
    counts: dict[str, int] = {}
    for ch in s:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def looks_like_bare_aws_secret(s: str) -> bool:
    """Exactly 40 base64 characters that read as random: both cases, a digit, `/` or `+`,
    and some entropy. Hex digests (one case) and words never qualify; about 1 in 4,000
    random keys has no digit, `/` or `+` and is only found after `aws` or `secret`."""
    if len(s) != AWS_SECRET_LENGTH or _BASE64_KEY().fullmatch(s) is None:
        return False
    if s.isupper() or s.islower() or not any(c.isdigit() or c in "/+" for c in s):
        return False
    return _entropy(s) >= _MIN_ENTROPY


def _bare_aws_secret_spans(view: View) -> Iterator[tuple[int, int]]:
    text, n = view.text, len(view.text)
    # a span is 40 base64 characters of the text (`looks_like_bare_aws_secret`): with no
    # such run anywhere there is none, and one scan says so (prose, a reused lane's
    # warnings: most of redacting one, issue 29)
    if _BASE64_KEY().search(text) is None:
        return
    pos = 0
    while True:
        special = _BASE64_SPECIAL().search(text, pos)
        if special is None:
            return
        at = special.start()
        start = n - _BASE64_BACK().match(view.reversed_lowered, n - 1 - at).end()
        end = _BASE64_FORWARD().match(text, at).end()
        pos = max(end, at + 1)
        padded = end < n and text[end] == "="  # base64 data, not a key
        if not padded and looks_like_bare_aws_secret(text[start:end]):
            yield start, end


def aws_secret_spans(view: View) -> Iterator[tuple[int, int]]:
    """40 base64 characters shortly after `aws` or `secret` on the same line, or alone."""
    text, low = view.text, view.lowered
    for word in AWS_WORDS:
        i = low.find(word)
        while i != -1:
            after = i + len(word)
            for m in _AWS_SECRET_VALUE().finditer(text, after, after + _AWS_GAP + 40):
                gap = text[after : m.start()]
                if "\n" in gap or "\r" in gap:
                    break
                if m.end() == len(text) or text[m.end()] not in _AWS_CHARS:
                    value = m.group()
                    # a digest after the word (`secret <sha1>`) is one case or digits only
                    if not (value.islower() or value.isupper() or value.isdigit()):
                        yield m.span()
                    break
            i = low.find(word, i + 1)
    if len(text) >= AWS_SECRET_LENGTH:
        yield from _bare_aws_secret_spans(view)


# --- URL userinfo passwords ------------------------------------------------------------

_URL_USER: Final = lazy_regex(r"[^\s:/?#\[\]\"'<>]*:")  # `@` too: `bob@corp.com:pw@host`
_URL_RUN_END: Final = lazy_regex(r"[\s\"'<>]")
# A password with spaces: at most four words, the first not a port (`host:8080 and x@y`).
_URL_SPACED: Final = lazy_regex(
    r"(?![0-9]{1,5}(?:[/?#\s]|$))[^\s\"'<>@]{1,64}(?:[ \t][^\s\"'<>]{1,64}){1,3}(?<!@)(?=@)"
)
_PORT_THEN_PATH: Final = lazy_regex(r"[0-9]{1,5}/")


def url_password_spans(view: View) -> Iterator[tuple[int, int]]:
    """`scheme://user:PASS@host`: PASS runs to the last `@` of its whitespace-free run,
    so it may hold `/`, `?`, `#` and `@`; failing that, up to four space-separated words
    before an `@`. `host:5173/@scope/pkg` (a port, then a path starting with `@`) is
    not a password. Each run is measured once, so the scan is linear."""
    text = view.text
    covered = 0
    run_end = -1
    last_at = -1
    i = text.find("://")
    while i != -1:
        user = _URL_USER().match(text, i + 3)
        start = user.end() if user is not None else -1
        if start >= covered and not text.startswith(MARKER_PREFIX, start):
            if start >= run_end:
                stop = _URL_RUN_END().search(text, start)
                run_end = stop.start() if stop is not None else len(text)
                last_at = text.rfind("@", start, run_end)
            end = -1
            if last_at > start:
                if not (text[last_at - 1] == "/" and _PORT_THEN_PATH().match(text, start)):
                    end = last_at
            elif "@" not in text[i + 3 : start]:  # no spaced password after `git@host:`
                spaced = _URL_SPACED().match(text, start)
                if spaced is not None:
                    end = spaced.end()
            if end > start:
                covered = end
                yield start, end
        i = text.find("://", i + 1)


# --- command lines quoted in free text -----------------------------------------------

# A value: quoted, or one bare token (a JSON-escaped quote or backslash ends it).
_VALUE = r"(?:\"(?P<v1>" + NOT_MARKER + r"[^\"\r\n]+)\"|'(?P<v2>" + NOT_MARKER + r"[^'\r\n]+)'"
_VALUE += r"|(?P<v3>" + NOT_MARKER + r"[^\s\"'`\\]+))"
_VALUE_GROUPS: Final = ("v1", "v2", "v3")
# The password part of `user:pw` (curl) or `user%pw` (smbclient), quoted or bare.
_USER_PW = (
    r"(?:\"[^\"{s}\r\n]*{s}(?P<v1>" + NOT_MARKER + r"[^\"\r\n]+)\""
    r"|'[^'{s}\r\n]*{s}(?P<v2>" + NOT_MARKER + r"[^'\r\n]+)'"
    r"|[^\s{s}\"'`]*{s}(?P<v3>" + NOT_MARKER + r"[^\s\"'`\\]+))"
)
# An option's dash starts a word: after whitespace, a quote, a bracket or a shell
# separator. In the regex (not checked afterwards) so that option-like runs inside words
# are never started, which keeps `-a-a-a...` linear; after the dash, so that `re` still
# scans for the dash at memchr-like speed.
_OPT = r"-(?<![^\s\"'`(\[{=,;|&]-)"
# `--name VALUE`, `--name=VALUE`, `-name VALUE` (Go/Java style); the name decides.
_LONG_OPTION: Final = lazy_regex(
    _OPT + r"-?(?P<name>[A-Za-z][A-Za-z0-9_.-]*[A-Za-z0-9])(?:(?P<eq>=)|[ \t]+)" + _VALUE
)
# Options that always carry a secret, whatever the command: openssl and keytool.
_ALWAYS_SECRET: Final = lazy_regex(
    _OPT + r"(?:pass(?:in|out)?[ \t]+pass:|(?:src|dest)?(?:store|key)pass[ \t]+)" + _VALUE
)
# Commands whose short options carry a password, and those options (case matters).
# Each command word is looked for with `str.find` (a regex alternation of them would
# try most positions of ordinary text), then read whole with `_COMMAND_WORD`.
_COMMAND_WORD: Final = lazy_regex(
    r"(?:mysql[a-z]*|mariadb[a-z-]*|sshpass|redis-cli|valkey-cli|docker|podman|nerdctl"
    r"|buildah|skopeo|oras|helm|mongo[a-z]*|curl|smbclient|sqlcmd|ssh-keygen|unzip|zip"
    r"|7z[az]?|unrar|rar|ldap[a-z]+)(?![\w-])"
)
_REGISTRY_LOGIN: Final = lazy_regex(r"[ \t]+(?:registry[ \t]+)?login(?![\w-])")
_KIND_BY_WORD: Final = {
    "sshpass": "sshpass",
    "redis-cli": "redis",
    "valkey-cli": "redis",
    "docker": "login",
    "podman": "login",
    "nerdctl": "login",
    "buildah": "login",
    "skopeo": "login",
    "oras": "login",
    "helm": "login",
    "curl": "curl",
    "smbclient": "smb",
    "sqlcmd": "sqlcmd",
    "ssh-keygen": "keygen",
    "zip": "zip",
    "unzip": "zip",
    "7z": "sevenzip",
    "7za": "sevenzip",
    "7zz": "sevenzip",
    "rar": "sevenzip",
    "unrar": "sevenzip",
}
_KIND_BY_PREFIX: Final = (("mysql", "mysql"), ("mariadb", "mysql"), ("mongo", "mongo"))


def _command_kind(word: str) -> str:
    kind = _KIND_BY_WORD.get(word)
    if kind is not None:
        return kind
    for prefix, kind in _KIND_BY_PREFIX:
        if word.startswith(prefix):
            return kind
    return "ldap"


_COMMAND_OPTIONS: Final = {
    "mysql": lazy_regex(_OPT + r"p" + _VALUE),  # `-p VALUE` would prompt, VALUE being the db
    "sshpass": lazy_regex(_OPT + r"p[ \t]*" + _VALUE),
    "redis": lazy_regex(_OPT + r"a[ \t]*" + _VALUE),
    "login": lazy_regex(_OPT + r"p[ \t]*" + _VALUE),
    "mongo": lazy_regex(_OPT + r"p[ \t]*" + _VALUE),
    "curl": lazy_regex(_OPT + r"(?:u|U|-user|-proxy-user)(?:=|[ \t]*)" + _USER_PW.format(s=":")),
    "smb": lazy_regex(_OPT + r"(?:U|-user)(?:=|[ \t]*)" + _USER_PW.format(s="%")),
    "sqlcmd": lazy_regex(_OPT + r"P[ \t]*" + _VALUE),
    "keygen": lazy_regex(_OPT + r"[NP][ \t]*" + _VALUE),
    "zip": lazy_regex(_OPT + r"P[ \t]*" + _VALUE),
    "sevenzip": lazy_regex(_OPT + r"p" + _VALUE),
    "ldap": lazy_regex(_OPT + r"w[ \t]*" + _VALUE),
}
COMMAND_WORDS: Final = (
    "mysql",
    "mariadb",
    "sshpass",
    "redis-cli",
    "valkey-cli",
    "docker",
    "podman",
    "nerdctl",
    "buildah",
    "skopeo",
    "oras",
    "helm",
    "mongo",
    "curl",
    "smbclient",
    "sqlcmd",
    "ssh-keygen",
    "zip",
    "unzip",
    "7z",
    "rar",
    "unrar",
    "ldap",
)
"""Lowercase needles: one occurs wherever a command-specific option is found."""
# Words a spaced option value is not: prose about an option (`use --password to ...`).
_PROSE_WORDS: Final = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "be",
        "by",
        "flag",
        "for",
        "from",
        "if",
        "in",
        "is",
        "it",
        "must",
        "not",
        "of",
        "on",
        "option",
        "or",
        "the",
        "then",
        "to",
        "was",
        "when",
        "with",
    }
)


def _value_span(m: re.Match[str], spaced: bool) -> tuple[int, int] | None:
    group = next((g for g in _VALUE_GROUPS if m.start(g) != -1), None)
    if group is None:
        return None
    start, end = m.span(group)
    if spaced and group == "v3" and m.group(group).lower() in _PROSE_WORDS:
        return None
    return (start, end) if end > start else None


def command_line_spans(view: View) -> Iterator[tuple[int, int]]:
    """Secrets on command lines quoted in text (docs/operations.md "Redaction").

    `--password X` / `--token=X` / `-password X` when the option name is secret;
    openssl `-pass pass:X` and keytool `-storepass X` anywhere; and after a command
    word on the same line: `mysql -pX`, `sshpass -p X`, `redis-cli -a X`,
    `docker login -p X`, `mongosh -p X`, `curl -u user:X`, `smbclient -U user%X`,
    `sqlcmd -P X`, `ssh-keygen -N X`, `zip -P X`, `7z -pX`, `ldapsearch -w X`.
    """
    text = view.text
    if "-" not in text:
        return
    for m in _LONG_OPTION().finditer(text):
        if is_secret_option(m.group("name")):
            span = _value_span(m, spaced=m.group("eq") is None)
            if span is not None:
                yield span
    for m in _ALWAYS_SECRET().finditer(text):
        span = _value_span(m, spaced=False)
        if span is not None:
            yield span
    low = view.lowered
    for word in COMMAND_WORDS:
        at = low.find(word)
        searched_to = -1  # this word's commands were searched up to here (a line end)
        while at != -1:
            cmd = _COMMAND_WORD().match(low, at) if at >= searched_to else None
            before = low[at - 1] if at else " "
            if cmd is not None and not (before.isalnum() or before in "_.-"):
                end = yield from _command_options(text, low, cmd)
                searched_to = max(searched_to, end)
            at = low.find(word, at + 1)


def _command_options(text: str, low: str, cmd: re.Match[str]) -> Iterator[tuple[int, int]]:
    """The secret values of one command's options up to the end of its line; returns
    that end (a later occurrence of the command on the same line adds nothing)."""
    kind = _command_kind(cmd.group())
    after = cmd.end()
    line_end = len(text)
    for stop in ("\n", "\r"):
        at = text.find(stop, after)
        if at != -1:
            line_end = min(line_end, at)
    if kind == "login":  # `docker login`, `helm registry login`
        login = _REGISTRY_LOGIN().match(low, after)
        if login is None:
            return after
        after = login.end()
    for m in _COMMAND_OPTIONS[kind]().finditer(text, after, line_end):
        span = _value_span(m, spaced=True)
        if span is not None:
            yield span
    return line_end


# --- generic `name = value` / `name: value` with a secret-looking name ----------------

GENERIC_WORDS: Final = (
    "key",
    "tok",
    "secret",
    "pass",
    "pwd",
    "auth",
    "cookie",
    "session",
    "credential",
    "dsn",
)
"""Every ASCII name `is_secret_assignment_key` accepts contains one of these (lowercased);
names with other letters (`pässword`, `contraseña`) are checked whatever they contain."""
GENERIC_NEEDLES: Final = (*GENERIC_WORDS, "\\u")
"""`GENERIC_WORDS`, and the start of a JSON `\\uXXXX` escape (`p\\u00e4ssword`)."""
# Name characters, accents written as combining marks or JSON `\\uXXXX` escapes included.
_NAME_CHAR = r"[\w.\-\u0300-\u036f\\]"
_JSON_ESCAPE: Final = lazy_regex(r"\\+u([0-9a-fA-F]{4})")
# Scans the reversed lowercase text: a separator, optional spaces and (escaped) closing
# quote, then a name holding one of the words (or a non-ASCII letter), all read
# backwards. One pattern per separator so each starts with a literal, which `re` finds
# much faster than a class.
_REVERSED_NAME = (
    r"[ \t]*(?:[\"']\\?)?(?="
    + _NAME_CHAR
    + r"*?(?:"
    + "|".join(w[::-1] for w in GENERIC_WORDS)
    + r"|[^\x00-\x7f]|[0-9a-f]{4}u\\))(?P<k>(?:[^\W_]|[\u0300-\u036f])"
    + _NAME_CHAR
    + r"*)"
)
_REVERSED_ASSIGNMENTS: Final = (
    lazy_regex(":" + _REVERSED_NAME),
    lazy_regex("=" + _REVERSED_NAME),
)
# A quoted string (plain, or with JSON-escaped quotes) or one bare token, optionally
# after an HTTP auth scheme word (`token: Bearer x`).
_ASSIGNED_VALUE: Final = lazy_regex(
    r"[ \t]*(?:\\\"(?P<v1>" + NOT_MARKER + r"[^\"\\\r\n]+)"
    r"|\"(?P<v2>" + NOT_MARKER + r"(?:[^\"\\\r\n]|\\.)+)\""
    r"|'(?P<v3>" + NOT_MARKER + r"[^'\r\n]+)'"
    r"|(?:(?i:" + SCHEMES + r")[ \t]+|(?!(?i:" + SCHEMES + r")[ \t]))"
    r"(?P<v4>" + NOT_MARKER + r"[^\s\"'`,;&<>{}()\[\]\\]+))"
)


def generic_spans(view: View) -> Iterator[tuple[int, int]]:
    """Values of secret-named assignments, in text order.

    A separator inside a value already yielded is skipped, which keeps the scan linear
    on inputs like `password=password=...`.
    """
    text, n = view.text, len(view.text)
    if text.isascii() and not any(map(view.lowered.__contains__, GENERIC_NEEDLES)):
        return
    hits = [
        (n - 1 - m.start(), n - m.end("k"), n - m.start("k"))  # separator, name span
        for rx in _REVERSED_ASSIGNMENTS
        for m in rx().finditer(view.reversed_lowered)
    ]
    hits.sort()
    covered = 0
    for pos, name_start, name_end in hits:
        if pos < covered:
            continue
        nxt = text[pos + 1 : pos + 2]
        if text[pos] == "=":
            if nxt == "=":  # a comparison, not an assignment
                continue
            end = pos + 2 if nxt == ">" else pos + 1
        else:
            end = pos + 2 if nxt == "=" else pos + 1
        name = text[name_start:name_end]
        if "\\" in name:  # `p\u00e4ssword` inside JSON-encoded text
            name = _JSON_ESCAPE().sub(lambda m: chr(int(m.group(1), 16)), name)
        if not is_secret_assignment_key(name):
            continue
        value_m = _ASSIGNED_VALUE().match(text, end)
        if value_m is not None:
            group = value_m.lastgroup
            assert group is not None
            start, covered = value_m.span(group)
            yield start, covered
