"""Redacted copies of command lines, fit for the journal and debug summaries.

This reads an argument vector (`sys.argv`-like); command lines quoted inside free
text are a shape (`command_line_secret`, docs/operations.md "Redaction").
"""

from __future__ import annotations

from runjournal.domain.redaction.keys import is_secret_key
from runjournal.domain.redaction.redact_structured import SECRET_MARKER
from runjournal.domain.redaction.scanning import redact_text


def _redact_assignment(pair: str) -> str:
    key, sep, _ = pair.partition("=")
    if sep and is_secret_key(key):
        return f"{key}={SECRET_MARKER}"
    return pair


def _is_option(arg: str) -> bool:
    return arg.startswith("-") and len(arg) > 1


def redact_argv(argv: list[str]) -> list[str]:
    """A redacted copy of a command line, fit for the journal and debug summaries.

    `--set KEY=VALUE` hides VALUE for a secret KEY; an option whose name is secret
    (`--api-key X`, `--token=X`) hides its value; every argument is also text-redacted.
    """
    out: list[str] = []
    i = 0
    options_done = False
    while i < len(argv):
        arg = argv[i]
        i += 1
        if options_done or not _is_option(arg):
            out.append(redact_text(arg))
            continue
        if arg == "--":
            options_done = True
            out.append(arg)
            continue
        name, eq, value = arg.partition("=")
        if name == "--set":
            if eq:
                out.append(redact_text(f"{name}={_redact_assignment(value)}"))
            else:
                out.append(arg)
                if i < len(argv):
                    out.append(redact_text(_redact_assignment(argv[i])))
                    i += 1
        elif is_secret_key(name):
            if eq:
                out.append(f"{redact_text(name)}={SECRET_MARKER}")
            else:
                out.append(redact_text(arg))
                if i < len(argv) and not _is_option(argv[i]):
                    out.append(SECRET_MARKER)
                    i += 1
        else:
            out.append(redact_text(arg))
    return out
