"""Write-ahead batch records: what was asked of a provider batch, durable before it is asked.

One small JSON file per request set under the cache root's `llm/batches/`
(docs/operations.md "Batch runs"), rewritten atomically (temp file, `fsync`, rename)
before and after each remote step: the request keys before the upload, the input file
id after it, `submitting` before the batch is created, its id after, and `collected`
once its results are stored. A run that finds a record for a request it is about to
batch follows that batch (polls it, collects it) instead of submitting the request
again; a record left `submitting` (the process died while the batch was being created)
is looked up at the provider before anything is created: by its metadata (OpenAI), or
among the message batches created since, by their size and their requests' ids
(Anthropic, adapters/llm/batch_apis.py).
"""

from __future__ import annotations

import contextlib
import os
import threading

import msgspec

__all__ = ["BatchRecord", "BatchRecords"]


class BatchRecord(msgspec.Struct, kw_only=True):
    """One request set's batch (its `local` id is the digest of the set)."""

    local: str
    profile_id: str
    model: str
    endpoint: str  # as shown (no credentials)
    keys: list[str]  # the requests' reply keys (their `custom_id`s), in batch order
    round: int = 1  # 1: the first batch of these requests; 2+: a follow-up of failed ones
    state: str = "prepared"  # prepared | uploaded | submitting | submitted | collected
    file_id: str | None = None
    batch_id: str | None = None
    status: str | None = None  # the provider's last status
    # when the batch's creation was asked (wall clock, epoch seconds): a message batch
    # whose answer was lost is looked for among the batches created since
    submitting_at: float | None = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(BatchRecord)


class BatchRecords:
    """The records of one cache root (thread-safe; one writer per record at a time)."""

    def __init__(self, directory: str | None) -> None:
        self.directory = directory
        self._lock = threading.Lock()

    def _path(self, local: str) -> str:
        assert self.directory is not None
        return os.path.join(self.directory, f"{local}.json")

    def save(self, record: BatchRecord) -> None:
        """Durable before it returns: temp file, fsync, rename, directory fsync."""
        if self.directory is None:
            return
        with self._lock:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            path = self._path(record.local)
            tmp = f"{path}.rj-tmp-{os.getpid()}.{threading.get_ident()}"
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
            fd = os.open(tmp, flags | getattr(os, "O_NOFOLLOW", 0), 0o600)
            try:
                os.write(fd, _encoder.encode(record))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            with contextlib.suppress(OSError):
                dfd = os.open(self.directory, os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)

    def remove(self, local: str) -> None:
        """Forget a record (`gc --cache`: a collected batch no kept run references)."""
        if self.directory is None:
            return
        with self._lock, contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(local))

    def load_all(self) -> list[BatchRecord]:
        """Every readable record (a torn or foreign file is skipped)."""
        if self.directory is None:
            return []
        try:
            names = sorted(os.listdir(self.directory))
        except OSError:
            return []
        out: list[BatchRecord] = []
        for name in names:
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(self.directory, name), "rb") as fh:
                    out.append(_decoder.decode(fh.read()))
            except (OSError, msgspec.DecodeError, msgspec.ValidationError):
                continue
        return out
