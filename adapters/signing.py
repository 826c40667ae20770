"""The signing key: Ed25519 through `cryptography`, kept in the user's config dir
(docs/operations.md "Signed checkpoints").

`signing-key` (0600) holds `PRIVATE+KEY+name+id+base64(0x01 ‖ seed)` after a comment line
with the time it was made; `signing-key.pub` holds the verifier key and that time, the
line to publish. `cryptography` is imported when a key is used, never at start-up.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

import msgspec
from runjournal.domain.signed_note import (
    ED25519,
    NoteError,
    NoteSignature,
    VerifierKey,
    key_id,
    parse_verifier_key,
    valid_name,
)

__all__ = ["KEY_FILE", "PUBLIC_FILE", "Signer", "SigningKeyError", "TrustedKey", "make_key"]

KEY_FILE: Final = "signing-key"
PUBLIC_FILE: Final = "signing-key.pub"
_PRIVATE: Final = "PRIVATE+KEY+"
_MADE: Final = "# made "


class SigningKeyError(Exception):
    """A key that cannot be made, read or used: one line saying why."""


class TrustedKey(msgspec.Struct, frozen=True, kw_only=True):
    """A verifier key the auditor trusts, and since when it signs every run."""

    key: VerifierKey
    made: datetime | None = None


class Signer:
    """Signs note text with the private key (the signature line's name is the key's)."""

    def __init__(self, name: str, seed: bytes, made: datetime | None) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        public = self._key.public_key().public_bytes_raw()
        self.verifier = VerifierKey(name=name, key_id=key_id(name, public), public=public)
        self.made = made

    def sign(self, text: str) -> NoteSignature:
        return NoteSignature(
            name=self.verifier.name,
            key_id=self.verifier.key_id,
            signature=self._key.sign(text.encode()),
        )


def verify(key: VerifierKey, text: str, signature: NoteSignature) -> bool:
    """True when `signature` is `key`'s over `text` (names and ids must match too)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if signature.name != key.name or signature.key_id != key.key_id:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(key.public).verify(signature.signature, text.encode())
    except (InvalidSignature, ValueError):
        return False
    return True


def trusted_key_for(trusted: Sequence[TrustedKey], signature: NoteSignature) -> VerifierKey | None:
    """The trusted key a signature line names (by name and key id), if any."""
    for t in trusted:
        if (t.key.name, t.key.key_id) == (signature.name, signature.key_id):
            return t.key
    return None


def make_key(directory: str, name: str, *, force: bool = False) -> Signer:
    """Write a new key pair into `directory` (created 0700); refuses to replace one
    unless `force`. Returns its signer."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    if not valid_name(name):
        raise SigningKeyError(f"key name {name!r} must be printable, without spaces or '+'")
    path = os.path.join(directory, KEY_FILE)
    if os.path.lexists(path) and not force:
        raise SigningKeyError(f"a signing key exists already: {path} (--force replaces it)")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    seed = Ed25519PrivateKey.generate().private_bytes_raw()
    made = datetime.now(UTC).replace(microsecond=0)
    signer = Signer(name, seed, made)
    stamp = made.strftime("%Y-%m-%dT%H:%M:%SZ")
    kid = signer.verifier.key_id.hex()
    blob = base64.b64encode(bytes((ED25519,)) + seed).decode()
    _write_private(path, f"{_MADE}{stamp}\n{_PRIVATE}{name}+{kid}+{blob}\n", force=force)
    _write_private(
        os.path.join(directory, PUBLIC_FILE),
        f"{_MADE}{stamp}\n{signer.verifier.text()}\n",
        force=True,
        mode=0o644,
    )
    return signer


def claim_once(directory: str, mark: str) -> bool:
    """True the first time `mark` is claimed in `directory` (created 0700), for a hint said
    once per user; False when it was claimed before or cannot be (said next time then)."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(
            os.path.join(directory, mark),
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0),
            0o600,
        )
    except OSError:
        return False
    os.close(fd)
    return True


def _write_private(path: str, text: str, *, force: bool, mode: int = 0o600) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    if force:
        os.replace(tmp, path)
    else:
        try:
            os.link(tmp, path)  # never replaces a key made meanwhile
        finally:
            os.unlink(tmp)


def load_signer(directory: str) -> Signer | None:
    """The user's signer, or None when no key was made; raises `SigningKeyError` for a key
    file that is unreadable, malformed, or readable by others."""
    path = os.path.join(directory, KEY_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SigningKeyError(f"cannot read signing key {path}: {exc.strerror}") from None
    try:
        if os.fstat(fd).st_mode & 0o077:
            raise SigningKeyError(f"signing key {path} is readable by others: chmod 600 it")
        text = os.read(fd, 4096).decode("utf-8", "replace")
    finally:
        os.close(fd)
    made = _made(text)
    for line in text.splitlines():
        if line.startswith(_PRIVATE):
            name, _, rest = line[len(_PRIVATE) :].partition("+")
            _, _, blob = rest.partition("+")
            try:
                raw = base64.b64decode(blob, validate=True)
            except (binascii.Error, ValueError):
                break
            if len(raw) == 33 and raw[0] == ED25519 and valid_name(name):
                return Signer(name, raw[1:], made)
            break
    raise SigningKeyError(f"signing key {path} is not a runjournal Ed25519 key")


def read_trusted(text: str) -> TrustedKey:
    """A verifier key line (or a `signing-key.pub` file's text); raises `NoteError`."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    if len(lines) != 1:
        raise NoteError("expected one verifier key line (name+id+base64 key)")
    return TrustedKey(key=parse_verifier_key(lines[0]), made=_made(text))


def local_trusted(directory: str) -> TrustedKey | None:
    """The public half of the user's own key, when one was made."""
    try:
        with open(os.path.join(directory, PUBLIC_FILE), encoding="utf-8") as f:
            return read_trusted(f.read(4096))
    except FileNotFoundError:
        return None
    except (OSError, NoteError) as exc:
        raise SigningKeyError(f"cannot read {PUBLIC_FILE} in {directory}: {exc}") from None


def _made(text: str) -> datetime | None:
    for line in text.splitlines():
        if line.startswith(_MADE):
            try:
                return datetime.strptime(line[len(_MADE) :].strip(), "%Y-%m-%dT%H:%M:%SZ").replace(
                    tzinfo=UTC
                )
            except ValueError:
                return None
    return None
