"""The runs index table: one row per run in the journal's own database, and a position.

`runs list` (and every `resolve_run`) would otherwise read the whole event log to find
each run's allocation and termination. The table keeps each run's summary and the
notification position up to which events are folded into it, so a reader reads only the
events after that position (docs/internals.md "The runs index table").

Both backends take the same SQL; only the placeholder and the schema differ. The table
is a cache of the journal: a failure to read or write it never fails a command, the
journal is then folded from the start as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

INDEX_VERSION: Final = 1  # of the rows' encoding: another version is rebuilt from the start
ROWS: Final = "runjournal_runs_index"
POSITION: Final = "runjournal_runs_index_position"
_NAME: Final = "runs"


class RunsTable:
    """Reads and writes the runs index through the journal's datastore (a DB-API cursor)."""

    def __init__(self, datastore: Any, *, schema: str | None) -> None:
        self._datastore = datastore
        self._postgres = schema is not None
        prefix = f'"{schema}".' if schema else ""
        self._rows = f"{prefix}{ROWS}"
        self._position = f"{prefix}{POSITION}"
        self._created = False

    def _sql(self, text: str) -> str:
        return text.replace("?", "%s") if self._postgres else text

    def _has_tables(self, cursor: Any) -> bool:
        if self._postgres:
            cursor.execute("SELECT to_regclass(%s) AS t", (self._position.replace('"', ""),))
            row = cursor.fetchone()
            return row is not None and row["t"] is not None
        cursor.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?", (POSITION,)
        )
        return cursor.fetchone() is not None

    def load(self) -> tuple[int, list[tuple[str, bytes]]] | None:
        """(position, [(aggregate id, summary)] in allocation order), or None when the
        table does not exist or holds another version (one read transaction)."""
        with self._datastore.transaction(commit=False) as cursor:
            if not self._has_tables(cursor):
                return None
            cursor.execute(
                self._sql(f"SELECT position, version FROM {self._position} WHERE name = ?"),
                (_NAME,),
            )
            head = cursor.fetchone()
            if head is None or int(head["version"]) != INDEX_VERSION:
                return None
            cursor.execute(f"SELECT aggregate_id, summary FROM {self._rows} ORDER BY allocated")
            rows = [(str(r["aggregate_id"]), _bytes(r["summary"])) for r in cursor.fetchall()]
            return int(head["position"]), rows

    def save(self, base: int, position: int, rows: Iterable[tuple[str, int, bytes]]) -> bool:
        """Store `rows` (aggregate id, allocation position, summary) and move the position
        from `base` to `position`, in one transaction, only if it is still at `base`.

        False when another process moved it first: its rows are then the newer ones.
        """
        if not self._created:
            with self._datastore.transaction(commit=True) as cursor:
                for statement in self._create():
                    cursor.execute(statement)
            self._created = True
        with self._datastore.transaction(commit=True) as cursor:
            # A write first: SQLite takes the write lock here (waiting for another writer)
            # rather than failing to upgrade a read snapshot later.
            cursor.execute(
                self._sql(
                    f"INSERT INTO {self._position} (name, position, version) VALUES (?, 0, ?) "
                    "ON CONFLICT (name) DO NOTHING"
                ),
                (_NAME, INDEX_VERSION),
            )
            cursor.execute(
                self._sql(
                    f"UPDATE {self._position} SET position = ? "
                    "WHERE name = ? AND position = ? AND version = ?"
                ),
                (position, _NAME, base, INDEX_VERSION),
            )
            if _rowcount(cursor) != 1:
                raise _Moved
            upsert = self._sql(
                f"INSERT INTO {self._rows} (aggregate_id, allocated, summary) VALUES (?, ?, ?) "
                "ON CONFLICT (aggregate_id) DO UPDATE SET summary = excluded.summary"
            )
            for aggregate_id, allocated, summary in rows:
                cursor.execute(upsert, (aggregate_id, allocated, _text(summary)))
        return True

    def _create(self) -> list[str]:
        big = "BIGINT" if self._postgres else "INTEGER"
        return [
            f"CREATE TABLE IF NOT EXISTS {self._rows} (aggregate_id TEXT PRIMARY KEY, "
            f"allocated {big} NOT NULL, summary TEXT NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS {self._position} (name TEXT PRIMARY KEY, "
            f"position {big} NOT NULL, version INTEGER NOT NULL)",
        ]


class _Moved(Exception):
    """The position moved under us: the transaction is rolled back."""


def save_if_current(
    table: RunsTable, base: int, position: int, rows: Iterable[tuple[str, int, bytes]]
) -> bool:
    try:
        return table.save(base, position, rows)
    except _Moved:
        return False


def _rowcount(cursor: Any) -> int:
    """Rows the last statement changed (the library wraps SQLite's cursor)."""
    return int(getattr(cursor, "sqlite_cursor", cursor).rowcount)


def _text(summary: bytes) -> str:
    return summary.decode("utf-8")


def _bytes(value: Any) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)
