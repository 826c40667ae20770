"""Known secrets (issue #27 defects 1-5): the secrets the process holds are hidden by value.

A registered value is hidden by `redact_text` (so by every boundary that uses it: the
journal, error lines, debug data) in every form it can take in text, before anything is
cut; an LLM server's error text is scrubbed before its 200-character cut and its reply
content as it arrives (docs/internals.md "Known secrets").
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from runjournal.adapters.llm import transport
from runjournal.adapters.profiles import ProfileRegistry
from runjournal.adapters.secrets import url_secrets
from runjournal.domain.redaction import (
    KNOWN_MARKER,
    clear_known_secrets,
    redact_obj,
    redact_text,
    register_secrets,
    register_userinfo,
    safe_error_text,
    scrub_known,
)
from runjournal.domain.redaction.known import derived_forms, known_secrets
from support.leak_scan import PIECE, encodings, secret_pieces

PLAIN = "local" + "-access-" + "4711" * 5  # no shape: only its value gives it away
SHAPED = "sk-" + "proj-" + "Q7w" * 13


def _marked(text: str) -> str:
    """`text` with every marker written `[R]` (a shaped key keeps its shape's name)."""
    return re.sub(r"\[REDACTED:[a-z0-9_]+\]", "[R]", text)


def _assert_hidden(text: str, *secrets: str) -> None:
    found = [p for p in secret_pieces(*secrets) if p in text]
    assert found == [], f"pieces left: {found[:5]} in {text!r}"


class TestRegistry:
    def test_nothing_registered_changes_nothing(self) -> None:
        text = f"a reply with {PLAIN}"
        assert scrub_known(text) is text
        assert redact_text(text) == text  # no shape: redaction alone misses it

    @pytest.mark.parametrize("secret", [PLAIN, SHAPED])
    def test_the_whole_value_is_hidden(self, secret: str) -> None:
        register_secrets([secret])
        assert _marked(redact_text(f"got {secret}.")) == "got [R]."

    @pytest.mark.parametrize("secret", [PLAIN, SHAPED])
    def test_every_piece_of_eight_or_more_characters_is_hidden(self, secret: str) -> None:
        register_secrets([secret])
        for size in range(PIECE, len(secret) + 1):
            for start in range(len(secret) - size + 1):
                piece = secret[start : start + size]
                out = redact_text(f"cut here: {piece}|end")
                assert _marked(out) == "cut here: [R]|end", (piece, out)

    def test_shorter_pieces_and_other_text_are_kept(self) -> None:
        register_secrets([PLAIN])
        text = "local 4711 -access is fine, and so is 471147 alone"
        assert redact_text(text) == text

    @pytest.mark.parametrize("form", sorted(encodings(PLAIN)))
    def test_every_encoding_is_hidden_whole_and_cut(self, form: str) -> None:
        register_secrets([PLAIN])
        encoded = encodings(PLAIN)[form]
        _assert_hidden(redact_text(f"x{encoded}y"), PLAIN)
        _assert_hidden(redact_text(f"x{encoded[3:-3]}y"), PLAIN)

    @pytest.mark.parametrize("prefix", ["", "a", "ab", "Bearer ", "user:"])
    def test_base64_at_any_alignment_inside_a_longer_text(self, prefix: str) -> None:
        register_secrets([SHAPED])
        blob = base64.b64encode(f"{prefix}{SHAPED} and more".encode()).decode()
        _assert_hidden(redact_text(f"Authorization: Basic {blob}"), SHAPED)

    @pytest.mark.parametrize("at", [1, 5, 8, 20, 40])
    @pytest.mark.parametrize("brk", ["\n", "\r\n", " ", "\\n", "\n  "])
    def test_a_value_split_by_a_line_break_is_hidden_whole(self, at: int, brk: str) -> None:
        register_secrets([SHAPED])
        out = redact_text(f"echo {SHAPED[:at]}{brk}{SHAPED[at:]} done")
        assert _marked(out) == "echo [R] done", out

    def test_json_escaped_and_url_encoded_forms(self) -> None:
        odd = 'pa"ss/w\\rd+&=ü-' + "9" * 8
        register_secrets([odd])
        assert odd not in redact_text(json.dumps({"k": odd}))
        assert json.dumps(odd)[1:-1] not in redact_text(json.dumps({"k": odd}))
        for form in derived_forms(odd):
            assert form not in redact_text(f"[{form}]")

    def test_a_shaped_token_sharing_a_piece_with_a_known_one_is_hidden_whole(self) -> None:
        """Known pieces and shapes are found in the same text: the registered key's
        `sk-proj-` prefix must not cut another key's shape and leave its rest."""
        register_secrets([SHAPED])
        other = "sk-" + "proj-" + "Zt9" * 14
        assert _marked(redact_text(f"other {other} end")) == "other [R] end"

    def test_userinfo_as_basic_auth(self) -> None:
        register_userinfo("alice", "wonder-land-9")
        header = base64.b64encode(b"alice:wonder-land-9").decode()
        assert redact_text(f"got Basic {header}") == f"got Basic {KNOWN_MARKER}"
        assert redact_text("pw wonder-land-9!") == f"pw {KNOWN_MARKER}!"

    def test_redact_obj_and_error_lines_use_it(self) -> None:
        register_secrets([PLAIN])
        assert PLAIN not in json.dumps(redact_obj({"message": [f"x {PLAIN}"]}))
        line = safe_error_text("y" * 490 + PLAIN, limit=500)  # scrubbed, then cut
        assert not any(p in line for p in secret_pieces(PLAIN))

    def test_registering_again_is_a_no_op_and_clear_forgets(self) -> None:
        register_secrets([PLAIN])
        before = known_secrets()
        register_secrets([PLAIN, ""])
        assert known_secrets() is before
        clear_known_secrets()
        assert redact_text(PLAIN) == PLAIN


class TestServerText:
    def test_error_text_is_scrubbed_before_its_cut(self) -> None:
        """Defect 3: a key straddling the 200-character cut leaked all but its tail."""
        register_secrets([SHAPED])
        for at in range(150, 201, 7):
            body: dict[str, Any] = {"error": {"message": "e" * at + SHAPED}}
            text = transport._server_message(body, scrub_known)
            assert len(text) <= 200
            assert not any(p in text for p in secret_pieces(SHAPED)), at

    def test_a_key_split_by_a_newline_in_error_text(self) -> None:
        register_secrets([PLAIN])
        body = {"error": {"message": f"bad key {PLAIN[:6]}\n{PLAIN[6:]} given"}}
        assert transport._server_message(body, scrub_known) == f"bad key {KNOWN_MARKER} given"


class TestProfiles:
    def test_profile_keys_and_url_credentials_are_registered(self, tmp_path: Any) -> None:
        profiles = tmp_path / "profiles.toml"
        profiles.write_text(
            "[profiles.a]\nprovider = 'openai'\nmodel = 'm'\napi_key_env = 'RJ_A_KEY'\n"
            "base_url = 'http://bob:s3cret%2Fpass-word@127.0.0.1:9/v1'\n"
            "[profiles.b]\nprovider = 'openai'\nmodel = 'm'\n"
        )
        registry = ProfileRegistry.load(str(profiles))
        registry.remember_secrets({"RJ_A_KEY": PLAIN, "OPENAI_API_KEY": SHAPED, "OTHER": "x" * 9})
        basic = base64.b64encode(b"bob:s3cret/pass-word").decode()
        text = f"{PLAIN} {SHAPED} Basic {basic} s3cret/pass-word"
        assert _marked(redact_text(text)) == "[R] [R] Basic [R] [R]"
        assert redact_text("x" * 9) == "x" * 9  # not a profile's variable

    def test_url_secrets(self) -> None:
        assert url_secrets("http://127.0.0.1:8080/v1") == []
        assert url_secrets("http://user@host/v1") == []
        assert url_secrets("http://host:notaport/v1") == []
        assert "u:p%40ss" in url_secrets("http://u:p%40ss@host/v1")
        assert "u:p@ss" in url_secrets("http://u:p%40ss@host/v1")
