"""Every byte written under a user root goes through the confined FsRoot adapter.

This scans the product source for write-capable filesystem calls outside the few places
that are allowed to make them, so a new writer cannot bypass confinement unnoticed.
"""

from __future__ import annotations

import re
from pathlib import Path

from support.paths import REPO

LAYERS = ("domain", "projections", "adapters", "app", "cli")

WRITE_CALL = re.compile(
    r"os\.(mkdir|makedirs|rename|replace|link|unlink|remove|rmdir|symlink|chmod|truncate)\("
    r"|shutil\.(copy|copy2|copyfile|copytree|move|rmtree)\("
    r"|\bPath\([^)]*\)\.(write_text|write_bytes|mkdir|touch|unlink)\("
    r"|os\.O_(WRONLY|RDWR|CREAT|APPEND|TRUNC)"
    r"|\bopen\([^)]*,\s*['\"][^'\"]*[wax+]"
    r"|\.open\([^)]*['\"][^'\"]*[wax+][^'\"]*['\"]"
)

# The adapter itself, and the journal's SQLite file bootstrap (the library then owns it).
ALLOWED = {
    "adapters/fsroot.py": None,
    "adapters/journal/application.py": {"os.O_WRONLY"},
    "cli/main.py": {"os.O_WRONLY"},  # redirecting stdout to /dev/null on a broken pipe
    # The signing key and the once-said hint live in the user's config directory, not
    # under a run root: 0700 directory, 0600 files, O_EXCL, a key never replaced unasked
    # (docs/operations.md "Signed checkpoints").
    "adapters/signing.py": None,
    # The LLM call log (docs/operations.md "LLM call log"): an O_APPEND intent log with
    # group fsync and write-ahead reply files under <cache root>/llm/, which the run
    # created 0700; leaves are opened O_NOFOLLOW. Not yet through FsRoot: its
    # append-and-fsync protocol has no FsRoot form.
    "adapters/llm/calllog.py": None,
    # The batch records (docs/operations.md "Batch runs"): one small file per request set
    # under <cache root>/llm/batches/, rewritten atomically (temp file, fsync, rename)
    # before and after each remote step of a provider batch; the same root as the log.
    "adapters/llm/batch_records.py": None,
}


def _code_lines(path: Path):
    for number, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("#") or stripped.startswith(('"""', "'''")):
            continue
        yield number, line


def test_no_write_outside_the_fs_adapter():
    offenders = []
    for layer in LAYERS:
        for path in sorted((REPO / layer).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            allowed = ALLOWED.get(rel, set())
            if allowed is None:
                continue
            for number, line in _code_lines(path):
                match = WRITE_CALL.search(line)
                if match and not any(token in line for token in allowed):
                    offenders.append(f"{rel}:{number}: {line.strip()}")
    assert offenders == []


def test_the_scan_catches_the_forms_it_is_meant_to():
    samples = [
        'open(p, "w")',
        "open(p, 'ab')",
        "os.replace(a, b)",
        "shutil.copyfile(a, b)",
        'Path(x).write_text("y")',
        "os.open(p, os.O_WRONLY)",
    ]
    for sample in samples:
        assert WRITE_CALL.search(sample), sample
    assert not WRITE_CALL.search('open(p, "rb")')
