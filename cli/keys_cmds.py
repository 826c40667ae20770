"""`keys init` and the signing key's place (docs/operations.md "Signed checkpoints").

The key lives in the user's config dir, never in a project: a journal that travels
(a shared PostgreSQL journal, an export) carries the public half in its seals, and the
auditor decides which public keys to trust (`--key`, or their own key's public half).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click
import platformdirs
from runjournal.adapters.journal.sealer import Sealer
from runjournal.adapters.signing import (
    Signer,
    SigningKeyError,
    TrustedKey,
    claim_once,
    load_signer,
    local_trusted,
    make_key,
    read_trusted,
)
from runjournal.cli.exit_codes import CliError, ExitCode
from runjournal.cli.output import emit_json
from runjournal.cli.settings.table import APP_NAME
from runjournal.cli.style import is_terminal
from runjournal.domain.signed_note import NoteError

KEY_DIR_ENV = "RUNJOURNAL_KEY_DIR"
_HINT_MARK = ".signing-hint-shown"


def key_dir() -> str:
    """Where the signing key is: `RUNJOURNAL_KEY_DIR`, else the user config dir."""
    return os.environ.get(KEY_DIR_ENV) or platformdirs.user_config_dir(APP_NAME)


def sealer() -> Sealer:
    """The journal's sealer: the user's key, loaded when a run is first sealed."""
    return Sealer(lambda: load_signer(key_dir()))


def export_signer() -> Signer | None:
    """The user's signer for the checkpoint an export carries (none without a key)."""
    try:
        return load_signer(key_dir())
    except SigningKeyError as exc:
        raise CliError(str(exc), ExitCode.USAGE) from None


def signing_hints() -> list[str]:
    """Once per user, on a terminal: how to make a key, when runs are sealed without one
    (a script or CI log is not where a person reads it)."""
    if not is_terminal(sys.stderr):
        return []
    directory = key_dir()
    if os.path.exists(os.path.join(directory, "signing-key")):
        return []
    if not claim_once(directory, _HINT_MARK):
        return []
    return [
        "runs are sealed with an unsigned checkpoint; `runjournal keys init` makes a "
        "signing key so `journal audit` can prove who wrote them (said once)"
    ]


def keys_init(opts: dict[str, Any], *, name: str, force: bool) -> int:
    directory = key_dir()
    try:
        signer = make_key(directory, name, force=force)
    except SigningKeyError as exc:
        raise CliError(str(exc), ExitCode.USAGE) from None
    except OSError as exc:
        raise CliError(
            f"cannot write the signing key in {directory}: {exc.strerror}", ExitCode.FAILED
        ) from None
    doc = {
        "key_file": os.path.join(directory, "signing-key"),
        "public_key": signer.verifier.text(),
        "name": signer.verifier.name,
    }
    if opts.get("as_json"):
        emit_json(doc)
    else:
        click.echo(f"signing key written to {doc['key_file']} (mode 0600; keep it secret)")
        click.echo("public key, to publish (journal audit --key / journal verify --key):")
        click.echo(f"  {doc['public_key']}")
    return 0


def trusted_keys(keys: tuple[str, ...]) -> list[TrustedKey]:
    """`--key` values (a verifier key, or a file holding one); without any, the public
    half of the user's own key when one was made."""
    found: list[TrustedKey] = []
    for value in keys:
        try:
            if os.path.isfile(value):
                with open(value, encoding="utf-8") as f:
                    found.append(read_trusted(f.read(4096)))
            else:
                found.append(read_trusted(value))
        except (OSError, NoteError) as exc:
            raise CliError(f"--key {value[:60]!r}: {exc}", ExitCode.USAGE) from None
    if not keys:
        try:
            own = local_trusted(key_dir())
        except SigningKeyError as exc:
            raise CliError(str(exc), ExitCode.USAGE) from None
        if own is not None:
            found.append(own)
    return found
