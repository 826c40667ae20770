"""The chunk-plan store (envelope, modes, publication, permissions) and the chunk map files.

docs/internals.md "Chunk-plan store and accepted chunk map": a stored plan is
trusted only when every check passes, read-only never writes, bypass builds nothing, and
concurrent publishers leave exactly one valid file.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import msgspec
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.adapters.chunkplans import (
    CHUNK_MAP_INDEX_NAME,
    CHUNK_MAP_INDEX_SCHEMA,
    CHUNK_MAP_NAME,
    CHUNK_MAP_SCHEMA,
    PLAN_DIR,
    ChunkMapEncoder,
    ChunkPlanFileStore,
    PlanEnvelopeError,
    PlanStoreOpenError,
    PlanStoreWriteError,
    decode_plan,
    encode_chunk_map,
    encode_chunk_map_index,
    encode_plan,
    plan_file_name,
)
from runjournal.adapters.fsroot import TEMP_PREFIX, FsRoot, NoSpace
from runjournal.domain.chunking import (
    PLANNER_FINGERPRINT,
    ChunkingSettings,
    ChunkStrategy,
    Span,
    plan_chunks,
)
from runjournal.domain.events import PlanOutcome
from runjournal.domain.plan_keys import CacheMode, ChunkMapEntry, PlanFacts, plan_key
from runjournal.domain.ports import PlanLookup

SETTINGS = settings(max_examples=200, deadline=None)
PYTHON = sys.executable  # the interpreter running the tests, so the child sees this install
SOURCE = "".join(f"Paragraph {i} has some words, é and ✓.\n\n" for i in range(40)).encode()
CHUNKING = ChunkingSettings(ChunkStrategy.PARAGRAPHS, 120)
FACTS = PlanFacts(
    source_sha256=hashlib.sha256(SOURCE).hexdigest(), source_size=len(SOURCE), settings=CHUNKING
)
KEY = FACTS.key()
SPANS = plan_chunks(SOURCE, CHUNKING)


def spans_from(lengths: list[int]) -> list[Span]:
    spans, position = [], 0
    for length in lengths:
        spans.append(Span(position, position + length))
        position += length
    return spans


def other_key(tag: str) -> str:
    return hashlib.sha256(tag.encode()).hexdigest()


def plan_path(cache: Path, key: str = KEY) -> Path:
    return cache / PLAN_DIR / key[:2] / f"{key}.plan"


def store(cache: Path, mode: CacheMode = CacheMode.USE) -> ChunkPlanFileStore:
    return ChunkPlanFileStore.open_for_mode(cache, mode)


def snapshot(top: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every entry beneath `top` with its mode, mtime and content: any write shows."""
    seen: dict[str, tuple[int, int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            info = path.lstat()
            data = path.read_bytes() if stat.S_ISREG(info.st_mode) else b""
            seen[str(path.relative_to(top))] = (info.st_mode, info.st_mtime_ns, data)
    return seen


def forge(
    *,
    magic: bytes = b"RJPL",
    version: int = 1,
    header: dict[str, object] | None = None,
    spans: object = None,
    payload: bytes | None = None,
) -> bytes:
    """An envelope with a valid digest around chosen parts, to reach the checks behind it."""
    fields: dict[str, object] = {
        "key": KEY,
        "planner_fingerprint": FACTS.planner_fingerprint,
        "settings": {"strategy": CHUNKING.strategy.value, "max_chars": CHUNKING.max_chars},
        "source_sha256": FACTS.source_sha256,
        "source_size": FACTS.source_size,
        "count": len(SPANS),
    }
    fields.update(header or {})
    header_bytes = msgspec.msgpack.encode(fields)
    if payload is None:
        raw = msgspec.msgpack.encode(SPANS if spans is None else spans)
        payload = zstandard.ZstdCompressor().compress(raw)
    body = (
        struct.pack(">4sHI", magic, version, len(header_bytes))
        + header_bytes
        + struct.pack(">I", len(payload))
        + payload
    )
    return body + hashlib.sha256(body).digest()


# --------------------------------------------------------------------------- keys


class TestPlanKey:
    def test_is_sha256_of_the_canonical_json_of_the_three_facts(self) -> None:
        canonical = (
            b'{"planner_fingerprint":"fp","settings":{"strategy":"paragraphs","max_chars":2000},'
            b'"source_sha256":"' + b"a" * 64 + b'"}'
        )
        key = plan_key("a" * 64, ChunkingSettings(), "fp")
        assert key == hashlib.sha256(canonical).hexdigest()
        assert key == "5339bf298621940c6052cf1319e2690f1e7173b753e130ac07dc5fc2371359ee"

    def test_defaults_to_the_current_planner_fingerprint(self) -> None:
        assert plan_key("b" * 64, CHUNKING) == plan_key("b" * 64, CHUNKING, PLANNER_FINGERPRINT)
        assert FACTS.key() == plan_key(FACTS.source_sha256, CHUNKING)

    @pytest.mark.parametrize(
        "changed",
        [
            ("c" * 64, CHUNKING, PLANNER_FINGERPRINT),
            ("b" * 64, ChunkingSettings(ChunkStrategy.LINES, 120), PLANNER_FINGERPRINT),
            ("b" * 64, ChunkingSettings(ChunkStrategy.PARAGRAPHS, 121), PLANNER_FINGERPRINT),
            ("b" * 64, CHUNKING, PLANNER_FINGERPRINT + "-next"),
        ],
    )
    def test_every_input_changes_the_key(self, changed: tuple[str, ChunkingSettings, str]) -> None:
        base = plan_key("b" * 64, CHUNKING, PLANNER_FINGERPRINT)
        assert plan_key(*changed) != base

    @pytest.mark.parametrize("digest", ["", "B" * 64, "b" * 63, "g" * 64, "../" + "b" * 61])
    def test_refuses_a_source_digest_that_is_not_lowercase_hex(self, digest: str) -> None:
        with pytest.raises(ValueError):
            plan_key(digest, CHUNKING)

    def test_refuses_an_empty_fingerprint(self) -> None:
        with pytest.raises(ValueError):
            plan_key("b" * 64, CHUNKING, "")

    def test_is_stable_across_processes_and_hash_seeds(self) -> None:
        code = (
            "from runjournal.domain.plan_keys import plan_key\n"
            "from runjournal.domain.chunking import ChunkingSettings, ChunkStrategy\n"
            f"print(plan_key({FACTS.source_sha256!r}, ChunkingSettings(ChunkStrategy.PARAGRAPHS,"
            " 120)))\n"
        )
        keys = set()
        for seed in ("0", "12345"):
            env = {**os.environ, "PYTHONHASHSEED": seed}
            done = subprocess.run(
                [PYTHON, "-c", code], capture_output=True, text=True, timeout=60, env=env
            )
            assert done.returncode == 0, done.stderr
            keys.add(done.stdout.strip())
        assert keys == {KEY}

    @pytest.mark.parametrize("key", ["", "A" * 64, "a" * 65, "../" + "a" * 61, "a" * 62 + "/x"])
    def test_a_bad_key_never_reaches_a_path(self, tmp_path: Path, key: str) -> None:
        with pytest.raises(ValueError):
            plan_file_name(key)
        plans = store(tmp_path)
        with pytest.raises(ValueError):
            plans.get(key)
        with pytest.raises(ValueError):
            plans.publish(key, SPANS)
        assert not (tmp_path / PLAN_DIR).exists() or os.listdir(tmp_path / PLAN_DIR) == []


# --------------------------------------------------------------------------- envelope


class TestEnvelope:
    @SETTINGS
    @given(lengths=st.lists(st.integers(1, 1 << 40), max_size=60), with_facts=st.booleans())
    def test_round_trip(self, lengths: list[int], with_facts: bool) -> None:
        spans = spans_from(lengths)
        size = spans[-1].end if spans else 0
        facts = PlanFacts(source_sha256="d" * 64, source_size=size, settings=CHUNKING)
        key = facts.key()
        data = encode_plan(key, spans, facts if with_facts else None)
        assert data[:4] == b"RJPL"
        assert decode_plan(key, data) == spans
        assert encode_plan(key, spans, facts if with_facts else None) == data

    def test_every_flipped_byte_is_corrupt(self, tmp_path: Path) -> None:
        plans = store(tmp_path)
        assert plans.publish(KEY, SPANS, FACTS)
        path = plan_path(tmp_path)
        good = path.read_bytes()
        for index in range(len(good)):
            for mask in (0x01, 0x80):
                bad = bytearray(good)
                bad[index] ^= mask
                path.write_bytes(bytes(bad))
                assert plans.get(KEY) == PlanLookup(PlanOutcome.CORRUPT), index
        path.write_bytes(good)
        assert plans.get(KEY) == PlanLookup(PlanOutcome.REUSED, SPANS)

    def test_every_truncation_and_any_extension_is_corrupt(self, tmp_path: Path) -> None:
        plans = store(tmp_path)
        plans.publish(KEY, SPANS, FACTS)
        path = plan_path(tmp_path)
        good = path.read_bytes()
        for length in range(len(good)):
            path.write_bytes(good[:length])
            assert plans.get(KEY).outcome is PlanOutcome.CORRUPT, length
        for extra in (b"\x00", b"RJPL", good):
            path.write_bytes(good + extra)
            assert plans.get(KEY).outcome is PlanOutcome.CORRUPT

    def test_a_plan_stored_under_another_key_is_corrupt(self, tmp_path: Path) -> None:
        plans = store(tmp_path)
        plans.publish(KEY, SPANS, FACTS)
        elsewhere = other_key("elsewhere")
        target = plan_path(tmp_path, elsewhere)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(plan_path(tmp_path).read_bytes())
        assert plans.get(elsewhere) == PlanLookup(PlanOutcome.CORRUPT)
        assert plans.get(KEY).outcome is PlanOutcome.REUSED

    def test_the_forge_helper_builds_what_the_store_accepts(self) -> None:
        assert decode_plan(KEY, forge()) == SPANS

    @pytest.mark.parametrize(
        "bad",
        [
            pytest.param({"magic": b"RJCK"}, id="foreign-magic"),
            pytest.param({"version": 2}, id="future-version"),
            pytest.param({"version": 0}, id="past-version"),
            pytest.param({"header": {"key": other_key("x")}}, id="header-key"),
            pytest.param({"header": {"count": len(SPANS) + 1}}, id="count"),
            pytest.param({"header": {"source_size": len(SOURCE) - 1}}, id="size"),
            pytest.param({"header": {"source_sha256": "e" * 64}}, id="facts-not-the-key"),
            pytest.param({"header": {"planner_fingerprint": "other/1"}}, id="fingerprint"),
            pytest.param({"header": {"settings": {"strategy": "nope"}}}, id="settings"),
            pytest.param({"header": {"settings": None}}, id="half-facts"),
            pytest.param({"header": {"extra": 1}}, id="unknown-field"),
            pytest.param({"spans": [[0, 5], [6, len(SOURCE)]]}, id="gap"),
            pytest.param({"spans": [[0, 0], *SPANS]}, id="empty-span"),
            pytest.param({"spans": [[-5, 0], *SPANS]}, id="negative"),
            pytest.param({"spans": "not a list"}, id="not-spans"),
            pytest.param({"payload": b"not zstd"}, id="not-zstd"),
            pytest.param(
                {
                    "header": {"count": 0, "source_size": 0},
                    "payload": zstandard.ZstdCompressor().compress(b"\x90") * 2,
                },
                id="two-frames",
            ),
        ],
    )
    def test_a_well_digested_but_invalid_envelope_is_corrupt(
        self, tmp_path: Path, bad: dict[str, object]
    ) -> None:
        data = forge(**bad)  # type: ignore[arg-type]
        with pytest.raises(PlanEnvelopeError):
            decode_plan(KEY, data)
        path = plan_path(tmp_path)
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        assert store(tmp_path).get(KEY) == PlanLookup(PlanOutcome.CORRUPT)

    def test_a_payload_without_a_declared_size_is_corrupt(self) -> None:
        raw = msgspec.msgpack.encode(SPANS)
        payload = zstandard.ZstdCompressor(write_content_size=False).compress(raw)
        with pytest.raises(PlanEnvelopeError):
            decode_plan(KEY, forge(payload=payload))

    @pytest.mark.parametrize("kind", ["directory", "symlink", "fifo"])
    def test_something_else_at_the_plan_path_is_corrupt(self, tmp_path: Path, kind: str) -> None:
        plans = store(tmp_path)
        plans.publish(KEY, SPANS, FACTS)
        valid = plan_path(tmp_path).read_bytes()
        elsewhere = other_key(kind)
        target = plan_path(tmp_path, elsewhere)
        target.parent.mkdir(parents=True, exist_ok=True)
        if kind == "directory":
            target.mkdir()
        elif kind == "fifo":
            os.mkfifo(target)
        else:
            outside = tmp_path / "outside.plan"
            outside.write_bytes(valid)
            target.symlink_to(outside)
        assert plans.get(elsewhere) == PlanLookup(PlanOutcome.CORRUPT)


# --------------------------------------------------------------------------- publishing


class TestPublish:
    def test_publish_without_facts_round_trips(self, tmp_path: Path) -> None:
        plans = store(tmp_path)
        assert plans.publish(KEY, SPANS)
        assert plans.get(KEY) == PlanLookup(PlanOutcome.REUSED, SPANS)

    def test_an_empty_source_has_an_empty_plan(self, tmp_path: Path) -> None:
        facts = PlanFacts(
            source_sha256=hashlib.sha256(b"").hexdigest(), source_size=0, settings=CHUNKING
        )
        plans = store(tmp_path)
        assert plans.publish(facts.key(), [], facts)
        assert plans.get(facts.key()) == PlanLookup(PlanOutcome.REUSED, [])

    @pytest.mark.parametrize(
        ("spans", "facts"),
        [
            pytest.param([Span(0, 3), Span(4, len(SOURCE))], FACTS, id="gap"),
            pytest.param([Span(1, len(SOURCE))], FACTS, id="not-from-zero"),
            pytest.param(SPANS[:-1], FACTS, id="short-of-the-source"),
            pytest.param(SPANS, PlanFacts(source_sha256="f" * 64, source_size=len(SOURCE),
                                          settings=CHUNKING), id="facts-not-the-key"),
            pytest.param([(0, len(SOURCE))], None, id="not-spans"),
        ],
    )  # fmt: skip
    def test_refuses_what_get_would_call_corrupt(
        self, tmp_path: Path, spans: list[Span], facts: PlanFacts | None
    ) -> None:
        plans = store(tmp_path)
        with pytest.raises(ValueError):
            plans.publish(KEY, spans, facts)
        assert snapshot(tmp_path / PLAN_DIR) == {}

    def test_a_write_failure_is_one_line_and_leaves_nothing(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        plans = store(tmp_path)

        def no_space(*args: object, **kwargs: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "replace", no_space)
        with pytest.raises(PlanStoreWriteError) as info:
            plans.publish(KEY, SPANS, FACTS)
        assert isinstance(info.value.cause, NoSpace)
        assert info.value.key == KEY
        message = str(info.value)
        assert "\n" not in message and KEY in message and "no space" in message
        assert [p for p in snapshot(tmp_path) if TEMP_PREFIX in p] == []
        monkeypatch.undo()
        assert plans.get(KEY).outcome is PlanOutcome.COMPUTED

    def test_files_are_private_whatever_the_umask(self, tmp_path: Path) -> None:
        previous = os.umask(0o022)
        try:
            cache = tmp_path / "cache"
            store(cache).publish(KEY, SPANS, FACTS)
        finally:
            os.umask(previous)
        path = plan_path(cache)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE((cache / PLAN_DIR).stat().st_mode) == 0o700
        assert sorted(os.listdir(cache / PLAN_DIR)) == [KEY[:2]]
        assert os.listdir(path.parent) == [f"{KEY}.plan"]

    def test_concurrent_publishers_leave_one_valid_file(self, tmp_path: Path) -> None:
        go = tmp_path / "go"
        child = textwrap.dedent(
            f"""
            import os, sys, time
            from runjournal.adapters.chunkplans import ChunkPlanFileStore
            from runjournal.domain.chunking import ChunkingSettings, ChunkStrategy, plan_chunks
            from runjournal.domain.events import PlanOutcome
            from runjournal.domain.plan_keys import PlanFacts
            source = bytes.fromhex({SOURCE.hex()!r})
            settings = ChunkingSettings(ChunkStrategy.PARAGRAPHS, 120)
            facts = PlanFacts(source_sha256={FACTS.source_sha256!r}, source_size=len(source),
                              settings=settings)
            spans = plan_chunks(source, settings)
            deadline = time.monotonic() + 30
            while not os.path.exists({str(go)!r}) and time.monotonic() < deadline:
                time.sleep(0.005)
            store = ChunkPlanFileStore.open_for_mode({str(tmp_path / "cache")!r}, "use")
            for _ in range(25):
                store.publish(facts.key(), spans, facts)
                found = store.get(facts.key())
                if found.outcome is not PlanOutcome.REUSED or found.spans != spans:
                    sys.exit("saw " + found.outcome.value)
            """
        )
        children = [
            subprocess.Popen([PYTHON, "-c", child], stderr=subprocess.PIPE) for _ in range(4)
        ]
        time.sleep(0.3)
        go.touch()
        for process in children:
            _, err = process.communicate(timeout=60)
            assert process.returncode == 0, err.decode()
        tree = snapshot(tmp_path / "cache")
        assert sorted(tree) == [
            PLAN_DIR,
            f"{PLAN_DIR}/{KEY[:2]}",
            f"{PLAN_DIR}/{KEY[:2]}/{KEY}.plan",
        ]
        assert tree[f"{PLAN_DIR}/{KEY[:2]}/{KEY}.plan"][2] == encode_plan(KEY, SPANS, FACTS)
        assert store(tmp_path / "cache").get(KEY) == PlanLookup(PlanOutcome.REUSED, SPANS)


# --------------------------------------------------------------------------- modes


class TestModes:
    def test_use_reads_and_publishes(self, tmp_path: Path) -> None:
        plans = store(tmp_path, CacheMode.USE)
        assert plans.mode is CacheMode.USE
        assert plans.get(KEY) == PlanLookup(PlanOutcome.COMPUTED)
        assert plans.publish(KEY, SPANS, FACTS) is True
        assert plans.get(KEY) == PlanLookup(PlanOutcome.REUSED, SPANS)

    def test_use_replaces_a_corrupt_plan(self, tmp_path: Path) -> None:
        plans = store(tmp_path, CacheMode.USE)
        path = plan_path(tmp_path)
        path.parent.mkdir(parents=True)
        path.write_bytes(b"garbage")
        assert plans.get(KEY).outcome is PlanOutcome.CORRUPT
        plans.publish(KEY, SPANS, FACTS)
        assert plans.get(KEY).outcome is PlanOutcome.REUSED

    def test_refresh_ignores_what_is_stored_and_republishes(self, tmp_path: Path) -> None:
        store(tmp_path, CacheMode.USE).publish(KEY, SPANS, FACTS)
        path = plan_path(tmp_path)
        path.write_bytes(b"stale")
        refresh = store(tmp_path, CacheMode.REFRESH)
        assert refresh.get(KEY) == PlanLookup(PlanOutcome.COMPUTED)
        assert refresh.publish(KEY, SPANS, FACTS) is True
        assert path.read_bytes() == encode_plan(KEY, SPANS, FACTS)
        assert refresh.get(KEY).outcome is PlanOutcome.COMPUTED
        assert store(tmp_path, CacheMode.USE).get(KEY).outcome is PlanOutcome.REUSED

    def test_refresh_does_not_read(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        refresh = store(tmp_path, CacheMode.REFRESH)

        def refuse(*args: object) -> bytes:
            raise AssertionError("refresh must not read")

        monkeypatch.setattr(FsRoot, "read_bytes", refuse)
        assert refresh.get(KEY).outcome is PlanOutcome.COMPUTED

    def test_read_only_reads_and_never_writes(self, tmp_path: Path) -> None:
        store(tmp_path, CacheMode.USE).publish(KEY, SPANS, FACTS)
        corrupt_key = other_key("corrupt")
        corrupt = plan_path(tmp_path, corrupt_key)
        corrupt.parent.mkdir(parents=True)
        corrupt.write_bytes(b"junk")
        before = snapshot(tmp_path)
        with store(tmp_path, CacheMode.READ_ONLY) as plans:
            assert plans.get(KEY) == PlanLookup(PlanOutcome.REUSED, SPANS)
            assert plans.get(corrupt_key).outcome is PlanOutcome.CORRUPT
            assert plans.get(other_key("missing")).outcome is PlanOutcome.COMPUTED
            assert plans.publish(corrupt_key, SPANS) is False
            assert plans.publish(other_key("missing"), SPANS) is False
        assert snapshot(tmp_path) == before

    def test_read_only_does_not_create_the_store_or_the_cache_root(self, tmp_path: Path) -> None:
        existing = tmp_path / "cache"
        existing.mkdir()
        for cache in (existing, tmp_path / "absent"):
            plans = store(cache, CacheMode.READ_ONLY)
            assert plans.root is None
            assert plans.get(KEY) == PlanLookup(PlanOutcome.COMPUTED)
            assert plans.publish(KEY, SPANS, FACTS) is False
        assert os.listdir(existing) == []
        assert sorted(os.listdir(tmp_path)) == ["cache"]

    def test_read_only_accepts_an_open_cache_root(self, tmp_path: Path) -> None:
        store(tmp_path).publish(KEY, SPANS, FACTS)
        with FsRoot.open(tmp_path) as cache:
            plans = ChunkPlanFileStore.open_for_mode(cache, "read-only")
            assert plans.get(KEY).outcome is PlanOutcome.REUSED
            plans.close()
            assert not cache.closed

    @pytest.mark.parametrize("mode", [CacheMode.USE, CacheMode.REFRESH])
    def test_writing_modes_create_the_store_on_first_publish(
        self, tmp_path: Path, mode: CacheMode
    ) -> None:
        plans = store(tmp_path / "new" / "cache", mode)
        assert not (tmp_path / "new" / "cache" / PLAN_DIR).exists()
        assert plans.get(KEY).outcome is PlanOutcome.COMPUTED
        assert not (tmp_path / "new" / "cache" / PLAN_DIR).exists()
        plans.publish(KEY, SPANS, FACTS)
        assert (tmp_path / "new" / "cache" / PLAN_DIR).is_dir()

    def test_bypass_constructs_nothing(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError):
            ChunkPlanFileStore.open_for_mode(tmp_path / "cache", CacheMode.BYPASS)
        with FsRoot.open(tmp_path) as root, pytest.raises(ValueError):
            ChunkPlanFileStore(root, mode=CacheMode.BYPASS)
        with pytest.raises(ValueError):
            ChunkPlanFileStore.open_for_mode(tmp_path, "bypass")
        assert os.listdir(tmp_path) == []

    def test_only_read_only_may_lack_a_directory(self) -> None:
        with pytest.raises(ValueError):
            ChunkPlanFileStore(None, mode=CacheMode.USE)
        with pytest.raises(ValueError):
            ChunkPlanFileStore(None, mode="sometimes")

    def test_a_symlinked_store_directory_is_refused(self, tmp_path: Path) -> None:
        (tmp_path / "real").mkdir()
        (tmp_path / "cache").mkdir()
        (tmp_path / "cache" / PLAN_DIR).symlink_to(tmp_path / "real")
        with pytest.raises(PlanStoreOpenError) as info:
            store(tmp_path / "cache", CacheMode.USE)
        assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- chunk map

ENTRIES = [
    ChunkMapEntry("c" * 64, "b.md", 0, 10, "1" * 64),
    ChunkMapEntry("a" * 64, "a.md", 10, 25, "2" * 64),
    ChunkMapEntry("b" * 64, "a.md", 0, 10, "3" * 64),
]


class TestChunkMap:
    def test_shape(self) -> None:
        decoded = json.loads(encode_chunk_map(ENTRIES))
        assert decoded == {
            "schema": CHUNK_MAP_SCHEMA,
            "chunks": {
                e.chunk_id: {"source": e.source, "start": e.start, "end": e.end, "sha256": e.sha256}
                for e in ENTRIES
            },
        }
        assert list(decoded["chunks"]) == sorted(e.chunk_id for e in ENTRIES)

    @SETTINGS
    @given(st.permutations(ENTRIES * 2))
    def test_bytes_do_not_depend_on_entry_order(self, entries: list[ChunkMapEntry]) -> None:
        assert encode_chunk_map(entries) == encode_chunk_map(ENTRIES)

    def test_a_repeated_chunk_keeps_its_first_occurrence(self) -> None:
        first = ChunkMapEntry("d" * 64, "a.md", 5, 9, "4" * 64)
        later = ChunkMapEntry("d" * 64, "a.md", 20, 24, "4" * 64)
        for entries in ([first, later], [later, first]):
            assert json.loads(encode_chunk_map(entries))["chunks"]["d" * 64]["start"] == 5

    def test_index_pins_the_map_bytes(self) -> None:
        data = encode_chunk_map(ENTRIES)
        index = json.loads(encode_chunk_map_index(data, 3))
        assert index == {
            "schema": CHUNK_MAP_INDEX_SCHEMA,
            "map": CHUNK_MAP_NAME,
            "count": 3,
            "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data),
        }

    @pytest.mark.parametrize(
        ("write_map", "write_index", "names"),
        [
            (False, False, []),
            (True, False, [CHUNK_MAP_NAME]),
            (False, True, [CHUNK_MAP_NAME, CHUNK_MAP_INDEX_NAME]),
            (True, True, [CHUNK_MAP_NAME, CHUNK_MAP_INDEX_NAME]),
        ],
    )
    def test_encoder_options(self, write_map: bool, write_index: bool, names: list[str]) -> None:
        encoder = ChunkMapEncoder(write_map=write_map, write_index=write_index)
        files = encoder.files(iter(ENTRIES))
        assert [name for name, _ in files] == names
        if names:
            assert files[0][1] == encode_chunk_map(ENTRIES)
        if len(names) == 2:
            index = json.loads(files[1][1])
            assert index["sha256"] == hashlib.sha256(files[0][1]).hexdigest()
            assert index["count"] == len(ENTRIES)

    def test_encoder_options_are_keyword_only(self) -> None:
        with pytest.raises(TypeError):
            ChunkMapEncoder(True, True)  # type: ignore[misc]


# --- group durability (issue 26: the first request of a 500-document run waited for
# 1,230 fsyncs of its chunk plans) -------------------------------------------------------


def _count_syncs(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    from runjournal.adapters import fsroot

    counts = {"fsync": 0, "syncfs": 0}
    real_fsync, real_syncfs = os.fsync, fsroot._sync_fs

    def fsync(fd: int) -> None:
        counts["fsync"] += 1
        real_fsync(fd)

    def syncfs(fd: int) -> None:
        counts["syncfs"] += 1
        real_syncfs(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(fsroot, "_sync_fs", syncfs)
    return counts


def test_plans_published_as_a_group_take_one_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans = store(tmp_path / "cache")
    assert plans.publish(KEY, SPANS, FACTS)  # creates chunkplans/ (durably, once)
    keys = [other_key(f"group-{i}") for i in range(20)]
    counts = _count_syncs(monkeypatch)
    try:
        for key in keys:
            assert plans.publish(key, SPANS, durable=False)
        assert counts == {"fsync": 0, "syncfs": 0}  # none on its own
        plans.sync()
        assert counts == {"fsync": 0, "syncfs": 1}  # one barrier for the twenty
        plans.sync()
        assert counts["syncfs"] == 1  # nothing published since: nothing to sync
        assert all(plans.get(k) == PlanLookup(PlanOutcome.REUSED, SPANS) for k in keys)
    finally:
        plans.close()


def test_a_failed_group_sync_is_a_publish_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runjournal.adapters import fsroot
    from runjournal.adapters.chunkplans import PlanStoreSyncError
    from runjournal.domain.ports import PlanPublishError

    plans = store(tmp_path / "cache")
    try:
        assert plans.publish(KEY, SPANS, FACTS, durable=False)

        def broken(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(fsroot, "_sync_fs", broken)
        with pytest.raises(PlanStoreSyncError, match="may not be durable") as caught:
            plans.sync()
        assert isinstance(caught.value, PlanPublishError)
    finally:
        plans.close()


def test_a_cold_cache_root_is_looked_into_once_then_a_publish_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every source's plan is looked up before any is published: on a cold cache root
    the lookups after the first open no directory (neither `pack/` nor `chunkplans/`),
    and what the store then publishes is found again."""
    from runjournal.adapters.packed_store import PackedStore

    root = FsRoot.open(tmp_path / "cache", create=True)
    packed = PackedStore(root)
    plans = ChunkPlanFileStore.open_for_mode(root, CacheMode.USE, packed=packed)
    opened: list[str] = []
    subroot = FsRoot.subroot

    def counting(self: FsRoot, name: str, *args: object, **kwargs: object) -> FsRoot:
        opened.append(name)
        return subroot(self, name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(FsRoot, "subroot", counting)
    keys = [other_key(f"source {i}") for i in range(50)]
    assert all(plans.get(k).outcome is PlanOutcome.COMPUTED for k in keys)
    assert len(opened) <= 3  # the first lookup's, not two per source
    assert plans.publish(KEY, SPANS, FACTS, durable=False)
    found = plans.get(KEY)
    assert found.outcome is PlanOutcome.REUSED and found.spans == SPANS
    plans.close()
    packed.close()
    root.close()
