"""Run exports: the file format, its hash chain, and idempotent import (SQLite and PostgreSQL)."""

from __future__ import annotations

import hashlib
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.adapters.export import (
    EXPORT_FORMAT,
    MAGIC,
    ImportConflict,
    NotAnExport,
    VerificationFailed,
    decode_export,
    encode_export,
    export_run,
    import_run,
)
from runjournal.adapters.journal import JournalStore, journal_event_to_json, open_journal
from runjournal.domain.events import WarningRecorded
from support import synthetic as syn

RUN = syn.synthetic_run(syn.run_id_for(11), lanes=2, chunks=3)
OTHER = syn.synthetic_run(syn.run_id_for(11), lanes=1, chunks=2)  # same id, other events


def encode(run: syn.SyntheticRun = RUN) -> bytes:
    return encode_export(run.run_id, run.events, tool_version="0.1.0", created_by="test")


def split(data: bytes) -> tuple[bytes, bytes, bytes]:
    """(prefix + header, header map bytes, decompressed body)."""
    data = data[:-32]  # the trailing whole-file digest
    (size,) = struct.unpack(">I", data[10:14])
    head = data[: 14 + size]
    return head, data[14 : 14 + size], zstandard.ZstdDecompressor().decompress(data[len(head) :])


def rebuild(head: bytes, body: bytes) -> bytes:
    """A crafted file with a valid file digest, so the checks inside it are what refuse it."""
    packed = zstandard.ZstdCompressor(write_checksum=True, write_content_size=True).compress(body)
    return head + packed + hashlib.sha256(head + packed).digest()


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JournalStore]:
    with syn.backend(request.param, tmp_path) as url:
        journal = open_journal(url)
        try:
            yield journal
        finally:
            journal.close()


class TestFormat:
    def test_header_is_readable_without_decompressing(self) -> None:
        data = encode()
        assert data[:8] == MAGIC
        assert struct.unpack(">H", data[8:10]) == (EXPORT_FORMAT,)
        _, header, _ = split(data)
        doc = msgspec.msgpack.decode(header)
        assert doc["run_id"] == RUN.run_id
        assert doc["events"] == len(RUN.events)
        assert doc["tool_version"] == "0.1.0" and doc["created_by"] == "test"
        assert doc["chain"] == "sha256"

    def test_round_trip_is_typed_and_deterministic(self) -> None:
        data = encode()
        assert encode() == data
        export = decode_export(data)
        assert export.events == RUN.events
        assert export.header.run_id == RUN.run_id

    def test_the_chain_links_every_frame_and_the_trailer_holds_the_last(self) -> None:
        data = encode()
        head, _, body = split(data)
        digest = hashlib.sha256(head).digest()
        pos = 0
        for _ in RUN.events:
            (size,) = struct.unpack(">I", body[pos : pos + 4])
            frame = body[pos + 4 : pos + 4 + size]
            digest = hashlib.sha256(digest + frame).digest()
            assert body[pos + 4 + size : pos + 36 + size] == digest
            pos += 36 + size
        trailer = msgspec.msgpack.decode(body[pos + 4 :])
        # an unsealed run carries no checkpoint (docs/internals.md "Export and import")
        assert trailer == {"events": len(RUN.events), "final_hash": digest.hex(), "checkpoints": []}
        assert decode_export(data).final_hash == digest.hex()


class TestRefusals:
    @pytest.mark.parametrize(
        "data",
        [b"", b"RJEXPOR", b"SQLite format 3\x00" + b"\x00" * 100, b"PK\x03\x04 a zip file"],
    )
    def test_a_foreign_file_is_not_an_export(self, data: bytes) -> None:
        with pytest.raises(NotAnExport, match="not a runjournal export"):
            decode_export(data)

    def test_a_newer_format_is_refused_as_unsupported(self) -> None:
        data = encode()
        with pytest.raises(NotAnExport, match="format 2 is not supported"):
            decode_export(MAGIC + struct.pack(">H", 2) + data[10:])

    @pytest.mark.parametrize("keep", [12, 40, -200, -1])
    def test_a_truncated_file_is_refused(self, keep: int) -> None:
        with pytest.raises(VerificationFailed, match=r"truncated|corrupt"):
            decode_export(encode()[:keep])

    def test_trailing_bytes_are_refused(self) -> None:
        with pytest.raises(VerificationFailed, match="file digest"):
            decode_export(encode() + b"\x00")
        head, _, body = split(encode())
        packed = zstandard.ZstdCompressor().compress(body) + b"\x00"
        crafted = head + packed + hashlib.sha256(head + packed).digest()
        with pytest.raises(VerificationFailed, match="unused data"):
            decode_export(crafted)

    def test_a_changed_header_breaks_the_chain(self) -> None:
        head, header, body = split(encode())
        doc = msgspec.msgpack.decode(header)
        doc["created_by"] = "someone else"
        new_header = msgspec.msgpack.encode(doc)
        data = rebuild(head[:10] + struct.pack(">I", len(new_header)) + new_header, body)
        with pytest.raises(VerificationFailed, match="hash chain broken at event 1"):
            decode_export(data)

    def test_a_changed_event_breaks_the_chain_at_that_event(self) -> None:
        head, _, body = split(encode())
        target = RUN.decisions[0].code.value.encode()
        index = body.index(target)
        changed = body[:index] + b"X" + body[index + 1 :]
        with pytest.raises(VerificationFailed, match=r"hash chain broken at event \d+"):
            decode_export(rebuild(head, changed))

    def test_a_dropped_final_event_is_caught(self) -> None:
        full_head, _, _ = split(encode())
        _, _, shorter_body = split(encode(syn.SyntheticRun(RUN.run_id, RUN.events[:-1])))
        with pytest.raises(VerificationFailed):
            decode_export(rebuild(full_head, shorter_body))

    def test_a_frame_naming_another_module_is_never_resolved(self) -> None:
        """A consistent chain over a foreign topic: refused before any import happens."""
        head, _, body = split(encode())
        frames, pos, digest = [], 0, hashlib.sha256(head).digest()
        for _ in RUN.events:
            (size,) = struct.unpack(">I", body[pos : pos + 4])
            frames.append(body[pos + 4 : pos + 4 + size])
            pos += 36 + size
        _, version, state = msgspec.msgpack.decode(frames[1])
        frames[1] = msgspec.msgpack.encode(["antigravity:fly", version, state])
        out = []
        for frame in frames:
            digest = hashlib.sha256(digest + frame).digest()
            out += [struct.pack(">I", len(frame)), frame, digest]
        trailer = msgspec.msgpack.encode({"events": len(frames), "final_hash": digest.hex()})
        out += [struct.pack(">I", len(trailer)), trailer]
        before = set(sys.modules)
        with pytest.raises(VerificationFailed, match="unknown type 'antigravity:fly'"):
            decode_export(rebuild(head, b"".join(out)))
        assert "antigravity" not in set(sys.modules) - before

    def test_an_export_must_start_with_the_allocation(self) -> None:
        with pytest.raises(Exception, match="allocation"):
            encode_export(RUN.run_id, RUN.events[1:], tool_version="0.1.0", created_by="t")


@settings(max_examples=200, deadline=None)
@given(position=st.integers(min_value=0), bit=st.integers(min_value=0, max_value=7))
def test_any_flipped_bit_is_refused(position: int, bit: int) -> None:
    data = bytearray(ENCODED)
    position %= len(data)
    data[position] ^= 1 << bit
    with pytest.raises((NotAnExport, VerificationFailed)):
        decode_export(bytes(data))


ENCODED = encode()


class TestImport:
    def test_import_then_again_is_harmless(self, store: JournalStore) -> None:
        export = decode_export(encode())
        first = import_run(store, export)
        assert (first.run_id, first.events, first.already_imported) == (
            RUN.run_id,
            len(RUN.events),
            False,
        )
        second = import_run(store, decode_export(encode()))
        assert second.already_imported and second.events == len(RUN.events)
        assert list(store.events(RUN.run_id)) == RUN.events

    def test_other_events_for_the_same_run_are_refused(self, store: JournalStore) -> None:
        store.append_events(OTHER.run_id, OTHER.events)
        with pytest.raises(ImportConflict, match="already in the journal with other events"):
            import_run(store, decode_export(encode()))
        assert list(store.events(OTHER.run_id)) == OTHER.events

    def test_an_interrupted_import_is_completed_by_importing_again(
        self, store: JournalStore
    ) -> None:
        export = decode_export(encode())
        store.append_events(RUN.run_id, RUN.events[:7])  # what a killed import left
        result = import_run(store, export, batch=5)
        assert (result.events, result.already_imported, result.resumed_after) == (
            len(RUN.events),
            False,
            7,
        )
        assert list(store.events(RUN.run_id)) == RUN.events

    def test_a_batched_import_reads_the_run_back_once_not_once_per_batch(
        self, store: JournalStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        export = decode_export(encode())
        reads, events = [], JournalStore.events

        def counted(self: JournalStore, run_id: str) -> Iterator:
            reads.append(run_id)
            return events(self, run_id)

        monkeypatch.setattr(JournalStore, "events", counted)
        assert len(RUN.events) > 3 * 2  # several batches of 2
        import_run(store, export, batch=2)
        # once to compare with what is there, once to replay before appending
        assert len(reads) == 2
        monkeypatch.undo()
        assert list(store.events(RUN.run_id)) == RUN.events

    def test_a_prefix_that_is_not_the_files_is_refused(self, store: JournalStore) -> None:
        store.append_events(OTHER.run_id, OTHER.events[:3])
        with pytest.raises(ImportConflict):
            import_run(store, decode_export(encode()))

    def test_export_from_one_store_shows_identically_in_another(
        self, store: JournalStore, tmp_path: Path
    ) -> None:
        store.append_events(RUN.run_id, RUN.events)
        data, count = export_run(store, RUN.run_id, tool_version="0.1.0", created_by="t")
        assert count == len(RUN.events)
        with open_journal(str(tmp_path / "target.sqlite3")) as target:
            import_run(target, decode_export(data))
            shown = [journal_event_to_json(e) for e in target.events(RUN.run_id)]
        assert shown == [journal_event_to_json(e) for e in store.events(RUN.run_id)]

    def test_large_events_survive(self, store: JournalStore) -> None:
        *body, last = RUN.events
        big = WarningRecorded(
            originator_id=last.originator_id,
            originator_version=last.originator_version,
            timestamp=last.timestamp,
            step="terms",
            lane="x",
            message="a long warning " * 500,
        )
        moved = msgspec.structs.replace(last, originator_version=last.originator_version + 1)
        run = syn.SyntheticRun(RUN.run_id, [*body, big, moved])
        result = import_run(store, decode_export(encode(run)))
        assert result.events == len(run.events)
        assert list(store.events(RUN.run_id)) == run.events
