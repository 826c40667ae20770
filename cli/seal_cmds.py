"""Checking a run's checkpoints: in `journal audit`, and `journal verify` against one
published earlier (docs/operations.md "Signed checkpoints")."""

from __future__ import annotations

import os
from typing import Any

import click
from runjournal.adapters.journal import JournalError
from runjournal.adapters.journal.sealer import SealCheck, SealStatus
from runjournal.adapters.signing import trusted_key_for
from runjournal.adapters.signing import verify as verify_signature
from runjournal.cli.exit_codes import CliError, ExitCode, print_error
from runjournal.cli.keys_cmds import trusted_keys
from runjournal.cli.output import emit_json
from runjournal.cli.query_cmds import open_cli_journal
from runjournal.domain.merkle import consistency_proof, root_of, verify_consistency
from runjournal.domain.seal import origin
from runjournal.domain.signed_note import NoteError, parse_checkpoint, parse_note

_MAX_NOTE = 64 * 1024


def seal_note(seals: SealCheck) -> str:
    if seals.status is SealStatus.SIGNED:
        return f"checkpoint signed by {', '.join(seals.signers)}"
    if seals.status is SealStatus.SEALED:
        return "checkpoint verified, no trusted signature"
    if seals.status is SealStatus.TAMPERED:
        return f"checkpoints: {len(seals.problems)} problem(s)"
    return "no checkpoint"


def verify(opts: dict[str, Any], *, run: str, checkpoint: str, keys: tuple[str, ...]) -> int:
    """`journal verify RUN --checkpoint FILE`: exit 0 consistent, 1 not, 2 bad input."""
    trusted = trusted_keys(keys)
    try:
        with open(os.path.abspath(checkpoint), encoding="utf-8") as f:
            note = f.read(_MAX_NOTE + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read checkpoint {checkpoint}: {exc}", ExitCode.USAGE) from None
    try:
        text, signatures = parse_note(note) if "\n\n" in note else (note, [])
        published = parse_checkpoint(text)
    except NoteError as exc:
        raise CliError(f"{checkpoint} is not a checkpoint: {exc}", ExitCode.USAGE) from None
    store = open_cli_journal(opts, read_only=True)
    try:
        run_id = store.resolve_run(run)
        leaves = store.tree_leaves(run_id)
    except JournalError as exc:
        raise CliError(str(exc), ExitCode.FAILED) from None
    finally:
        store.close()
    problems: list[str] = []
    signed_by: list[str] = []
    if published.origin != origin(run_id):
        problems.append(f"the checkpoint is of {published.origin!r}, not of run {run_id}")
    for signature in signatures:
        key = trusted_key_for(trusted, signature)
        if key is not None and verify_signature(key, text, signature):
            signed_by.append(key.name)
        elif key is not None:
            problems.append(f"the signature of {signature.name!r} does not verify")
    if trusted and not signed_by:
        problems.append("the checkpoint is not signed by a trusted key")
    size = len(leaves)
    if published.size > size:
        problems.append(f"the checkpoint covers {published.size} events, the run has {size} now")
    elif published.size and not verify_consistency(
        published.size,
        size,
        published.root,
        root_of(leaves),
        consistency_proof(published.size, leaves),
    ):
        problems.append(
            f"the run's history is not an extension of the checkpoint: its first "
            f"{published.size} events have another root (rewritten)"
        )
    doc = {
        "run_id": run_id,
        "verdict": "consistent" if not problems else "inconsistent",
        "checkpoint_size": published.size,
        "tree_size": size,
        "signed_by": signed_by,
        "problems": problems,
    }
    if opts.get("as_json"):
        emit_json(doc)
    elif not problems:
        click.echo(
            f"run {run_id}: consistent (its {size} events extend the checkpoint of "
            f"{published.size}{', signed by ' + ', '.join(signed_by) if signed_by else ''})"
        )
    else:
        click.echo(f"run {run_id}: inconsistent with {checkpoint}")
        for p in problems:
            click.echo(f"  {p}")
    if problems:
        print_error(f"verify of run {run_id}: {problems[0]}")
        return int(ExitCode.FAILED)
    return int(ExitCode.OK)


def checkpoint(opts: dict[str, Any], *, run: str) -> int:
    """`journal checkpoint RUN`: the run's newest checkpoint note, to publish."""
    store = open_cli_journal(opts, read_only=True)
    try:
        run_id = store.resolve_run(run)
        seals = store.seals(run_id)
    except JournalError as exc:
        raise CliError(str(exc), ExitCode.FAILED) from None
    finally:
        store.close()
    if not seals:
        raise CliError(
            f"run {run_id} has no checkpoint (still running, or recorded before 0.2.0)",
            ExitCode.FAILED,
        )
    newest = seals[-1]
    if opts.get("as_json"):
        emit_json(
            {
                "run_id": run_id,
                "size": newest.size,
                "root": newest.root,
                "key": newest.key,
                "note": newest.note,
            }
        )
    else:
        click.echo(newest.note, nl=False)
    return int(ExitCode.OK)
