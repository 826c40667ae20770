"""Signed notes in the C2SP format, checked against the reference vectors of Go's
`golang.org/x/mod/sumdb/note` (the format's origin), and their parsers under hypothesis."""

from __future__ import annotations

import base64
import contextlib
import os
import stat

import pytest
from hypothesis import given
from hypothesis import strategies as st
from runjournal.adapters.signing import (
    Signer,
    SigningKeyError,
    load_signer,
    local_trusted,
    make_key,
    verify,
)
from runjournal.domain.signed_note import (
    Checkpoint,
    NoteError,
    checkpoint_text,
    parse_checkpoint,
    parse_note,
    parse_verifier_key,
    signed_note,
)

# The vectors of Go's note package: its private key, verifier key, text and signed note.
SKEY_BLOB = "AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
SIGNED = (
    TEXT + "\n— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FF"
    "YC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)


def test_the_reference_vectors() -> None:
    signer = Signer("PeterNeumann", base64.b64decode(SKEY_BLOB)[1:], None)
    assert signer.verifier.text() == VKEY
    assert signed_note(TEXT, [signer.sign(TEXT)]) == SIGNED
    text, signatures = parse_note(SIGNED)
    assert text == TEXT and len(signatures) == 1
    assert verify(parse_verifier_key(VKEY), text, signatures[0])
    assert not verify(parse_verifier_key(VKEY), text.replace("answer", "answers"), signatures[0])


def test_a_verifier_key_whose_id_does_not_match_is_refused() -> None:
    with pytest.raises(NoteError, match="id does not match"):
        parse_verifier_key(VKEY.replace("c74f20a3", "c74f20a4"))


@given(
    st.text(st.characters(blacklist_characters="\n", blacklist_categories=["Cs"]), min_size=1),
    st.integers(0, 2**63),
    st.binary(min_size=32, max_size=32),
)
def test_a_checkpoint_round_trips(origin: str, size: int, root: bytes) -> None:
    checkpoint = Checkpoint(origin=origin, size=size, root=root)
    assert parse_checkpoint(checkpoint_text(checkpoint)) == checkpoint


@given(st.text(max_size=300))
def test_the_parsers_raise_only_note_errors(junk: str) -> None:
    for parse in (parse_note, parse_checkpoint, parse_verifier_key):
        with contextlib.suppress(NoteError):
            parse(junk)


def test_a_key_is_private_to_its_owner_and_never_replaced(tmp_path) -> None:
    directory = str(tmp_path / "config")
    signer = make_key(directory, "alice")
    key_file = os.path.join(directory, "signing-key")
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    loaded = load_signer(directory)
    assert loaded is not None and loaded.verifier == signer.verifier and loaded.made
    own = local_trusted(directory)
    assert own is not None and own.key == signer.verifier and own.made == loaded.made
    with pytest.raises(SigningKeyError, match="exists already"):
        make_key(directory, "bob")
    assert load_signer(directory).verifier.name == "alice"  # type: ignore[union-attr]
    os.chmod(key_file, 0o640)
    with pytest.raises(SigningKeyError, match="readable by others"):
        load_signer(directory)
    assert load_signer(str(tmp_path / "none")) is None
