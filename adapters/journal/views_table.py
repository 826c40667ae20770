"""The views table: a PostgreSQL journal's materialised views, in its own database.

A SQLite journal keeps its views in a state dir beside its file; a PostgreSQL journal has
no file to sit beside, so its views (the per-run and journal-wide view records and the
`projections.json` pointer of which version is materialised) are rows of one
runjournal-owned table in the journal's schema, keyed by the same relative names the
state dir uses (docs/internals.md "Where views live"). `ViewsTable` answers the few
`FsRoot` calls the projection store makes on its views dir, so the store works on both.

The table is created on the first write; a read of a database without it finds nothing
(a read-only open never writes). Files of a run directory (`manifest.json`, reports) are
not here: they go where the journal recorded the run.
"""

from __future__ import annotations

from typing import Any, Final

from runjournal.adapters.fsroot import FsIOError, FsNotFound

VIEWS: Final = "runjournal_views"


class ViewsTable:
    """View records by name (`.runjournal/views/reasons.v1/<run>.json`), through the
    journal's datastore (a DB-API cursor, `%s` placeholders)."""

    def __init__(self, datastore: Any, *, schema: str) -> None:
        self._datastore = datastore
        self._table = f'"{schema}".{VIEWS}'
        self._regclass = f"{schema}.{VIEWS}"
        self._created = False

    # --- the FsRoot calls the projection store makes --------------------------------

    def exists_table(self) -> bool:
        try:
            with self._datastore.transaction(commit=False) as cursor:
                return self._has_table(cursor)
        except Exception as exc:  # the database is unreachable: as for a missing dir
            raise FsIOError(VIEWS, None, str(exc)) from None

    def read_bytes(self, name: str) -> bytes:
        row = self._query("SELECT data FROM {t} WHERE name = %s", (name,), name, one=True)
        if row is None:
            raise FsNotFound(name)
        value = row["data"]
        return value.encode("utf-8") if isinstance(value, str) else bytes(value)

    def write_bytes(self, name: str, data: bytes, *, overwrite: bool = True) -> None:
        self._create()
        text = data.decode("utf-8")
        conflict = "DO UPDATE SET data = excluded.data" if overwrite else "DO NOTHING"
        self._execute(
            f"INSERT INTO {self._table} (name, data) VALUES (%s, %s) ON CONFLICT (name) {conflict}",
            (name, text),
            name,
        )

    def listdir(self, name: str) -> list[str]:
        prefix = name.rstrip("/") + "/"
        rows = self._query(
            "SELECT name FROM {t} WHERE starts_with(name, %s)", (prefix,), name, one=False
        )
        children = {str(r["name"])[len(prefix) :].split("/", 1)[0] for r in rows or []}
        if not children:
            raise FsNotFound(name)
        return sorted(children)

    def remove_tree(self, name: str, *, missing_ok: bool = False) -> None:
        if not self.exists_table():
            return
        prefix = name.rstrip("/") + "/"
        self._execute(
            f"DELETE FROM {self._table} WHERE name = %s OR starts_with(name, %s)",
            (name, prefix),
            name,
        )

    def close(self) -> None:
        """The datastore belongs to the journal store, which closes it."""

    # --- SQL -------------------------------------------------------------------------

    def _has_table(self, cursor: Any) -> bool:
        cursor.execute("SELECT to_regclass(%s) AS t", (self._regclass,))
        row = cursor.fetchone()
        return row is not None and row["t"] is not None

    def _query(self, sql: str, args: tuple[Any, ...], name: str, *, one: bool) -> Any:
        try:
            with self._datastore.transaction(commit=False) as cursor:
                if not self._has_table(cursor):
                    return None
                cursor.execute(sql.format(t=self._table), args)
                return cursor.fetchone() if one else cursor.fetchall()
        except Exception as exc:
            raise FsIOError(name, None, str(exc)) from None

    def _execute(self, sql: str, args: tuple[Any, ...], name: str) -> None:
        try:
            with self._datastore.transaction(commit=True) as cursor:
                cursor.execute(sql, args)
        except Exception as exc:
            raise FsIOError(name, None, str(exc)) from None

    def _create(self) -> None:
        if self._created:
            return
        self._execute(
            f"CREATE TABLE IF NOT EXISTS {self._table} (name TEXT PRIMARY KEY, data TEXT NOT NULL)",
            (),
            VIEWS,
        )
        self._created = True
