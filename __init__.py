"""runjournal: resumable, explainable, auditable document pipelines.

The Python API (docs/python-api.md) is imported on first use of one of its names, so
`import runjournal` stays cheap (docs/performance.md "Start-up").
"""

__version__ = "0.2.0"

# Each public name and the module that defines it, imported when first asked for (nothing
# is imported here, not even `typing`: tests/unit/test_redaction.py measures that).
_LAZY = {
    "Project": "runjournal.api",
    "RunResult": "runjournal.api",
    "Output": "runjournal.api",
    "Pipeline": "runjournal.api",
    "Step": "runjournal.api",
    "chunk_step": "runjournal.api",
    "RunjournalError": "runjournal.app.errors",
    "UsageError": "runjournal.app.errors",
    "RunFailedError": "runjournal.app.errors",
    "NotPersistedError": "runjournal.app.errors",
    "RunInterruptedError": "runjournal.app.errors",
    "RunEnd": "runjournal.app.errors",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'runjournal' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
