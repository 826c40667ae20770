"""The run journal: an `eventsourcing` application over SQLite or PostgreSQL.

One module per job (docs/internals.md "Run journal adapter"):

- `codec`: the storage format; `EventMapper` encodes our frozen msgspec events and
  decodes them typed, upcasting old class versions;
- `url`: journal URLs and their display form with the password hidden;
- `application`: `RunJournalApp` (settings only from what we pass, never `os.environ`)
  and `open_journal`;
- `store`: `JournalStore`, the facade the CLI uses;
- `runs_table`: the runs index table `list_runs` starts from;
- `session`: `RunSession`, the runner's `RunRecorder`, committing in bounded batches;
- `json_view`: the event view of `journal show --json`.

The public names are re-exported here; the errors at once, the rest when first used.
"""

from runjournal.adapters.journal.journal_errors import (
    AmbiguousRun,
    JournalCorrupt,
    JournalError,
    JournalMissing,
    JournalUnavailable,
    JournalUrlError,
    RunAlreadyExists,
    RunNotFound,
)
from runjournal.adapters.lazy_exports import lazy_exports

# Imported on first use: `application`, `codec` and `store` load eventsourcing, which a
# command pays for only when it opens a journal (docs/performance.md "Start-up").
__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "RunJournalApp": "application",
        "open_journal": "application",
        "open_existing_journal": "application",
        "COMPRESS_THRESHOLD": "codec",
        "EventMapper": "codec",
        "journal_event_to_json": "json_view",
        "RunSession": "session",
        "JournalStore": "store",
        "RunSummary": "store",
    },
)

__all__ = [
    "COMPRESS_THRESHOLD",
    "AmbiguousRun",
    "EventMapper",
    "JournalCorrupt",
    "JournalError",
    "JournalMissing",
    "JournalStore",
    "JournalUnavailable",
    "JournalUrlError",
    "RunAlreadyExists",
    "RunJournalApp",
    "RunNotFound",
    "RunSession",
    "RunSummary",
    "journal_event_to_json",
    "open_existing_journal",
    "open_journal",
]
