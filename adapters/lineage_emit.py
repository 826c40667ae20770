"""A run's OpenLineage run events through `openlineage-python` (docs/operations.md
"Traces and lineage").

`projections/lineage.py` folds the journal into plain records; here each becomes
openlineage-python's `RunEvent` (its attrs classes check the event time, the run UUID
and the schema URLs as they are built), serialized by its `Serde`. Lines for the console
and the file are that JSON, one event per line; HTTP goes through its `HttpTransport`.
The library is imported on first use only (the `lineage` extra).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from runjournal.projections.lineage import LineageRecord

NAMESPACE = "runjournal"
FACET_SCHEMA = "urn:runjournal:openlineage-facets:1"


class LineageUnavailable(Exception):
    """The `lineage` extra is not installed."""


class LineageSendFailed(Exception):
    """The HTTP endpoint did not take an event."""


def _library() -> dict[str, Any]:
    try:
        import attr
        from openlineage.client import event_v2
        from openlineage.client.facet_v2 import (
            DatasetFacet,
            JobFacet,
            RunFacet,
            dataset_version_dataset,
            error_message_run,
            input_statistics_input_dataset,
            job_type_job,
            output_statistics_output_dataset,
            parent_run,
        )
        from openlineage.client.serde import Serde
    except ImportError as exc:
        raise LineageUnavailable(
            f"OpenLineage is not installed ({exc.name}): pip install 'runjournal[lineage]'"
        ) from None

    @attr.define
    class RunjournalRunFacet(RunFacet):
        """Which runjournal run this is (`runjournal_run`)."""

        runId: str
        pipeline: str
        toolVersion: str
        status: str

        @staticmethod
        def _get_schema() -> str:
            return f"{FACET_SCHEMA}#/$defs/RunjournalRunFacet"

    @attr.define
    class RunjournalDecisionsRunFacet(RunFacet):
        """A step's stage decisions: count per reason code and per outcome."""

        reasonCodes: dict[str, int]
        outcomes: dict[str, int]

        @staticmethod
        def _get_schema() -> str:
            return f"{FACET_SCHEMA}#/$defs/RunjournalDecisionsRunFacet"

    @attr.define
    class RunjournalDigestDatasetFacet(DatasetFacet):
        """A dataset's bytes: sha256 and size."""

        sha256: str
        size: int

        @staticmethod
        def _get_schema() -> str:
            return f"{FACET_SCHEMA}#/$defs/RunjournalDigestDatasetFacet"

    return {
        "ev": event_v2,
        "parent_run": parent_run,
        "job_type": job_type_job,
        "error": error_message_run,
        "version": dataset_version_dataset,
        "in_stats": input_statistics_input_dataset,
        "out_stats": output_statistics_output_dataset,
        "RunFacet": RunjournalRunFacet,
        "Decisions": RunjournalDecisionsRunFacet,
        "Digest": RunjournalDigestDatasetFacet,
        "JobFacet": JobFacet,
        "Serde": Serde,
    }


def run_events(
    records: Iterable[LineageRecord], *, tool_version: str, namespace: str = NAMESPACE
) -> list[Any]:
    """openlineage-python `RunEvent`s for the records, in their order."""
    lib = _library()
    ev = lib["ev"]
    producer = f"urn:runjournal:{tool_version}"
    dataset_namespace = f"{namespace}:datasets"

    def dataset_facets(d: Any) -> dict[str, Any]:
        return {
            "version": lib["version"].DatasetVersionDatasetFacet(
                datasetVersion=d.sha256, producer=producer
            ),
            "runjournal_digest": lib["Digest"](sha256=d.sha256, size=d.size, producer=producer),
        }

    events = []
    for r in records:
        run_facets: dict[str, Any] = {}
        if r.identity:
            run_facets["runjournal_run"] = lib["RunFacet"](**dict(r.identity), producer=producer)
        if r.parent is not None:
            parent_uuid, parent_job = r.parent
            run_facets["parent"] = lib["parent_run"].ParentRunFacet(
                run=lib["parent_run"].Run(runId=parent_uuid),
                job=lib["parent_run"].Job(namespace=namespace, name=parent_job),
                root=lib["parent_run"].Root(
                    run=lib["parent_run"].RootRun(runId=parent_uuid),
                    job=lib["parent_run"].RootJob(namespace=namespace, name=parent_job),
                ),
                producer=producer,
            )
        if r.decisions is not None:
            codes = {k: v for k, v in r.decisions if not k.startswith("outcome:")}
            outcomes = {k[8:]: v for k, v in r.decisions if k.startswith("outcome:")}
            run_facets["runjournal_decisions"] = lib["Decisions"](
                reasonCodes=codes, outcomes=outcomes, producer=producer
            )
        if r.error is not None:
            run_facets["errorMessage"] = lib["error"].ErrorMessageRunFacet(
                message=r.error, programmingLanguage="PYTHON", producer=producer
            )
        job_facets = {
            "jobType": lib["job_type"].JobTypeJobFacet(
                processingType="BATCH",
                integration="RUNJOURNAL",
                jobType=r.job_type,
                producer=producer,
            )
        }
        events.append(
            ev.RunEvent(
                eventType=getattr(ev.RunState, r.event_type),
                eventTime=r.event_time,
                run=ev.Run(runId=r.run_uuid, facets=run_facets),
                job=ev.Job(namespace=namespace, name=r.job, facets=job_facets),
                producer=producer,
                inputs=[
                    ev.InputDataset(
                        namespace=dataset_namespace,
                        name=d.name,
                        facets=dataset_facets(d),
                        inputFacets={
                            "inputStatistics": lib["in_stats"].InputStatisticsInputDatasetFacet(
                                size=d.size, fileCount=1, producer=producer
                            )
                        },
                    )
                    for d in r.inputs
                ],
                outputs=[
                    ev.OutputDataset(
                        namespace=dataset_namespace,
                        name=d.name,
                        facets=dataset_facets(d),
                        outputFacets={
                            "outputStatistics": lib["out_stats"].OutputStatisticsOutputDatasetFacet(
                                size=d.size, fileCount=1, producer=producer
                            )
                        },
                    )
                    for d in r.outputs
                ],
            )
        )
    return events


def to_json_lines(events: Iterable[Any]) -> list[str]:
    """One JSON document per event, as openlineage-python serializes it."""
    serde = _library()["Serde"]
    return [serde.to_json(event) for event in events]


def http_sender(url: str, *, timeout: float = 10.0) -> Callable[[Any], None]:
    """Send one event to an OpenLineage HTTP endpoint (`<url>/api/v1/lineage`)."""
    _library()
    from openlineage.client.transport.http import HttpConfig, HttpTransport

    transport = HttpTransport(HttpConfig(url=url, timeout=timeout))

    def send(event: Any) -> None:
        try:
            response = transport.emit(event)
        except Exception as exc:  # requests' errors, the transport's own
            raise LineageSendFailed(f"{url}: {exc}") from None
        status = getattr(response, "status_code", 200)
        if status >= 400:
            raise LineageSendFailed(f"{url} answered HTTP {status}")

    return send
