"""Shared test helpers, importable as `support` (pytest's `pythonpath = ["tests"]`).

- `support.paths`: the checkout's own directories (repository, example, fixtures, docs).
- `support.console`: the installed console script in a subprocess, isolated per test.
- `support.inprocess`: the click group through `CliRunner`, isolated the same way.
- `support.synthetic`: synthetic runs built like the runner builds them, journal backends.
- `support.v1_journal`: writes the committed `fixtures/journal-v1.sqlite3`.
- `support.secret_corpus`: a planted secret for every redaction shape.
- `support.leak_scan`: looking for planted secrets in every byte a run wrote.
- `support.fake_openai`: a fault-injecting OpenAI-compatible server (also
  `python -m tests.support.fake_openai --port 0` from the checkout, for benchmarks).
- `support.llm_servers`: starts it, or the real SmolLM2 model server, as a subprocess
  on 127.0.0.1 and stops it by pid.

Nothing here inserts into `sys.path`; the product is imported only as `runjournal.…`.
"""
