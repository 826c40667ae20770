"""How a run fails at a stage: `StageFailure` for the caller, `StageError` inside a lane."""

from __future__ import annotations

from dataclasses import dataclass, field

from runjournal.domain.decisions import Stage
from runjournal.domain.llm import FailureCause, LLMAttempt
from runjournal.domain.reasons import ReasonCode
from runjournal.domain.runner.boundary import exception_text
from runjournal.domain.runner.outcome import Output

ERROR_MESSAGE_LIMIT = 500
# how the warning of a partial step's lane begins (`explain` lists these apart)
PARTIAL_OUTPUT = "partial output:"


@dataclass
class PartialOutputs:
    """What a failed `--keep-going` run still gives: the outputs of the steps that declare
    `partial = true` and finished (docs/pipeline.md "`partial`")."""

    outputs: list[Output]
    attribution: dict[str, tuple[str, str]] = field(default_factory=dict)
    # (step, lane) -> the documents (producer lanes) it ran without
    left_out: dict[tuple[str, str], list[str]] = field(default_factory=dict)


class StageFailure(Exception):
    """The run failed at a stage: names only the step, the lane and the reason code."""

    def __init__(
        self,
        step: str,
        lane: str,
        code: ReasonCode,
        message: str,
        cause: FailureCause | None = None,
        *,
        exception: BaseException | None = None,
        stage: Stage | None = None,
        chunk: str = "",
    ) -> None:
        super().__init__(message)
        self.step = step
        self.lane = lane
        self.code = code
        self.message = message
        self.cause = cause
        self.exception = exception  # the module's own exception, for `-v` and `--debug trace`
        self.stage = stage  # the failed stage (None: a required lane that cannot be restored)
        self.chunk = chunk
        # every failure of the run in plan order, this one first (`--keep-going` has several)
        self.failures: list[StageFailure] = [self]
        # a --keep-going run's outputs of steps that may run on part of their inputs
        self.partial: PartialOutputs | None = None


class StageError(Exception):
    """A module call of one stage failed; the lane turns it into a `StageFailure`.

    `text` is the error as `Type: message`: the exception's own, or, for a call that ran
    on a worker, the text the worker rendered; `cause` is a worker's typed cause.
    """

    def __init__(
        self,
        stage: Stage,
        chunk: str,
        exc: BaseException,
        attempts: list[LLMAttempt] | None = None,
        *,
        text: str | None = None,
        cause: FailureCause | None = None,
    ) -> None:
        self.text = exception_text(exc) if text is None else text
        super().__init__(self.text)
        self.stage = stage
        self.chunk = chunk
        self.exc = exc
        self.attempts = attempts or []  # LLM attempts not yet journaled
        self.cause = cause


class WorkerError(Exception):
    """A module call failed on a worker: the exception's text and traceback as rendered
    there (the exception itself stays on the worker; it may not even be picklable)."""

    def __init__(self, text: str, traceback: str | None = None) -> None:
        super().__init__(text)
        self.remote_traceback = traceback


class RunStopped(Exception):
    """`PipelineRunner.stop()` was called: calls in flight finished, the rest never started."""
