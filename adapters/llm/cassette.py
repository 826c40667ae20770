"""Record and replay LLM exchanges (`--llm-record FILE`, `--llm-replay FILE`, profile `replay`).

A cassette maps the canonical digest of a request (provider, model, messages, sampling
options, response format: never the endpoint, a key or any header) to the reply that
answered it. Recording merges into an existing file and writes it atomically at the
end of the run; replay is strict: a request not in the cassette fails its stage with
`replay_miss` naming step, lane and chunk, and nothing touches the network.
The file is canonical JSON (sorted, no timestamps), so re-recording the same answers
changes no byte; a file with two exchanges for one request is refused, naming both
(docs/operations.md "Recording and replaying LLM calls").
"""

from __future__ import annotations

import os
import threading
from typing import Any

import msgspec
from runjournal.adapters.fsroot import FsError, FsRoot
from runjournal.domain.identity import canonical_bytes, sha256_hex

FORMAT = "runjournal.llm-cassette"
VERSION = 1


class CassetteError(Exception):
    """A cassette that cannot be read or written; one line naming the file."""


class Reply(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What an exchange answered: the text, token counts and how it finished.

    `cached_tokens`: the prompt tokens the provider served from its prompt cache (part of
    `prompt_tokens`, priced apart: docs/configuration.md "LLM profiles" `prices`);
    defaults are left out of the stored form, so cassettes recorded before it are
    unchanged."""

    content: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    cached_tokens: int = 0
    cache_write_tokens: int = 0  # of prompt_tokens, written to the cache (Anthropic)


class Exchange(msgspec.Struct, frozen=True, kw_only=True):
    key: str
    request: dict[str, Any]
    reply: Reply


class _File(msgspec.Struct, frozen=True, kw_only=True):
    format: str
    version: int
    exchanges: list[Exchange]


_decoder = msgspec.json.Decoder(_File)


def request_digest(request: dict[str, Any]) -> str:
    """The cassette key: sha256 of the canonical request (what was asked, not where)."""
    return sha256_hex(canonical_bytes(request))


class Cassette:
    """An in-memory cassette bound to one file; thread-safe."""

    def __init__(self, path: str, exchanges: dict[str, Exchange] | None = None) -> None:
        self.path = path
        self._exchanges: dict[str, Exchange] = dict(exchanges or {})
        self._lock = threading.Lock()
        self._dirty = False
        self.hits = 0
        self.recorded = 0

    @classmethod
    def load(cls, path: str, *, missing_ok: bool) -> Cassette:
        """Read `path`; an absent file is an empty cassette only when `missing_ok`."""
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            if missing_ok:
                return cls(path)
            raise CassetteError(f"cassette {path}: no such file") from None
        except OSError as exc:
            raise CassetteError(f"cassette {path}: cannot read: {exc.strerror}") from None
        try:
            doc = _decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise CassetteError(f"cassette {path}: not a runjournal cassette ({exc})") from None
        if doc.format != FORMAT or doc.version != VERSION:
            raise CassetteError(
                f"cassette {path}: format {doc.format!r} version {doc.version} is not "
                f"{FORMAT!r} version {VERSION}"
            )
        exchanges: dict[str, Exchange] = {}
        seen: dict[str, int] = {}
        for number, exchange in enumerate(doc.exchanges, 1):
            first = seen.setdefault(exchange.key, number)
            if first != number:  # which answer would replay give? Neither, silently.
                raise CassetteError(
                    f"cassette {path}: exchanges {first} and {number} both answer request "
                    f"{exchange.key[:16]} (a cassette holds one exchange per request; "
                    f"remove one of them)"
                )
            exchanges[exchange.key] = exchange
        return cls(path, exchanges)

    def __len__(self) -> int:
        with self._lock:
            return len(self._exchanges)

    def get(self, key: str) -> Reply | None:
        with self._lock:
            found = self._exchanges.get(key)
            if found is not None:
                self.hits += 1
            return found.reply if found is not None else None

    def exchange(self, key: str) -> Exchange | None:
        """The exchange recorded for a request digest, without counting a replay hit
        (`journal otel --content`)."""
        with self._lock:
            return self._exchanges.get(key)

    def put(self, key: str, request: dict[str, Any], reply: Reply) -> None:
        with self._lock:
            old = self._exchanges.get(key)
            new = Exchange(key=key, request=request, reply=reply)
            if old != new:
                self._exchanges[key] = new
                self._dirty = True
            self.recorded += 1

    def to_bytes(self) -> bytes:
        with self._lock:
            exchanges = [self._exchanges[k] for k in sorted(self._exchanges)]
        doc = _File(format=FORMAT, version=VERSION, exchanges=exchanges)
        raw = msgspec.json.encode(doc, order="deterministic")
        return msgspec.json.format(raw, indent=1) + b"\n"

    def save(self) -> bool:
        """Write the file atomically when something changed; True when written."""
        with self._lock:
            if not self._dirty and os.path.exists(self.path):
                return False
        data = self.to_bytes()
        directory, name = os.path.split(os.path.abspath(self.path))
        try:
            with FsRoot.open(directory) as root:
                root.write_bytes(name, data, overwrite=True)  # atomic and durable
        except (FsError, OSError) as exc:
            why = exc.strerror or str(exc)
            raise CassetteError(f"cassette {self.path}: cannot write: {why}") from None
        with self._lock:
            self._dirty = False
        return True
