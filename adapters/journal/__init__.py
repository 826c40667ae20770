"""The run journal: an `eventsourcing` application over SQLite or PostgreSQL.

One module per job (docs/internals.md "Run journal adapter"):

- `codec`: the storage format; `EventMapper` encodes our frozen msgspec events and
  decodes them typed, upcasting old class versions;
- `url`: journal URLs and their display form with the password hidden;
- `application`: `RunJournalApp` (settings only from what we pass, never `os.environ`)
  and `open_journal`;
- `store`: `JournalStore`, the facade the CLI uses;
- `runs_table`: the runs index table `list_runs` starts from;
- `session`: `RunSession`, the runner's `EventSink`, committing in bounded batches;
- `json_view`: the event view of `journal show --json`.

The public names are re-exported here.
"""

from runjournal.adapters.journal.application import RunJournalApp, open_journal
from runjournal.adapters.journal.codec import COMPRESS_THRESHOLD, EventMapper
from runjournal.adapters.journal.errors import (
    AmbiguousRun,
    JournalCorrupt,
    JournalError,
    JournalUnavailable,
    JournalUrlError,
    RunAlreadyExists,
    RunNotFound,
)
from runjournal.adapters.journal.json_view import journal_event_to_json
from runjournal.adapters.journal.session import RunSession
from runjournal.adapters.journal.store import JournalStore, RunSummary

__all__ = [
    "COMPRESS_THRESHOLD",
    "AmbiguousRun",
    "EventMapper",
    "JournalCorrupt",
    "JournalError",
    "JournalStore",
    "JournalUnavailable",
    "JournalUrlError",
    "RunAlreadyExists",
    "RunJournalApp",
    "RunNotFound",
    "RunSession",
    "RunSummary",
    "journal_event_to_json",
    "open_journal",
]
