"""Structured output: the reply format sent for a type or schema, and the check of a reply.

A module asks for a reply of a msgspec type (its JSON Schema comes from
`msgspec.json.schema`) or of a JSON Schema (`llm.json`'s `params.schema`). The request
carries the schema as a `json_schema` response format (or asks for `json_object` mode,
per profile); the reply is decoded with msgspec and checked, and what is wrong with it
becomes the text of the re-ask (docs/modules.md "Asking for structured output").
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import msgspec
from runjournal.adapters.llm.client_options import StructuredOutput
from runjournal.domain.lazy_pattern import LazyPattern

_FENCE = LazyPattern(r"^\s*```(?:json)?\s*\n(?P<body>.*?)\n?\s*```\s*$", re.DOTALL)
_NAME_CHARS = LazyPattern(r"[^A-Za-z0-9_-]+")
_MAX_ERROR = 300


class ReplyInvalid(ValueError):
    """A reply that is not JSON of the asked shape; the message says what is wrong."""


def schema_for(reply_type: Any, schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The JSON Schema of the reply: `schema` as given, else msgspec's for `reply_type`.

    A top-level `$ref` into `$defs` (msgspec's form for a Struct) is inlined, because
    servers want an object schema at the top.
    """
    if schema is not None:
        return dict(schema)
    out: dict[str, Any] = msgspec.json.schema(reply_type)
    ref = out.get("$ref")
    defs = out.get("$defs", {})
    if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in defs:
        inner = dict(defs[ref[8:]])
        rest = {k: v for k, v in out.items() if k != "$ref"}
        out = {**inner, **rest}
    return out


def schema_name(reply_type: Any, schema: Mapping[str, Any]) -> str:
    title = schema.get("title") if isinstance(schema.get("title"), str) else None
    name = title or getattr(reply_type, "__name__", None) or "reply"
    return (_NAME_CHARS.sub("_", str(name)).strip("_") or "reply")[:64]


def response_format(
    mode: StructuredOutput, reply_type: Any, schema: Mapping[str, Any]
) -> dict[str, Any]:
    if mode is StructuredOutput.JSON_OBJECT:
        return {"type": "json_object"}
    return {
        "type": "json_schema",
        "json_schema": {"name": schema_name(reply_type, schema), "schema": dict(schema)},
    }


def strip_fence(text: str) -> str:
    fenced = _FENCE.match(text)
    return fenced.group("body") if fenced else text.strip()


def _preview(text: str, limit: int = 80) -> str:
    return " ".join(text.split())[:limit]


def decode_reply(text: str, reply_type: Any, schema: Mapping[str, Any] | None) -> Any:
    """The reply as a value of `reply_type` (checked against `schema` when one was given)."""
    body = strip_fence(text)
    if reply_type is Any or reply_type is None:
        try:
            value = msgspec.json.decode(body)
        except msgspec.DecodeError:
            raise ReplyInvalid(f"the reply is not JSON: {_preview(text)!r}") from None
        if schema is not None:
            problem = check_schema(value, schema, schema)
            if problem is not None:
                raise ReplyInvalid(problem)
        return value
    if schema is not None:  # a given schema may say more than the type (enums, bounds)
        try:
            raw = msgspec.json.decode(body)
        except msgspec.DecodeError:
            raise ReplyInvalid(f"the reply is not JSON: {_preview(text)!r}") from None
        problem = check_schema(raw, schema, schema)
        if problem is not None:
            raise ReplyInvalid(problem)
    try:
        return msgspec.json.decode(body, type=reply_type)
    except msgspec.ValidationError as exc:
        raise ReplyInvalid(f"the reply does not match the schema: {exc}"[:_MAX_ERROR]) from None
    except msgspec.DecodeError:
        raise ReplyInvalid(f"the reply is not JSON: {_preview(text)!r}") from None


# --- a JSON Schema check for the keywords replies need -------------------------------

_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    tp = _TYPES.get(name)
    if tp is None:
        return True  # an unknown type name is the server's to enforce
    if tp is dict or tp is list or tp is str:
        return isinstance(value, tp)
    return isinstance(value, tp) if tp is not bool else isinstance(value, bool)


def _resolve(node: Any, root: Mapping[str, Any]) -> Any:
    seen = 0
    while isinstance(node, Mapping) and isinstance(node.get("$ref"), str) and seen < 32:
        ref = node["$ref"]
        if not ref.startswith("#/"):
            return {}
        target: Any = root
        for part in ref[2:].split("/"):
            if not isinstance(target, Mapping) or part not in target:
                return {}
            target = target[part]
        node = target
        seen += 1
    return node


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def check_schema(value: Any, node: Any, root: Mapping[str, Any], at: str = "$") -> str | None:
    """The first way `value` breaks `node`, as `$.path: what`, or None.

    Checked: type, enum, const, properties/required/additionalProperties, items,
    min/maxItems, min/maxLength, minimum/maximum, anyOf/oneOf/allOf, $ref. Other
    keywords are left to the server's enforcement.
    """
    node = _resolve(node, root)
    if not isinstance(node, Mapping):
        return None
    for combo in ("anyOf", "oneOf"):
        options = node.get(combo)
        if isinstance(options, list) and options:
            problems = [check_schema(value, o, root, at) for o in options]
            if all(p is not None for p in problems):
                return problems[0]
    for sub in node.get("allOf", []) if isinstance(node.get("allOf"), list) else []:
        problem = check_schema(value, sub, root, at)
        if problem is not None:
            return problem
    expected = node.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else [expected]
        if not any(_is_type(value, str(n)) for n in names):
            return f"{at}: expected {' or '.join(map(str, names))}, got {_type_name(value)}"
    if "enum" in node and isinstance(node["enum"], list) and value not in node["enum"]:
        choices = ", ".join(msgspec.json.encode(c).decode() for c in node["enum"][:10])
        return f"{at}: {msgspec.json.encode(value).decode()[:40]} is not one of {choices}"
    if "const" in node and value != node["const"]:
        return f"{at}: must be {msgspec.json.encode(node['const']).decode()[:40]}"
    if isinstance(value, dict):
        props = node.get("properties") if isinstance(node.get("properties"), Mapping) else {}
        for name in node.get("required", []) if isinstance(node.get("required"), list) else []:
            if name not in value:
                return f"{at}: missing required field {name!r}"
        for name, sub in props.items():
            if name in value:
                problem = check_schema(value[name], sub, root, f"{at}.{name}")
                if problem is not None:
                    return problem
        extra = node.get("additionalProperties")
        if extra is False:
            unknown = sorted(set(value) - set(props))
            if unknown:
                return f"{at}: unexpected field {unknown[0]!r}"
        elif isinstance(extra, Mapping):
            for name in sorted(set(value) - set(props)):
                problem = check_schema(value[name], extra, root, f"{at}.{name}")
                if problem is not None:
                    return problem
    if isinstance(value, list):
        low, high = node.get("minItems"), node.get("maxItems")
        if isinstance(low, int) and len(value) < low:
            return f"{at}: needs at least {low} item(s)"
        if isinstance(high, int) and len(value) > high:
            return f"{at}: at most {high} item(s)"
        items = node.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                problem = check_schema(item, items, root, f"{at}[{i}]")
                if problem is not None:
                    return problem
    if isinstance(value, str):
        low, high = node.get("minLength"), node.get("maxLength")
        if isinstance(low, int) and len(value) < low:
            return f"{at}: shorter than {low} character(s)"
        if isinstance(high, int) and len(value) > high:
            return f"{at}: longer than {high} character(s)"
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = node.get("minimum"), node.get("maximum")
        if isinstance(low, int | float) and value < low:
            return f"{at}: below the minimum {low}"
        if isinstance(high, int | float) and value > high:
            return f"{at}: above the maximum {high}"
    return None


# --- the offline profile's placeholder ----------------------------------------------


def _sample(node: Any, root: Mapping[str, Any], depth: int = 0) -> Any:
    node = _resolve(node, root)
    if not isinstance(node, Mapping) or depth > 16:
        return None
    if "const" in node:
        return node["const"]
    if isinstance(node.get("enum"), list) and node["enum"]:
        return node["enum"][0]
    for combo in ("anyOf", "oneOf", "allOf"):
        if isinstance(node.get(combo), list) and node[combo]:
            return _sample(node[combo][0], root, depth + 1)
    if "default" in node:
        return node["default"]
    kind = node.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in node):
        props = node.get("properties") if isinstance(node.get("properties"), Mapping) else {}
        required = node.get("required") if isinstance(node.get("required"), list) else []
        return {name: _sample(props.get(name, {}), root, depth + 1) for name in required}
    if kind == "array":
        low = node.get("minItems") if isinstance(node.get("minItems"), int) else 0
        return [_sample(node.get("items", {}), root, depth + 1) for _ in range(low)]
    if kind == "string":
        low = node.get("minLength") if isinstance(node.get("minLength"), int) else 0
        return "x" * low
    if kind in ("integer", "number"):
        low = node.get("minimum")
        if isinstance(low, int | float) and math.isfinite(low):
            return math.ceil(low) if kind == "integer" else low
        return 0
    if kind == "boolean":
        return False
    return None


def offline_answer(reply_type: Any, schema: Mapping[str, Any] | None) -> Any:
    """The simplest value the schema allows, decoded as `reply_type` (the offline profile)."""
    root = schema_for(reply_type, schema)
    value = _sample(root, root)
    if reply_type is Any or reply_type is None:
        return value
    try:
        return msgspec.convert(value, reply_type)
    except msgspec.ValidationError as exc:
        raise ReplyInvalid(f"the offline profile cannot answer this type: {exc}") from None
