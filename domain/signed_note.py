"""C2SP signed notes and transparency-log checkpoints, as text (docs/internals.md "Merkle
tree and signed checkpoints").

A checkpoint body is three lines: origin, tree size, base64 root hash. A signed note is
the body, a blank line, and one line per signature: an em dash, the key's name, and
base64(key id ‖ signature). An Ed25519 key id is the first four bytes of
SHA-256(name ‖ "\\n" ‖ 0x01 ‖ public key); a verifier key is written
`name+hex(key id)+base64(0x01 ‖ public key)`. The signature itself is made and checked
in adapters/signing.py; this module only reads and writes the text, so it stays pure.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Final

import msgspec

__all__ = [
    "ED25519",
    "Checkpoint",
    "NoteError",
    "NoteSignature",
    "VerifierKey",
    "checkpoint_text",
    "key_id",
    "parse_checkpoint",
    "parse_note",
    "parse_verifier_key",
    "signed_note",
]

ED25519: Final = 0x01
_DASH: Final = "\u2014 "


class NoteError(ValueError):
    """A note, checkpoint or key that does not parse: the message says what is wrong."""


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True):
    origin: str
    size: int
    root: bytes


class NoteSignature(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    key_id: bytes
    signature: bytes


class VerifierKey(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    key_id: bytes
    public: bytes  # the raw 32-byte Ed25519 public key

    def text(self) -> str:
        blob = base64.b64encode(bytes((ED25519,)) + self.public).decode()
        return f"{self.name}+{self.key_id.hex()}+{blob}"


def key_id(name: str, public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes((ED25519,)) + public).digest()[:4]


def valid_name(name: str) -> bool:
    return bool(name) and all(c.isprintable() and c not in " +" for c in name)


def checkpoint_text(checkpoint: Checkpoint) -> str:
    """The note body a signer signs (ends with a newline, as the format requires)."""
    if "\n" in checkpoint.origin or not checkpoint.origin:
        raise NoteError("a checkpoint origin is one non-empty line")
    root = base64.b64encode(checkpoint.root).decode()
    return f"{checkpoint.origin}\n{checkpoint.size}\n{root}\n"


def signed_note(text: str, signatures: list[NoteSignature]) -> str:
    lines = [
        f"{_DASH}{s.name} {base64.b64encode(s.key_id + s.signature).decode()}\n" for s in signatures
    ]
    return text + "\n" + "".join(lines)


def parse_note(note: str) -> tuple[str, list[NoteSignature]]:
    """(the signed text, its signatures); raises `NoteError`."""
    text, sep, block = note.rpartition("\n\n")
    if not sep or not block.endswith("\n"):
        raise NoteError("not a signed note: no blank line before the signatures")
    signatures = []
    for line in block[:-1].split("\n"):
        if not line.startswith(_DASH):
            raise NoteError(f"not a signature line: {line[:40]!r}")
        name, _, blob = line[len(_DASH) :].rpartition(" ")
        try:
            raw = base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError):
            raise NoteError(f"signature of {name!r} is not base64") from None
        if not valid_name(name) or len(raw) < 5:
            raise NoteError(f"malformed signature line for {name!r}")
        signatures.append(NoteSignature(name=name, key_id=raw[:4], signature=raw[4:]))
    return text + "\n", signatures


def parse_checkpoint(text: str) -> Checkpoint:
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "":
        raise NoteError("a checkpoint has an origin, a tree size and a root hash line")
    origin, size, root = lines[0], lines[1], lines[2]
    if not size.isdigit() or (size != "0" and size.startswith("0")):
        raise NoteError(f"tree size {size[:30]!r} is not a decimal number")
    try:
        digest = base64.b64decode(root, validate=True)
    except (binascii.Error, ValueError):
        raise NoteError("the root hash is not base64") from None
    if len(digest) != 32 or not origin:
        raise NoteError("the root hash is not 32 bytes, or the origin is empty")
    return Checkpoint(origin=origin, size=int(size), root=digest)


def parse_verifier_key(text: str) -> VerifierKey:
    """`name+hex id+base64(0x01 ‖ key)`; raises `NoteError` naming the problem."""
    name, _, rest = text.strip().partition("+")
    hex_id, _, blob = rest.partition("+")
    try:
        raw = base64.b64decode(blob, validate=True)
        kid = bytes.fromhex(hex_id)
    except (binascii.Error, ValueError):
        raise NoteError("not a verifier key (name+id+base64 key)") from None
    if not valid_name(name) or len(raw) != 33 or raw[0] != ED25519 or len(kid) != 4:
        raise NoteError("not an Ed25519 verifier key (name+id+base64 key)")
    if key_id(name, raw[1:]) != kid:
        raise NoteError(f"verifier key {name!r}: its id does not match the key")
    return VerifierKey(name=name, key_id=kid, public=raw[1:])
