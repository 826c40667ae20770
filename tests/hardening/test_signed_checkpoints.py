"""Signed checkpoints: every edit of a signed run is reported by `journal audit` when the
public key is known, and `journal verify` catches a history rewritten even by someone
who holds the signing key (docs/operations.md "Signed checkpoints").

Runs are recorded once with a real key (`keys init`); each test edits a copy of their
journal the way a database writer would (tests/support/journal_forgery.py).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest
from runjournal.adapters.journal.application import open_journal
from runjournal.adapters.journal.sealer import Sealer
from runjournal.adapters.signing import make_key
from runjournal.domain.events import RunEvent, SealReason
from runjournal.domain.run import run_aggregate_id
from runjournal.domain.seal import seal_aggregate_id
from support.console import CLI, console_script
from support.journal_forgery import MAPPER, rechain, rows_of
from support.paths import EXAMPLE


@dataclass
class Signed:
    cli: CLI
    out: Path
    journal: Path
    run_id: str
    public_key: str
    key_dir: Path
    published: Path  # the run's checkpoint as `journal checkpoint` printed it


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Signed:
    base = tmp_path_factory.mktemp("signed")
    home = base / "home"
    home.mkdir()
    cli = CLI(home)
    made = cli("keys", "init", "--name", "alice", "--json")
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)
    example = base / "glossary"
    shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    out = base / "out"
    proc, doc = cli.json("run", str(example / "pipeline.toml"), "--output-root", str(out))
    assert proc.returncode == 0, proc.stderr
    note = cli("journal", "checkpoint", doc["run_id"], "--output-root", str(out))
    assert note.returncode == 0 and note.stdout.startswith("runjournal/run/"), note.stderr
    published = base / "published.note"
    published.write_text(note.stdout)
    return Signed(
        cli,
        out,
        out / "journal.sqlite3",
        doc["run_id"],
        key["public_key"],
        Path(key["key_file"]).parent,
        published,
    )


@pytest.fixture
def copy(signed: Signed, tmp_path: Path) -> Path:
    target = tmp_path / "journal.sqlite3"
    with sqlite3.connect(signed.journal) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    return target


def audit(signed: Signed, journal: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return signed.cli(
        "journal", "audit", signed.run_id, "--journal", str(journal),
        "--output-root", str(signed.out), *extra,
    )  # fmt: skip


def checkpoint_problems(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """Exit 1, one stderr line, and the audit's checkpoint lines."""
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return [line for line in proc.stdout.splitlines() if ": checkpoint: " in line]


def test_a_signed_run_audits_clean_and_names_its_signer(signed: Signed) -> None:
    proc = audit(signed, signed.journal)
    assert proc.returncode == 0 and proc.stderr == "", proc.stdout + proc.stderr
    assert "checkpoint signed by alice" in proc.stdout
    for extra in (
        [],
        ["--key", signed.public_key],
        ["--key", str(signed.key_dir / "signing-key.pub")],
    ):
        doc = json.loads(audit(signed, signed.journal, "--json", *extra).stdout)
        assert doc["checkpoints"]["status"] == "signed" and doc["checkpoints"]["signed_by"] == [
            "alice"
        ]
    assert signed.published.read_text().count("\n— alice ") == 1


def test_every_row_edited_in_place_is_caught(signed: Signed, tmp_path: Path) -> None:
    with sqlite3.connect(signed.journal) as db:
        versions = [v for v, _, _ in rows_of(db, signed.run_id)]
    for version in versions:
        target = tmp_path / f"j{version}.sqlite3"
        with sqlite3.connect(signed.journal) as src, sqlite3.connect(target) as dst:
            src.backup(dst)
        with sqlite3.connect(target) as db:
            row = db.execute(
                "SELECT state FROM stored_events "
                "WHERE originator_id = ? AND originator_version = ?",
                (run_aggregate_id(signed.run_id).hex, version),
            ).fetchone()[0]
            flipped = bytearray(row)
            flipped[-40] ^= 0x01  # inside the body or its link
            db.execute(
                "UPDATE stored_events SET state = ? WHERE originator_id = ? "
                "AND originator_version = ?",
                (bytes(flipped), run_aggregate_id(signed.run_id).hex, version),
            )
        proc = audit(signed, target)
        assert proc.returncode == 1, (version, proc.stdout)


def _later(event: RunEvent) -> RunEvent:
    return msgspec.structs.replace(event, timestamp=event.timestamp + timedelta(microseconds=1))


def test_every_event_edited_with_the_chain_recomputed_is_caught(
    signed: Signed, tmp_path: Path
) -> None:
    """The careful forger: one event changed (its timestamp, by a microsecond), every link
    recomputed with runjournal's own encoder. The chain verifies; the checkpoint does not."""
    with sqlite3.connect(signed.journal) as db:
        events = sum(1 for _ in db.execute(
            "SELECT 1 FROM stored_events WHERE originator_id = ?",
            (run_aggregate_id(signed.run_id).hex,),
        ))  # fmt: skip
    total = len(list(open_journal(str(signed.journal)).events(signed.run_id)))
    assert events >= 5 and total > events  # packed rows: fewer rows than events
    for index in sorted({0, 1, total // 3, total // 2, total - 2, total - 1}):
        target = tmp_path / f"e{index}.sqlite3"
        with sqlite3.connect(signed.journal) as src, sqlite3.connect(target) as dst:
            src.backup(dst)
        rechain(
            target,
            signed.run_id,
            lambda evs, i=index: [_later(e) if n == i else e for n, e in enumerate(evs)],
        )
        proc = audit(signed, target)
        assert "hash chain verified" in proc.stdout, proc.stdout
        problems = checkpoint_problems(proc)
        assert any("do not have its root hash" in p for p in problems), (index, proc.stdout)


def test_a_recomputed_chain_resealed_without_the_key_is_caught(
    signed: Signed, copy: Path, tmp_path: Path
) -> None:
    rechain(copy, signed.run_id, lambda evs: [_later(evs[0]), *evs[1:]])
    with sqlite3.connect(copy) as db:
        db.execute(
            "DELETE FROM stored_events WHERE originator_id = ?",
            (seal_aggregate_id(signed.run_id).hex,),
        )
    store = open_journal(str(copy))
    mallory = make_key(str(tmp_path / "mallory"), "alice")  # the same name, another key
    store.use_sealer(Sealer(lambda: mallory))
    assert store.seal(signed.run_id, SealReason.TERMINATED) is not None
    store.close()
    problems = checkpoint_problems(audit(signed, copy))
    assert any("not a trusted key" in p for p in problems), problems
    assert any("not signed by 'alice'" in p for p in problems), problems
    # and unsigned: a trusted key signs every run started after it was made
    with sqlite3.connect(copy) as db:
        db.execute(
            "DELETE FROM stored_events WHERE originator_id = ?",
            (seal_aggregate_id(signed.run_id).hex,),
        )
    store = open_journal(str(copy))
    store.seal(signed.run_id, SealReason.TERMINATED)
    store.close()
    problems = checkpoint_problems(audit(signed, copy))
    assert any("not signed by 'alice'" in p for p in problems), problems


def test_a_stripped_chain_is_tampering_not_unchained(signed: Signed, copy: Path) -> None:
    """Defect 7: a run whose chain rows were stripped was reported as recorded before the
    chain, exit 0."""
    with sqlite3.connect(copy) as db:
        versions = [v for v, _, _ in rows_of(db, signed.run_id)]
    for version in versions:  # every row rewritten without its link, the rest as it was
        _strip_row(copy, signed.run_id, version)
    proc = audit(signed, copy)
    assert proc.returncode == 1, proc.stdout
    assert "it was stripped" in proc.stdout and "unchained" not in proc.stdout + proc.stderr


def _strip_row(journal: Path, run_id: str, version: int) -> None:
    import zstandard

    with sqlite3.connect(journal) as db:
        (state,) = db.execute(
            "SELECT state FROM stored_events WHERE originator_id = ? AND originator_version = ?",
            (run_aggregate_id(run_id).hex, version),
        ).fetchone()
        head = state[0]
        prefix = (3 if head & 0x10 else 1) + (2 if head & 0x60 else 0)
        body = state[prefix:]
        compressed = head & 0x0F == 0x02
        if compressed:
            body = zstandard.ZstdDecompressor().decompress(body)
        fields = msgspec.msgpack.decode(body)
        fields.pop("~chain", None)
        body = msgspec.msgpack.encode(fields)
        if compressed:
            body = zstandard.ZstdCompressor().compress(body)
        db.execute(
            "UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = ?",
            (state[:prefix] + body, run_aggregate_id(run_id).hex, version),
        )


def test_a_deleted_seal_or_an_appended_row_is_caught(signed: Signed, copy: Path) -> None:
    with sqlite3.connect(copy) as db:
        db.execute(
            "DELETE FROM stored_events WHERE originator_id = ?",
            (seal_aggregate_id(signed.run_id).hex,),
        )
    problems = checkpoint_problems(audit(signed, copy))
    assert any("covered by no seal" in p for p in problems), problems


def test_an_edited_signature_does_not_verify(signed: Signed, copy: Path) -> None:
    from runjournal.domain.events import RunSealed

    with sqlite3.connect(copy) as db:
        aggregate = seal_aggregate_id(signed.run_id)
        (version, topic, state) = db.execute(
            "SELECT originator_version, topic, state FROM stored_events WHERE originator_id = ?",
            (aggregate.hex,),
        ).fetchone()
    from eventsourcing.persistence import StoredEvent

    (seal,) = MAPPER.to_domain_events(StoredEvent(aggregate, version, topic, state))
    assert isinstance(seal, RunSealed)
    text, _, line = seal.note.rpartition("— alice ")
    blob = bytearray(line.strip().encode())
    blob[10] = ord("A") if blob[10] != ord("A") else ord("B")
    forged = msgspec.structs.replace(seal, note=f"{text}— alice {blob.decode()}\n")
    with sqlite3.connect(copy) as db:
        db.execute("DELETE FROM stored_events WHERE originator_id = ?", (aggregate.hex,))
    store = open_journal(str(copy))
    store._put([forged], seal=False)  # the row as a database writer would insert it
    store.close()
    problems = checkpoint_problems(audit(signed, copy))
    assert any("does not verify" in p for p in problems), problems


def test_verify_catches_a_history_rewritten_by_the_key_holder(signed: Signed, copy: Path) -> None:
    ok = signed.cli(
        "journal", "verify", signed.run_id, "--checkpoint", str(signed.published),
        "--journal", str(signed.journal), "--output-root", str(signed.out),
    )  # fmt: skip
    assert ok.returncode == 0 and "consistent" in ok.stdout, ok.stdout + ok.stderr
    # the key holder rewrites one event, recomputes the chain and seals again with alice's
    # own key: the audit cannot tell (the key signed it) ...
    rechain(copy, signed.run_id, lambda evs: [evs[0], _later(evs[1]), *evs[2:]])
    with sqlite3.connect(copy) as db:
        db.execute(
            "DELETE FROM stored_events WHERE originator_id = ?",
            (seal_aggregate_id(signed.run_id).hex,),
        )
    from runjournal.adapters.signing import load_signer

    store = open_journal(str(copy))
    store.use_sealer(Sealer(lambda: load_signer(str(signed.key_dir))))
    store.seal(signed.run_id, SealReason.TERMINATED)
    store.close()
    assert audit(signed, copy).returncode in (0, 1)  # only the run directory may tell
    # ... but the checkpoint published before does
    bad = signed.cli(
        "journal", "verify", signed.run_id, "--checkpoint", str(signed.published),
        "--journal", str(copy), "--output-root", str(signed.out),
    )  # fmt: skip
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "not an extension of the checkpoint" in bad.stdout
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


def test_verify_refuses_a_file_that_is_not_a_checkpoint(signed: Signed, tmp_path: Path) -> None:
    junk = tmp_path / "junk.note"
    junk.write_text("hello\n")
    proc = signed.cli(
        "journal", "verify", signed.run_id, "--checkpoint", str(junk),
        "--output-root", str(signed.out),
    )  # fmt: skip
    assert proc.returncode == 2 and "is not a checkpoint" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_an_export_carries_its_checkpoints_and_imports_signed(
    signed: Signed, tmp_path: Path
) -> None:
    exported = tmp_path / "run.rjx"
    where = ("--output-root", str(signed.out))
    proc = signed.cli("journal", "export", signed.run_id, "-o", str(exported), *where)
    assert proc.returncode == 0, proc.stderr
    from runjournal.adapters.export import export_checkpoints

    carried = export_checkpoints(exported.read_bytes())
    assert carried and all("\n— alice " in c.note for c in carried)
    target = tmp_path / "other.sqlite3"
    proc = signed.cli("journal", "import", str(exported), "--journal", str(target), *where)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(audit(signed, target, "--json", "--key", signed.public_key).stdout)
    assert doc["verdict"] == "ok" and doc["checkpoints"]["status"] == "signed"
    # importing again adds nothing, and the published checkpoint holds there too
    assert signed.cli("journal", "import", str(exported), "--journal", str(target)).returncode == 0
    assert len(open_journal(str(target)).seals(signed.run_id)) == len({c.note for c in carried})
    ok = signed.cli(
        "journal", "verify", signed.run_id, "--checkpoint", str(signed.published),
        "--journal", str(target),
    )  # fmt: skip
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_an_export_whose_events_were_rewritten_after_sealing_is_refused(
    signed: Signed, tmp_path: Path
) -> None:
    from runjournal.adapters.export import decode_export, encode_export, export_checkpoints

    exported = tmp_path / "run.rjx"
    where = ("--output-root", str(signed.out))
    assert (
        signed.cli("journal", "export", signed.run_id, "-o", str(exported), *where).returncode == 0
    )
    data = exported.read_bytes()
    original = decode_export(data)
    forged = [*original.events[:3], _later(original.events[3]), *original.events[4:]]
    rewritten = tmp_path / "forged.rjx"
    rewritten.write_bytes(
        encode_export(
            signed.run_id,
            forged,
            tool_version=original.header.tool_version,
            created_by=original.header.created_by,
            checkpoints=export_checkpoints(data),
        )
    )
    target = tmp_path / "other.sqlite3"
    proc = signed.cli("journal", "import", str(rewritten), "--journal", str(target), *where)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "does not hold for the exported events" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not target.exists() or not open_journal(str(target)).list_runs()


def test_a_run_without_a_key_says_once_how_to_make_one(tmp_path: Path) -> None:
    """On a terminal, once per user; never in a pipe (scripts and CI logs)."""
    import os
    import pty

    cli = CLI(tmp_path / "home")
    example = tmp_path / "glossary"
    shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    argv = [*console_script(), "run", str(example / "pipeline.toml"), "--no-progress"]

    def on_a_terminal() -> str:
        master, slave = pty.openpty()
        proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=slave, env=cli.env, cwd=tmp_path
        )
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=600) == 0
        os.close(master)
        return b"".join(chunks).decode()

    piped = cli("run", str(example / "pipeline.toml"), "--no-progress")
    assert piped.returncode == 0 and "keys init" not in piped.stderr
    first, second = on_a_terminal(), on_a_terminal()
    assert first.count("`runjournal keys init` makes a signing key") == 1, first
    assert "keys init" not in second
