"""Text forms of `runs show` outputs (with provenance) and of `runs diff`.

The facts come from `projections/run_facts.py`; this only lays them out
(docs/operations.md "Comparing runs").
"""

from __future__ import annotations

from typing import Any

from runjournal.cli.style import Styler

SHOWN_OUTPUTS = 20
SHOWN_NAMES = 10


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"  # pragma: no cover


def _decisions(counts: dict[str, int], paint: Styler) -> str:
    return ", ".join(f"{paint.code(k, k)} {v}" for k, v in counts.items()) or "no decisions"


def output_lines(
    outputs: list[dict[str, Any]], paint: Styler, *, limit: int | None = SHOWN_OUTPUTS
) -> list[str]:
    """One line per output: name, size, the lane that produced it and its decisions.

    Module outputs (`glossary.md`) come first, then artifacts, then runjournal's own
    files; at most `limit` lines, then a count of the rest.
    """

    def rank(o: dict[str, Any]) -> tuple[int, str]:
        if o["step"] is None:
            return 2, o["name"]
        return (1 if o["name"].startswith("artifacts/") else 0), o["name"]

    ordered = sorted(outputs, key=rank)
    shown = ordered if limit is None else ordered[:limit]
    width = min(max((len(o["name"]) for o in shown), default=0), 60)
    lines = []
    for o in shown:
        if o["step"] is None:
            origin = "runjournal"
        else:
            origin = f"{o['step']} · {o['lane']}"
            if o["restored"]:
                origin += " (restored)"
            origin += f": {_decisions(o['decisions'], paint)}"
        lines.append(f"    {o['name']:<{width}}  {_size(o['size']):>9}  {origin}")
    if limit is not None and len(ordered) > limit:
        lines.append(f"    … and {len(ordered) - limit} more (--outputs lists them all)")
    return lines


def _names(title: str, names: list[str]) -> list[str]:
    if not names:
        return []
    lines = [f"  {title:<9} {name}" for name in names[:SHOWN_NAMES]]
    if len(names) > SHOWN_NAMES:
        lines.append(f"  {'':<9} … and {len(names) - SHOWN_NAMES} more (--json lists them all)")
    return lines


def _files(label: str, files: dict[str, Any]) -> list[str]:
    body = (
        _names("added", files["added"])
        + _names("removed", files["removed"])
        + _names("changed", files["changed"])
    )
    if not body and not files["unchanged"]:
        return []
    head = f"{label}: {files['unchanged']} unchanged"
    if not body:
        return [head]
    counts = ", ".join(f"{len(files[k])} {k}" for k in ("added", "removed", "changed") if files[k])
    return [f"{head}, {counts}", *body]


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def diff_lines(diff: dict[str, Any], paint: Styler) -> list[str]:
    a, b = diff["a"], diff["b"]
    lines = [
        f"runs {a['run_id']} ({paint.status(a['status'], a['status'])}) -> "
        f"{b['run_id']} ({paint.status(b['status'], b['status'])})"
    ]
    if a["pipeline"] != b["pipeline"]:
        lines.append(f"pipeline: {a['pipeline']} -> {b['pipeline']}")
    if diff["settings"]:
        lines.append("settings:")
        lines += [f"  {s['name']}: {_value(s['a'])} -> {_value(s['b'])}" for s in diff["settings"]]
    lines += _files("inputs", diff["inputs"])
    lines += _files("references", diff["references"])
    if diff["steps"]:
        lines.append("identity:")
    for step in diff["steps"]:
        if step["only_in"]:
            lines.append(f"  {step['step']}: only in run {step['only_in'].upper()}")
            continue
        parts = [f"{name} changed" for name in step["components"]]
        fa, fb = step["fingerprint"]["a"], step["fingerprint"]["b"]
        if fa != fb:
            parts.append(f"fingerprint {_value(fa)} -> {_value(fb)}")
        if step["source_changed"]:
            parts.append("module source changed")
        if step["lanes_added"]:
            parts.append(f"{len(step['lanes_added'])} lane(s) added")
        if step["lanes_removed"]:
            parts.append(f"{len(step['lanes_removed'])} lane(s) removed")
        lines.append(f"  {step['step']}: {'; '.join(parts)}")
    if diff["decisions"]:
        lines.append("decisions:")
        width = max(len(d["step"]) for d in diff["decisions"])
        for d in diff["decisions"]:
            code = paint.code(f"{d['code']:<24}", d["code"])
            lines.append(f"  {d['step']:<{width}}  {code} {d['a']:>6} -> {d['b']}")
    lines += _files("outputs", diff["outputs"])
    if not differs(diff):
        lines.append("no differences")
    return lines


def differs(diff: dict[str, Any]) -> bool:
    """Whether the two runs differ in anything `runs diff` compares."""
    files = [diff[k] for k in ("inputs", "references", "outputs")]
    return bool(
        diff["settings"]
        or diff["steps"]
        or diff["decisions"]
        or diff["a"]["pipeline"] != diff["b"]["pipeline"]
        or any(f["added"] or f["removed"] or f["changed"] for f in files)
    )
