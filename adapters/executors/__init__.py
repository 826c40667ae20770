"""`--executor processes|dask`: module calls run by worker processes (docs/internals.md
"Executors"). Nothing here is imported until such an executor is chosen; Dask only then."""


class ExecutorUnavailable(Exception):
    """The chosen executor cannot be started: one line for the operator (exit 2)."""
