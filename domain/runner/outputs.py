"""The files a run's artifacts become: each artifact's own JSON and its module's `outputs()`."""

from __future__ import annotations

from runjournal.domain.decisions import Stage
from runjournal.domain.modules import OutputFile, StageContext
from runjournal.domain.names import safe_lane_id
from runjournal.domain.pipeline import ResolvedPipeline
from runjournal.domain.ports import Spool
from runjournal.domain.reasons import ReasonCode
from runjournal.domain.redaction import safe_error_text
from runjournal.domain.runner.artifacts import Artifact
from runjournal.domain.runner.boundary import checked_outputs, exception_text, is_interrupt
from runjournal.domain.runner.ledger import RunLedger
from runjournal.domain.runner.outcome import Output, SpooledOutput
from runjournal.domain.runner.stage_failures import ERROR_MESSAGE_LIMIT, StageFailure


def collect_outputs(
    pipeline: ResolvedPipeline,
    artifacts: dict[str, dict[str, Artifact]],
    ledger: RunLedger,
    attribution: dict[str, tuple[str, str]],
    spool: Spool | None = None,
) -> list[Output]:
    """Every output file in step and lane order; `attribution` gets each name's lane.

    With a `spool` each file's bytes are set aside there as its lane's outputs are made,
    so only one lane's files are in memory at a time, and each lane's artifact is let go
    (taken out of `artifacts`) once its outputs are made: the artifacts and the outputs
    are not both held whole (issue 29: peak RSS)."""
    outputs: list[Output] = []
    for step in pipeline.steps:
        lanes = list(artifacts[step.id].items())
        artifacts[step.id].clear()
        for i, (lane, artifact) in enumerate(lanes):
            lanes[i] = None  # type: ignore[call-overload]
            own = OutputFile(f"artifacts/{step.id}/{safe_lane_id(lane)}.json", artifact.payload())
            ctx = StageContext(
                step=step.id,
                lane=lane,
                params=dict(step.params),
                references=dict(pipeline.references),
                consumed={},
                overrides=step.overrides_seen(pipeline.overrides),
            )
            try:
                extra = checked_outputs(step.module.outputs(artifact.value, ctx))
            except BaseException as exc:  # whatever the module does, but an interrupt
                if is_interrupt(exc):
                    raise
                message = safe_error_text(exception_text(exc), ERROR_MESSAGE_LIMIT)
                ledger.journal.stage_failed(
                    step=step.id,
                    lane=lane,
                    stage=Stage.NORMALIZE,
                    chunk="",
                    code=ReasonCode.STAGE_FAILED,
                    message=message,
                )
                raise StageFailure(
                    step.id, lane, ReasonCode.STAGE_FAILED, message, exception=exc
                ) from None
            for item in (own, *extra):
                outputs.append(SpooledOutput.of(spool, item.name, item.data) if spool else item)
                attribution.setdefault(item.name, (step.id, lane))
    return outputs
