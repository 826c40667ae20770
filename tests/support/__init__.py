"""Shared test helpers, importable as `support` (pytest's `pythonpath = ["tests"]`).

- `support.paths`: the checkout's own directories (repository, example, fixtures, docs).
- `support.console`: the installed console script in a subprocess, isolated per test.
- `support.inprocess`: the click group through `CliRunner`, isolated the same way.
- `support.synthetic`: synthetic runs built like the runner builds them, journal backends.
- `support.v1_journal`: writes the committed `fixtures/journal-v1.sqlite3`.
- `support.secret_corpus`: a planted secret for every redaction shape.
- `support.leak_scan`: looking for planted secrets in every byte a run wrote.

Nothing here inserts into `sys.path`; the product is imported only as `runjournal.…`.
"""
