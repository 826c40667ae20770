"""A JSON Schema for OpenLineage run events, built from openlineage-python's own model.

openlineage-python (1.x) ships no `OpenLineage.json` file: it ships classes generated
from that schema (`openlineage.client.generated`). This builds a JSON Schema from those
attrs classes (each class an object, its fields without a default required, nested
classes, lists, dicts and enums followed), and the events are validated against it with
`jsonschema`. Facets are checked against the class of each standard facet name we emit.
"""

from __future__ import annotations

import enum
import types
import typing
from typing import Any

import attr

# Required by the spec (BaseEvent, BaseFacet), defaulted by the library's classes.
_FILLED = {"producer", "schemaURL", "_producer", "_schemaURL"}
_UUID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


def _json_name(field: Any) -> str:
    # openlineage's Serde keeps the facets' `_producer` and `_schemaURL` as they are named
    return field.name


def schema_of(cls: Any, seen: dict[str, Any] | None = None) -> dict[str, Any]:
    seen = {} if seen is None else seen
    hints = typing.get_type_hints(cls)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field in attr.fields(cls):
        if field.name.startswith("_") and field.name not in ("_producer", "_schemaURL"):
            continue
        name = _json_name(field)
        properties[name] = _type_schema(hints.get(field.name, Any), seen)
        if name == "runId":  # the spec's `format: uuid`
            properties[name] = {"type": "string", "pattern": _UUID}
        if field.default is attr.NOTHING or name in _FILLED:
            required.append(name)
    return {"type": "object", "properties": properties, "required": required}


def _type_schema(hint: Any, seen: dict[str, Any]) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    if hint is Any or isinstance(hint, typing.TypeVar):
        return {}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_type_schema(a, seen) for a in typing.get_args(hint)]}
    if hint is type(None):
        return {"type": "null"}
    if hint is str:
        return {"type": "string"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return {"type": "array", "items": _type_schema(item, seen)}
    if origin is dict:
        args = typing.get_args(hint)
        return {"type": "object", "additionalProperties": _type_schema(args[1], seen)}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    if attr.has(hint):
        key = f"{hint.__module__}.{hint.__qualname__}"
        if key not in seen:
            seen[key] = {}  # recursion guard
            seen[key] = schema_of(hint, seen)
        return seen[key]
    return {}


def run_event_schema() -> dict[str, Any]:
    from openlineage.client.generated.base import RunEvent

    return schema_of(RunEvent)


def facet_schemas() -> dict[str, dict[str, Any]]:
    """Standard facet name -> the schema of its class (the facets this project emits)."""
    from openlineage.client.facet_v2 import (
        dataset_version_dataset,
        error_message_run,
        input_statistics_input_dataset,
        job_type_job,
        output_statistics_output_dataset,
        parent_run,
    )

    return {
        "parent": schema_of(parent_run.ParentRunFacet),
        "errorMessage": schema_of(error_message_run.ErrorMessageRunFacet),
        "jobType": schema_of(job_type_job.JobTypeJobFacet),
        "version": schema_of(dataset_version_dataset.DatasetVersionDatasetFacet),
        "inputStatistics": schema_of(
            input_statistics_input_dataset.InputStatisticsInputDatasetFacet
        ),
        "outputStatistics": schema_of(
            output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet
        ),
    }
