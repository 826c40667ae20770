"""The pipeline runner (docs/internals.md "The runner"): its public names.

`PipelineRunner` (pipeline_runner.py) runs a resolved pipeline through the ports; the parts are
chunk plans (plans.py), the scheduler across lanes (scheduler.py), one lane's stage
loop (lanes.py), restoring required lanes for
`--recompute` (restore.py), artifacts (artifacts.py), what it journals and tallies
(ledger.py), output files (outputs.py), the module-call boundary (boundary.py), failures
(stage_failures.py) and its outcome (outcome.py).
"""

from runjournal.domain.identity import codec_id
from runjournal.domain.runner.artifacts import Artifact
from runjournal.domain.runner.boundary import Interrupt
from runjournal.domain.runner.lanes import Progress
from runjournal.domain.runner.outcome import RunOutcome
from runjournal.domain.runner.pipeline_runner import PipelineRunner
from runjournal.domain.runner.scheduler import Executor, SerialExecutor
from runjournal.domain.runner.stage_failures import (
    ERROR_MESSAGE_LIMIT,
    PartialOutputs,
    RunStopped,
    StageFailure,
)

__all__ = [
    "ERROR_MESSAGE_LIMIT",
    "Artifact",
    "Executor",
    "Interrupt",
    "PartialOutputs",
    "PipelineRunner",
    "Progress",
    "RunOutcome",
    "RunStopped",
    "SerialExecutor",
    "StageFailure",
    "codec_id",
]
