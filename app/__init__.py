"""The application layer: the use-cases (run, plan, explain, audit) between `cli/` and
`adapters/` (docs/internals.md "The application layer (`app/`)").

Each use-case takes a settings object and the collaborators the composition root
(cli/compose.py) made, owns their lifetimes with one `contextlib.ExitStack`, and returns a
typed result; failures are typed exceptions (app/errors.py), never an exit code. Nothing
is imported here: `import runjournal` stays cheap (docs/performance.md "Start-up").
"""
