"""`report.html` from the html_report view: one self-contained page, no script.

Pure: the same view gives the same bytes. Every value that comes from the journal goes
through `_e` (HTML-escaped, quotes included) before it reaches the page; numbers are
formatted here. The page carries its own CSS and SVG, loads nothing (a Content Security
Policy of `default-src 'none'` says so to the browser too) and works from `file://`
(docs/operations.md "The HTML run report").
"""

from __future__ import annotations

import html
import json
import re
import shlex
from collections.abc import Iterable, Sequence
from typing import Any

from runjournal.domain.reasons import CATEGORY_OF, DESCRIPTIONS, Category, ReasonCode
from runjournal.projections.html_report import SEVERITY
from runjournal.projections.llm_batches import batch_lines
from runjournal.projections.llm_retries import retries_text

__all__ = ["GROUP_ABOVE", "GROUP_SIZE", "read_report_head", "render_report_html"]

# Beyond this many lanes the matrix folds lanes into groups (by directory, else by
# consecutive blocks of GROUP_SIZE), each showing its counts until it is opened.
GROUP_ABOVE = 40
GROUP_SIZE = 50
TIMELINE_BINS = 160

_TIMES, _DASH = "\u00d7", "\u2013"  # the multiplication sign and an en dash, as shown

_CATEGORY_LABEL = {
    Category.REUSE: "reused",
    Category.EXECUTION: "executed (no resume)",
    Category.MISS: "no checkpoint",
    Category.INVALID: "invalidated",
    Category.CORRUPT: "corrupt checkpoint",
    Category.FORCED: "forced",
    Category.PREDECESSOR_FAILURE: "predecessor failure",
    Category.FAILURE: "failed",
}
_STATUS_CLASS = {
    "succeeded": "ok",
    "failed": "bad",
    "interrupted": "warn",
    "abandoned": "warn",
    "running": "idle",
}


def _e(value: Any) -> str:
    """Escape any value for HTML text or a double-quoted attribute."""
    return html.escape(value if isinstance(value, str) else str(value), quote=True)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _num(n: int | float) -> str:
    return f"{n:,}"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}"
    return f"{n} B"  # pragma: no cover


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _when(iso: str | None) -> str:
    """An ISO 8601 UTC time from the journal, shown to the second."""
    if not iso:
        return "—"
    if iso.endswith("+00:00") and len(iso) >= 19:
        return iso[:10] + " " + iso[11:19] + " UTC"
    return iso


def _cost(value: float | None) -> str:
    return "—" if value is None else f"{value:,.4f}"


_URL_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~/")


def _file_url(path: str | None) -> str | None:
    """A `file://` URL of an absolute path, every other byte percent-encoded."""
    if not path or not path.startswith("/"):
        return None
    data = path.encode("utf-8", "surrogateescape")
    return "file://" + "".join(chr(b) if b in _URL_SAFE else f"%{b:02X}" for b in data)


def _link(path: str | None, text: str | None = None) -> str:
    url = _file_url(path)
    label = _e(text if text is not None else (path or "—"))
    return f'<a href="{_e(url)}">{label}</a>' if url else label


def _category_of(code: str) -> str:
    try:
        return CATEGORY_OF[ReasonCode(code)].value
    except ValueError:
        return "execution"


def _description(code: str) -> str:
    try:
        return DESCRIPTIONS[ReasonCode(code)]
    except ValueError:
        return ""


_HEAD_META = re.compile(rb'<meta name="runjournal-(projection|status|events)" content="([^"]*)">')


def read_report_head(data: bytes) -> tuple[int, str, int] | None:
    """(projection version, run status, events) from a page's `<meta>` tags, or None."""
    found = {
        m.group(1).decode("ascii"): m.group(2).decode("ascii", "replace")
        for m in _HEAD_META.finditer(data[:4096])
    }
    projection = found.get("projection", "")
    name, _, version = projection.rpartition(".v")
    if name != "html_report" or not version.isdigit() or not found.get("events", "").isdigit():
        return None
    return int(version), found.get("status", ""), int(found["events"])


# --- the page ----------------------------------------------------------------------


def render_report_html(view: dict[str, Any], *, refresh: int | None = None) -> str:
    """The page; with `refresh` (seconds) it reloads itself that often (`report --watch`
    while the run goes: a `<meta http-equiv="refresh">`, no script)."""
    run = view["run"]
    parts = [
        _head(view, refresh),
        "<body>",
        _header(view),
        _nav(view),
        "<main>",
        _summary(view),
        _section("graph", "Step graph", _graph(view), _graph_note(view)),
        _section("matrix", "Decisions by lane and step", _matrix(view), _matrix_note(view)),
        _section("timeline", "Timeline of stage executions", _timeline(view), _timeline_note()),
        _section("reasons", "Reason codes", _reasons(view)),
        _section("failures", "Failures", _failures(view)),
        _section("warnings", "Warnings", _warnings(view)),
        _section("outputs", "Outputs", _outputs(view)),
        _section("run", "Run", _details(view)),
        "</main>",
        f"<footer>A projection of the run journal: {_num(view['events'])} events of run "
        f"<code>{_e(run['run_id'])}</code>, built by {_e(view['projection']['name'])} "
        f"v{_e(view['projection']['version'])}. Same journal, same page.</footer>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _head(view: dict[str, Any], refresh: int | None = None) -> str:
    run = view["run"]
    title = f"{run['pipeline'] or 'run'} · {run['run_id']} · {run['status']}"
    projection = f"{view['projection']['name']}.v{view['projection']['version']}"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        + (f'<meta http-equiv="refresh" content="{int(refresh)}">\n' if refresh else "")
        + '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="runjournal-projection" content="{_e(projection)}">\n'
        f'<meta name="runjournal-status" content="{_e(run["status"])}">\n'
        f'<meta name="runjournal-events" content="{_e(view["events"])}">\n'
        f'<meta name="runjournal-run" content="{_e(run["run_id"])}">\n'
        f'<meta name="generator" content="runjournal {_e(run["tool_version"])}">\n'
        '<link rel="icon" href="data:,">\n'
        f"<title>{_e(title)}</title>\n<style>{_CSS}</style></head>"
    )


def _section(anchor: str, title: str, body: str, note: str = "") -> str:
    note_html = f'<p class="note">{note}</p>' if note else ""
    return f'<section id="{anchor}"><h2>{title}</h2>{note_html}{body}</section>'


def _header(view: dict[str, Any]) -> str:
    run = view["run"]
    status = run["status"]
    cls = _STATUS_CLASS.get(status, "idle")
    phase = f" at {_e(run['phase'])}" if run["phase"] and status != "succeeded" else ""
    error = ""
    if run["error"]:
        error = f'<p class="error-line">{_error_text(run["error"])}</p>'
    return (
        '<header class="top">'
        f'<div class="status {cls}">{_e(status)}{phase}</div>'
        f'<div class="ident"><h1>{_e(run["pipeline"] or "(unknown pipeline)")}</h1>'
        f'<div class="runid">run <code>{_e(run["run_id"])}</code></div></div>'
        '<dl class="times">'
        f"<div><dt>started</dt><dd>{_e(_when(run['started']))}</dd></div>"
        f"<div><dt>ended</dt><dd>{_e(_when(run['ended']))}</dd></div>"
        f"<div><dt>took</dt><dd>{_duration(run['duration'])}</dd></div>"
        "</dl></header>" + _header_facts(run) + error
    )


def _header_facts(run: dict[str, Any]) -> str:
    """Identity and roots, one line under the header; the Run section has them all."""
    roots = run["roots"]
    bundle = run["debug_bundle"]
    facts = [
        f'identity <span class="digest" title="{_e(run["invocation_identity"])}">'
        f"{_e(run['invocation_identity'][:12])}</span>",
        f"run dir {_link(roots['run_dir'])}",
        f"cache {_link(roots['cache'])}",
        f"debug bundle {_bundle_link(bundle) if bundle else 'none'}",
        f"runjournal {_e(run['tool_version'])}",
    ]
    return f'<div class="facts">{" · ".join(facts)}</div>'


def _bundle_link(bundle: dict[str, Any]) -> str:
    kind = "summary and trace" if bundle["trace"] else "summary"
    url = _file_url(bundle["path"])
    if url is None:
        return _e(kind)
    return f'<a href="{_e(url)}" title="{_e(bundle["path"])}">{kind}</a>'


def _error_text(error: dict[str, Any]) -> str:
    where = ""
    if error.get("step"):
        where = (
            f"step <b>{_e(error['step'])}</b> lane <b>{_e(error['lane'])}</b> "
            f"<code>{_e(error['reason_code'])}</code>: "
        )
    return f"{where}{_e(error['message'])}"


def _nav(view: dict[str, Any]) -> str:
    counts = {
        "failures": _failure_count(view),
        "warnings": len(view["warnings"]),
        "outputs": len(view["outputs"]),
    }
    links = []
    for anchor, label in (
        ("graph", "Steps"),
        ("matrix", "Decisions"),
        ("timeline", "Timeline"),
        ("reasons", "Reason codes"),
        ("failures", "Failures"),
        ("warnings", "Warnings"),
        ("outputs", "Outputs"),
        ("run", "Run"),
    ):
        badge = f' <span class="badge">{_num(counts[anchor])}</span>' if anchor in counts else ""
        hot = " hot" if anchor == "failures" and counts["failures"] else ""
        links.append(f'<a class="navlink{hot}" href="#{anchor}">{label}{badge}</a>')
    return f"<nav>{''.join(links)}</nav>"


def _failure_count(view: dict[str, Any]) -> int:
    refused = len(view["validation"]["refused"]) if view["validation"] else 0
    primary = 1 if view["run"]["error"] and not view["failures"] else 0
    return (
        len(view["failures"])
        + refused
        + len(view["checkpoint_write_failures"])
        + len(view["persistence_failures"])
        + primary
    )


# --- summary cards -------------------------------------------------------------------


def _summary(view: dict[str, Any]) -> str:
    decisions = view["decisions"]
    total = sum(decisions.values())
    reused = sum(n for code, n in decisions.items() if _category_of(code) == "reuse")
    cards = [
        ("steps", _num(len(view["steps"])), f"{_num(len(view['lanes']))} lanes"),
        ("stage decisions", _num(total), f"{_num(reused)} reused" if total else "none"),
        (
            "module calls",
            _num(view["module_calls"]),
            f"{_pct(reused, total)} of stages reused" if total else "",
        ),
        (
            "inputs",
            _num(len(view["inputs"]["sources"])),
            _size(sum(s["size"] for s in view["inputs"]["sources"])),
        ),
        (
            "outputs",
            _num(len(view["outputs"])),
            _size(sum(o["size"] for o in view["outputs"])),
        ),
        ("warnings", _num(len(view["warnings"])), ""),
        ("failures", _num(_failure_count(view)), ""),
    ]
    html_cards = "".join(
        f'<div class="card"><div class="k">{label}</div><div class="v">{value}</div>'
        f'<div class="s">{sub}</div></div>'
        for label, value, sub in cards
    )
    return (
        f'<section id="summary"><div class="cards">{html_cards}{_usage_card(view)}</div>'
        f"{_decision_bar(decisions)}</section>"
    )


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f} %" if whole else "—"


def _usage_card(view: dict[str, Any]) -> str:
    spent, saved = view["usage"]["spent"], view["usage"]["saved"]
    if spent is None and saved is None and not view.get("batches"):
        return (
            '<div class="card"><div class="k">LLM tokens, cost</div>'
            '<div class="v">—</div>'
            '<div class="s">no LLM calls in this run</div></div>'
        )
    rows = []
    if spent is not None:
        cached = spent.get("cached_tokens") or 0
        rows.append(
            f"spent: {_count(spent['calls'], 'call')} "
            f"({_count(spent.get('attempts', spent['calls']), 'attempt')}), "
            f"{_num(spent['prompt_tokens'])} prompt"
            + (f" (of which {_num(cached)} cached)" if cached else "")
            + f" + {_num(spent['completion_tokens'])} completion tokens,"
            f" cost {_cost(spent['cost'])}"
        )
        retries = retries_text(spent.get("retries") or {})
        if retries:
            rows.append(f"unanswered attempts (retried or failed): {_e(retries)}")
    if saved is not None:
        rows.append(
            f"saved by reuse: {_count(saved['stages'], 'stage')}, "
            f"{_num(saved['prompt_tokens'])} prompt + {_num(saved['completion_tokens'])} "
            f"completion tokens, cost {_cost(saved['cost'])}"
        )
    # the provider batches the requests went through (docs/operations.md "Batch runs")
    rows += [_e(line) for line in batch_lines(view.get("batches") or [])]
    return (
        '<div class="card"><div class="k">LLM tokens, cost</div>'
        + "".join(f'<div class="s">{row}</div>' for row in rows)
        + "</div>"
    )


def _decision_bar(decisions: dict[str, int]) -> str:
    """All decisions as one bar, by category, in severity order."""
    by_category: dict[str, int] = {}
    for code, n in decisions.items():
        category = _category_of(code)
        by_category[category] = by_category.get(category, 0) + n
    total = sum(by_category.values())
    if not total:
        return ""
    segments = []
    legend = []
    for category in reversed(SEVERITY):
        n = by_category.get(category.value, 0)
        if not n:
            continue
        label = _CATEGORY_LABEL[category]
        segments.append(
            f'<span class="seg c-{category.value}" style="flex-grow:{n}" '
            f'title="{_e(label)}: {_num(n)}"></span>'
        )
        legend.append(
            f'<span class="chip c-{category.value}"></span>{_e(label)} '
            f"<b>{_num(n)}</b> ({_pct(n, total)})"
        )
    return (
        f'<div class="bigbar">{"".join(segments)}</div>'
        f'<div class="legend">{" · ".join(legend)}</div>'
    )


# --- step graph --------------------------------------------------------------------

_NODE_W, _NODE_H, _GAP_X, _GAP_Y, _PAD = 190, 70, 70, 18, 12
_CHANNEL = 12  # vertical room of each edge that detours below the nodes


def _step_category(step: str, cells: Sequence[dict[str, Any]]) -> str | None:
    ranks = {c.value: i for i, c in enumerate(SEVERITY)}
    found = [c["category"] for c in cells if c["step"] == step and c["category"]]
    return min(found, key=lambda c: ranks.get(c, len(ranks))) if found else None


def _layers(steps: Sequence[dict[str, Any]]) -> dict[str, int]:
    layer: dict[str, int] = {}
    for s in steps:  # producers come first: a step consumes only earlier steps
        layer[s["step"]] = 1 + max((layer.get(p, 0) for p in s["consumes"]), default=-1)
    return layer


def _graph(view: dict[str, Any]) -> str:
    steps = view["steps"]
    if not steps:
        return '<p class="empty">No step resolved a lane in this run.</p>'
    layer = _layers(steps)
    columns: dict[int, list[str]] = {}
    for s in steps:
        columns.setdefault(layer[s["step"]], []).append(s["step"])
    pos: dict[str, tuple[int, int]] = {}
    for col, names in columns.items():
        for row, name in enumerate(names):
            pos[name] = (
                _PAD + col * (_NODE_W + _GAP_X),
                _PAD + row * (_NODE_H + _GAP_Y),
            )
    width = _PAD * 2 + len(columns) * _NODE_W + (len(columns) - 1) * _GAP_X
    rows = max(len(names) for names in columns.values())
    bottom = _PAD + rows * _NODE_H + (rows - 1) * _GAP_Y  # the foot of the lowest node
    edges, detours = [], 0
    for s in steps:
        x2, y2 = pos[s["step"]]
        for producer in s["consumes"]:
            x1, y1 = pos[producer]
            sx, sy = x1 + _NODE_W, y1 + _NODE_H / 2
            ex, ey = x2 - 4, y2 + _NODE_H / 2
            if layer[s["step"]] - layer[producer] > 1:
                # it skips a column: a straight curve would pass behind the nodes between
                # (terms -> glossary behind definitions), so it goes down the gap after the
                # producer, along a channel of its own below every node, and up the gap
                # before the consumer: every edge stays visible (issue 32)
                d = _detour(sx, sy, x2, ey, bottom + _CHANNEL * (detours + 1), detours)
                detours += 1
            else:  # adjacent columns: the curve stays in the gap between them
                mid = (sx + ex) / 2
                d = f"M{sx:.0f},{sy:.0f} C{mid:.0f},{sy:.0f} {mid:.0f},{ey:.0f} {ex:.0f},{ey:.0f}"
            edges.append(
                f'<path class="edge" d="{d}" marker-end="url(#arrow)">'
                f"<title>{_e(s['step'])} consumes {_e(producer)}</title></path>"
            )
    height = bottom + _CHANNEL * detours + _PAD
    nodes = []
    for s in steps:
        x, y = pos[s["step"]]
        category = _step_category(s["step"], view["cells"]) or "none"
        decisions = ", ".join(f"{code} {n}" for code, n in s["decisions"].items()) or "none"
        profile = s["profile"]
        tip = [
            f"step {s['step']}",
            f"{s['lanes']} lane(s), {s['executed']} stage execution(s), {s['failed']} failed",
            f"decisions: {decisions}",
        ]
        if s["consumes"]:
            tip.append(f"consumes: {', '.join(s['consumes'])}")
        if s["forced"]:
            tip.append("forced by --recompute")
        if profile:
            tip.append(
                f"profile {profile['profile_id']} ({profile['provider']}/{profile['model']})"
            )
        reused = sum(n for code, n in s["decisions"].items() if _category_of(code) == "reuse")
        total = sum(s["decisions"].values())
        line2 = f"{s['lanes']} lane{'s' if s['lanes'] != 1 else ''} · {s['executed']} ran"
        line3 = f"{reused}/{total} reused" + (" · forced" if s["forced"] else "")
        nodes.append(
            f'<g class="node c-{_e(category)}" data-step="{_e(s["step"])}" '
            f'transform="translate({x},{y})">'
            f"<title>{_e(chr(10).join(tip))}</title>"
            f'<rect class="box" width="{_NODE_W}" height="{_NODE_H}" rx="9"></rect>'
            f'<text class="name" x="12" y="21">{_e(_clip(s["step"], 22))}</text>'
            f'<text class="meta" x="12" y="38">{_e(line2)}</text>'
            f'<text class="meta" x="12" y="53">{_e(line3)}</text>'
            f"{_node_bar(s['decisions'])}</g>"
        )
    return (
        f'<div class="scroll"><svg class="step-graph" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="step graph">'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'class="arrowhead"></path></marker></defs>'
        f"{''.join(edges)}{''.join(nodes)}</svg></div>"
    )


def _detour(sx: float, sy: float, x2: float, ey: float, cy: float, k: int) -> str:
    """An edge from a producer's right side (`sx`, `sy`) to a consumer at column `x2`
    (arriving at `ey`) that runs in the gaps between columns and along the channel `cy`
    below every node; `k` shifts it in the gaps so detours do not overlap."""
    shift = 16 + (k % 6) * 7  # inside a gap of _GAP_X
    g1, g2, r = sx + shift, x2 - shift, 8
    return (
        f"M{sx:.0f},{sy:.0f} L{g1 - r:.0f},{sy:.0f} Q{g1:.0f},{sy:.0f} {g1:.0f},{sy + r:.0f} "
        f"L{g1:.0f},{cy - r:.0f} Q{g1:.0f},{cy:.0f} {g1 + r:.0f},{cy:.0f} "
        f"L{g2 - r:.0f},{cy:.0f} Q{g2:.0f},{cy:.0f} {g2:.0f},{cy - r:.0f} "
        f"L{g2:.0f},{ey + r:.0f} Q{g2:.0f},{ey:.0f} {g2 + r:.0f},{ey:.0f} L{x2 - 4:.0f},{ey:.0f}"
    )


def _node_bar(decisions: dict[str, int]) -> str:
    """The step's decisions by category, as a thin bar along the node's foot."""
    by_category: dict[str, int] = {}
    for code, n in decisions.items():
        category = _category_of(code)
        by_category[category] = by_category.get(category, 0) + n
    total = sum(by_category.values())
    if not total:
        return ""
    x, width, out = 12.0, _NODE_W - 24, []
    for category in reversed(SEVERITY):
        n = by_category.get(category.value, 0)
        if n:
            w = width * n / total
            out.append(
                f'<rect class="nodebar c-{category.value}" x="{x:.1f}" y="{_NODE_H - 11}" '
                f'width="{w:.1f}" height="5"></rect>'
            )
            x += w
    return "".join(out)


def _graph_note(view: dict[str, Any]) -> str:
    return (
        "One node per step the run reached, outlined in the colour of its most severe "
        "decision, with its decisions by category along the foot; an arrow goes from a "
        "producer to each step that consumed its artifacts (one that skips a column runs "
        "below the nodes)."
    )


# --- decision matrix ---------------------------------------------------------------


def _cell_title(cell: dict[str, Any]) -> str:
    lines = [f"step {cell['step']} · lane {cell['lane']}"]
    for stage, codes in cell["stages"].items():
        text = ", ".join(f"{code} {_TIMES}{n}" if n > 1 else code for code, n in codes.items())
        lines.append(f"{stage}: {text}")
    for code, detail in cell["details"].items():
        lines.append(f"{code}: {detail}")
    if cell["differs"]:
        lines.append(f"differs: {', '.join(cell['differs'])}")
    lines.append(
        f"{cell['chunks']} chunk(s), {cell['executed']} stage execution(s)"
        + (", forced" if cell["forced"] else "")
    )
    artifact = cell["artifact"]
    if artifact:
        restored = ", restored" if artifact["restored"] else ""
        lines.append(
            f"artifact {artifact['kind']} {artifact['size']} B sha256 {artifact['sha256']}"
            f"{restored}"
        )
    if cell["warnings"]:
        lines.append(f"{cell['warnings']} warning(s)")
    if cell["failure"]:
        failure = cell["failure"]
        lines.append(f"failed at {failure['stage']}: {failure['message']}")
    return "\n".join(lines)


def _cell(cell: dict[str, Any]) -> str:
    category = cell["category"] or "none"
    code = cell["code"] or "no decision"
    total, reused = cell["decisions"], cell["reused"]
    sub = f"{reused}/{total} reused" if total else ""
    if cell["failure"]:
        sub = f"failed at {cell['failure']['stage']}"
    elif cell["executed"] and not reused:
        sub = f"{cell['executed']} ran"
    elif cell["executed"]:
        sub = f"{reused}/{total} reused · {cell['executed']} ran"
    marks = ("⚠" if cell["warnings"] else "") + ("⟳" if cell["forced"] else "")
    return (
        f'<div class="cell c-{_e(category)}" data-step="{_e(cell["step"])}" '
        f'data-lane="{_e(cell["lane"])}" data-code="{_e(code)}" '
        f'title="{_e(_cell_title(cell))}">'
        f'<span class="code">{_e(code)}</span><span class="sub">{_e(sub)}'
        f"{' ' + marks if marks else ''}</span></div>"
    )


def _lane_groups(lanes: Sequence[str]) -> list[tuple[str, str, list[str]]]:
    """(label, hover text, lanes) per group: by directory, big ones in consecutive blocks."""
    if len(lanes) <= GROUP_ABOVE:
        return [("", "", list(lanes))]
    by_dir: dict[str, list[str]] = {}
    for lane in lanes:
        head, sep, _ = lane.rpartition("/")
        by_dir.setdefault(head + sep if sep else "(top level)", []).append(lane)
    if len(by_dir) == 1 or len(by_dir) > GROUP_ABOVE:  # directories that do not help
        by_dir = {"lanes": list(lanes)}
    groups: list[tuple[str, str, list[str]]] = []
    for name, members in by_dir.items():
        for start in range(0, len(members), GROUP_SIZE):
            block = members[start : start + GROUP_SIZE]
            label = f"{name} ({_num(len(block))} {'lane' if len(block) == 1 else 'lanes'})"
            if len(members) > GROUP_SIZE:
                label = f"{name} {start + 1}{_DASH}{start + len(block)} of {len(members)}"
            hover = block[0] if len(block) == 1 else f"{block[0]} … {block[-1]}"
            groups.append((label, hover, block))
    return groups


def _matrix(view: dict[str, Any]) -> str:
    steps = [s["step"] for s in view["steps"]]
    if not steps:
        return '<p class="empty">No decisions were recorded.</p>'
    cells = {(c["step"], c["lane"]): c for c in view["cells"]}
    columns = f"grid-template-columns:minmax(11em,19em) repeat({len(steps)},minmax(0,1fr))"
    header = '<div class="corner">lane \\ step</div>' + "".join(
        f'<div class="colhead" title="{_e(step)}">{_e(_clip(step, 18))}</div>' for step in steps
    )
    out = [_legend(), f'<div class="matrix" style="{columns}">{header}</div>']
    groups = _lane_groups(view["lanes"])
    for name, hover, lanes in groups:
        rows = []
        for lane in lanes:
            rows.append(f'<div class="lane" title="{_e(lane)}">{_e(lane)}</div>')
            for step in steps:
                cell = cells.get((step, lane))
                rows.append(_cell(cell) if cell else '<div class="na"></div>')
        grid = f'<div class="matrix" style="{columns}">{"".join(rows)}</div>'
        if not name:
            out.append(grid)
            continue
        summary = _group_summary(name, hover, lanes, steps, cells, columns)
        out.append(f'<details class="group"><summary>{summary}</summary>{grid}</details>')
    return "".join(out)


def _group_summary(
    name: str,
    hover: str,
    lanes: Sequence[str],
    steps: Sequence[str],
    cells: dict[tuple[str, str], dict[str, Any]],
    columns: str,
) -> str:
    parts = [f'<div class="lane grouplabel" title="{_e(hover)}">▸ {_e(name)}</div>']
    for step in steps:
        counts: dict[str, int] = {}
        for lane in lanes:
            cell = cells.get((step, lane))
            if cell is not None:
                key = cell["category"] or "none"
                counts[key] = counts.get(key, 0) + 1
        if not counts:
            parts.append('<div class="na"></div>')
            continue
        order = [c.value for c in reversed(SEVERITY)] + ["none"]
        segs = "".join(
            f'<span class="seg c-{_e(c)}" style="flex-grow:{counts[c]}"></span>'
            for c in order
            if c in counts
        )
        tip = ", ".join(f"{_label(c)} {counts[c]}" for c in order if c in counts)
        parts.append(
            f'<div class="aggregate" title="{_e(step)}: {_e(tip)}">'
            f'<div class="minibar">{segs}</div><div class="sub">{_e(tip)}</div></div>'
        )
    return f'<div class="matrix" style="{columns}">{"".join(parts)}</div>'


def _label(category: str) -> str:
    try:
        return _CATEGORY_LABEL[Category(category)]
    except ValueError:
        return "no decision"


def _legend() -> str:
    items = "".join(
        f'<span class="legend-item"><span class="chip c-{c.value}"></span>'
        f"{_e(_CATEGORY_LABEL[c])}</span>"
        for c in reversed(SEVERITY)
    )
    return f'<div class="legend matrix-legend">{items}</div>'


def _matrix_note(view: dict[str, Any]) -> str:
    lanes = len(view["lanes"])
    grouped = (
        f" With {_num(lanes)} lanes, lanes are grouped: open a group to see its cells."
        if lanes > GROUP_ABOVE
        else ""
    )
    return (
        "One cell per step and lane, coloured by its most severe decision and labelled with "
        "that decision's reason code; hover a cell for every stage's decisions, the "
        "recorded components that differ, the artifact and any failure. ⚠ warnings, "
        f"⟳ forced.{grouped}"
    )


# --- timeline ----------------------------------------------------------------------

_TL_LABEL, _TL_WIDTH, _TL_ROW = 150, 820, 30
_STAGE_CLASS = {"extract": "st-extract", "merge": "st-merge", "normalize": "st-normalize"}


def _timeline(view: dict[str, Any]) -> str:
    steps = view["steps"]
    executions = view["executions"]
    if not steps:
        return '<p class="empty">Nothing ran.</p>'
    span = max(
        [view["run"]["duration"] or 0.0]
        + [e["at"] for e in executions]
        + [s["last"] or 0.0 for s in steps]
    )
    span = span or 1e-3
    scale = _TL_WIDTH / span
    height = 28 + _TL_ROW * (len(steps) + 1) + 8
    width = _TL_LABEL + _TL_WIDTH + 20
    parts = []
    for i in range(6):  # the axis
        t = span * i / 5
        x = _TL_LABEL + t * scale
        parts.append(
            f'<line class="tick" x1="{x:.1f}" y1="20" x2="{x:.1f}" y2="{height - 6}"></line>'
            f'<text class="axis" x="{x:.1f}" y="13" text-anchor="middle">{_duration(t)}</text>'
        )
    by_step: dict[str, list[dict[str, Any]]] = {}
    for e in executions:
        by_step.setdefault(e["step"], []).append(e)
    bin_width = span / TIMELINE_BINS
    parts.extend(_phase_row(view["run"], scale))
    for row, s in enumerate(steps, start=1):
        y = 24 + row * _TL_ROW
        parts.append(
            f'<text class="rowlabel" x="{_TL_LABEL - 8}" y="{y + 17}" text-anchor="end">'
            f"{_e(_clip(s['step'], 20))}</text>"
        )
        first, last = s["first"] or 0.0, s["last"] or 0.0
        parts.append(
            f'<rect class="span" x="{_TL_LABEL + first * scale:.1f}" y="{y + 4}" '
            f'width="{max((last - first) * scale, 2):.1f}" height="{_TL_ROW - 8}" rx="3">'
            f"<title>{_e(s['step'])}: {_duration(first)} {_DASH} {_duration(last)}</title></rect>"
        )
        bins: dict[tuple[int, str], int] = {}
        for e in by_step.get(s["step"], []):
            key = "failed" if e["failed"] else e["stage"]
            index = min(int(e["at"] / bin_width), TIMELINE_BINS - 1)
            bins[(index, key)] = bins.get((index, key), 0) + 1
        peak = max(bins.values(), default=1)
        for (index, key), n in sorted(bins.items()):
            h = max(3.0, (_TL_ROW - 10) * n / peak)
            x = _TL_LABEL + index * bin_width * scale
            cls = "st-failed" if key == "failed" else _STAGE_CLASS.get(key, "st-extract")
            label = f"{key} {_TIMES}{n}"
            parts.append(
                f'<rect class="exec {cls}" x="{x:.1f}" y="{y + _TL_ROW - 5 - h:.1f}" '
                f'width="{max(bin_width * scale - 0.5, 1.5):.1f}" height="{h:.1f}">'
                f"<title>{_e(s['step'])}: {_e(label)} at "
                f"{_duration(index * bin_width)}{_DASH}{_duration((index + 1) * bin_width)}"
                "</title></rect>"
            )
    legend = " ".join(
        f'<span class="legend-item"><span class="chip {cls}"></span>{name}</span>'
        for name, cls in (*_STAGE_CLASS.items(), ("failed", "st-failed"))
    )
    return (
        f'<div class="legend">{legend}</div><div class="scroll">'
        f'<svg class="timeline" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="timeline">'
        f"{''.join(parts)}</svg></div>"
    )


def _phase_row(run: dict[str, Any], scale: float) -> list[str]:
    """The run's own row: resolution, execution, then outputs and terminalization."""
    phases = run["phases"]
    end = phases["terminated"] if phases["terminated"] is not None else run["duration"]
    if end is None:
        return []
    marks = [0.0, phases["execution"], phases["outputs"], end]
    names = ("allocation and resolution", "execution", "outputs and terminalization")
    y = 24
    parts = [
        f'<text class="rowlabel run" x="{_TL_LABEL - 8}" y="{y + 17}" text-anchor="end">run</text>'
    ]
    for i, name in enumerate(names):
        start, stop = marks[i], next((m for m in marks[i + 1 :] if m is not None), None)
        if start is None or stop is None:
            continue
        parts.append(
            f'<rect class="phase ph{i}" x="{_TL_LABEL + start * scale:.1f}" y="{y + 6}" '
            f'width="{max((stop - start) * scale, 1.5):.1f}" height="{_TL_ROW - 12}" rx="3">'
            f"<title>{name}: {_duration(start)} {_DASH} {_duration(stop)}</title></rect>"
        )
    return parts


def _timeline_note() -> str:
    return (
        "Time since the run was allocated, from the journal's event times. The run row "
        "shows resolution, execution, then outputs and terminalization; a step's bar spans "
        "its events, and the marks are its stage executions (module calls), binned, their "
        "height the number in each bin."
    )


# --- tables ------------------------------------------------------------------------


def _table(head: Iterable[str], rows: list[str], cls: str = "") -> str:
    th = "".join(f"<th>{h}</th>" for h in head)
    return (
        f'<div class="tablebox {cls}"><table><thead><tr>{th}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _reasons(view: dict[str, Any]) -> str:
    decisions = view["decisions"]
    if not decisions:
        return '<p class="empty">No stage decisions were recorded.</p>'
    peak = max(decisions.values())
    rows = []
    for code, n in sorted(decisions.items(), key=lambda kv: (-kv[1], kv[0])):
        category = view["categories"].get(code) or _category_of(code)
        rows.append(
            f'<tr><td><code>{_e(code)}</code></td><td><span class="chip c-{_e(category)}">'
            f'</span>{_e(category)}</td><td class="n">{_num(n)}</td>'
            f'<td class="barcell"><span class="bar c-{_e(category)}" '
            f'style="width:{100 * n / peak:.1f}%"></span></td>'
            f"<td>{_e(_description(code))}</td></tr>"
        )
    plans = ", ".join(f"{_e(k)} {_num(v)}" for k, v in view["plans"].items()) or "none"
    return _table(("code", "category", "count", "", "what it means"), rows) + (
        f'<p class="note">Chunk plans: {plans}.</p>'
    )


def _failures(view: dict[str, Any]) -> str:
    items = []
    error = view["run"]["error"]
    if error:
        items.append(f'<li class="primary"><b>run error</b>: {_error_text(error)}</li>')
    for f in view["failures"]:
        chunk = f" chunk <code>{_e(f['chunk'][:12])}</code>" if f["chunk"] else ""
        items.append(
            f"<li>step <b>{_e(f['step'])}</b> lane <b>{_e(f['lane'])}</b> "
            f"{_e(f['stage'])}{chunk} <code>{_e(f['reason_code'])}</code>: "
            f'<span class="msg">{_e(f["message"])}</span></li>'
        )
    if view["validation"]:
        for r in view["validation"]["refused"]:
            items.append(
                f"<li>output name <code>{_e(r['name'])}</code> refused: {_e(r['refusal'])}</li>"
            )
    for f in view["checkpoint_write_failures"]:
        items.append(
            f"<li>checkpoint not written: step <b>{_e(f['step'])}</b> lane "
            f"<b>{_e(f['lane'])}</b> {_e(f['stage'])}: {_e(f['message'])}</li>"
        )
    for f in view["persistence_failures"]:
        items.append(f"<li>not persisted: {_e(f['target'])}: {_e(f['message'])}</li>")
    if not items:
        return '<p class="empty">None.</p>'
    return f'<ul class="failures">{"".join(items)}</ul>'


def _warnings(view: dict[str, Any]) -> str:
    warnings = view["warnings"]
    if not warnings:
        return '<p class="empty">None.</p>'
    rows = [
        f"<tr><td>{_e(w['step'])}</td><td>{_e(w['lane'])}</td>"
        f'<td class="msg">{_e(w["message"])}</td></tr>'
        for w in warnings
    ]
    return _table(("step", "lane", "message"), rows, "tall")


def _outputs(view: dict[str, Any]) -> str:
    outputs = view["outputs"]
    validation = view["validation"]
    checked = (
        f"{_num(validation['checked'])} output name(s) checked, "
        f"{_num(len(validation['refused']))} refused."
        if validation
        else "The outputs were not validated (the run ended before)."
    )
    if not outputs:
        return f'<p class="empty">No outputs were written. {checked}</p>'
    run_dir = view["run"]["roots"]["run_dir"] or ""
    rows = []
    for o in outputs:
        path = f"{run_dir}/{o['name']}" if run_dir.startswith("/") else None
        rows.append(
            f'<tr><td>{_link(path, o["name"])}</td><td class="n" '
            f'title="{_num(o["size"])} bytes">{_size(o["size"])}</td>'
            f'<td class="digest">{_e(o["sha256"])}</td></tr>'
        )
    total = sum(o["size"] for o in outputs)
    return _table(("name", "size", "sha256"), rows, "tall") + (
        f'<p class="note">{_num(len(outputs))} files, {_size(total)}. {checked}</p>'
    )


def _details(view: dict[str, Any]) -> str:
    run = view["run"]
    roots = run["roots"]
    bundle = run["debug_bundle"]
    if bundle:
        kind = "summary and trace" if bundle["trace"] else "summary"
        debug = f"{_link(bundle['path'])} ({kind})"
    else:
        debug = "none (run without --debug)"
    command = shlex.join(run["argv"]) if run["argv"] else "—"
    sources = view["inputs"]["sources"]
    references = view["inputs"]["references"]
    refs = (
        ", ".join(f"{_e(r['name'])} ({_size(r['size'])})" for r in references)
        if references
        else "none"
    )
    profiles = [
        f"{_e(s['step'])}: {_e(s['profile']['profile_id'])} "
        f"({_e(s['profile']['provider'])}/{_e(s['profile']['model'])})"
        for s in view["steps"]
        if s["profile"]
    ]
    rows = [
        ("run id", f"<code>{_e(run['run_id'])}</code>"),
        (
            "status",
            f"{_e(run['status'])}" + (f" (phase {_e(run['phase'])})" if run["phase"] else ""),
        ),
        ("pipeline", f"{_e(run['pipeline'])} — {_link(run['pipeline_file'])}"),
        ("command", f"<code>runjournal {_e(command)}</code>"),
        ("tool version", _e(run["tool_version"])),
        ("host, pid", f"{_e(run['host'] or '—')}, {_e(run['pid'] or '—')}"),
        ("invocation identity", f'<span class="digest">{_e(run["invocation_identity"])}</span>'),
        ("run directory", _link(roots["run_dir"])),
        ("output root", _link(roots["output"])),
        ("cache root", _link(roots["cache"])),
        ("workspace", _link(roots["workspace"]) if roots["workspace"] else "none (no checkpoints)"),
        ("debug bundle", debug),
        ("inputs", f"{_num(len(sources))} sources, {_size(sum(s['size'] for s in sources))}"),
        ("references", refs),
        ("LLM profiles", "; ".join(profiles) if profiles else "none observed"),
    ]
    table = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    settings = "".join(
        f"<tr><td><code>{_e(s['name'])}</code></td><td>{_e(_setting_value(s['value']))}</td>"
        f"<td>{_e(s['origin'])}</td></tr>"
        for s in view["settings"]
    )
    source_rows = "".join(
        f'<tr><td>{_e(s["name"])}</td><td class="n">{_size(s["size"])}</td>'
        f'<td class="digest">{_e(s["sha256"])}</td></tr>'
        for s in sources
    )
    return (
        f'<div class="tablebox"><table class="kv">{table}</table></div>'
        f"<details><summary>Effective configuration ({_num(len(view['settings']))} settings)"
        f"</summary>{_table(('setting', 'value', 'origin'), [settings])}</details>"
        f"<details><summary>Sources ({_num(len(sources))})</summary>"
        f"{_table(('source', 'size', 'sha256'), [source_rows], 'tall')}</details>"
    )


def _setting_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


_CSS = """
:root{--fg:#1d2330;--muted:#5d6677;--line:#dde1e8;--bg:#f4f6f9;--card:#fff;
--reuse:#2f9e62;--reuse-bg:#dcf3e6;--execution:#4f6fd1;--execution-bg:#e1e8fb;
--miss:#d49a12;--miss-bg:#fbf0d2;--invalid:#e0702b;--invalid-bg:#fde5d6;
--corrupt:#8a55d4;--corrupt-bg:#ece2fa;--forced:#1f8fb3;--forced-bg:#d8eff7;
--predecessor_failure:#b8480f;--predecessor_failure-bg:#f9dccb;
--failure:#cf3434;--failure-bg:#fadcdc;--none:#9aa3b2;--none-bg:#eef0f4}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",
"DejaVu Sans",sans-serif;color:var(--fg);background:var(--bg)}
code,.digest{font-family:ui-monospace,"SFMono-Regular","DejaVu Sans Mono",Menlo,monospace;
font-size:12.5px}
.digest{color:var(--muted);word-break:break-all}
a{color:#2457c5;text-decoration:none}a:hover{text-decoration:underline}
header.top{display:flex;align-items:center;gap:22px;padding:18px 28px;background:#1e2533;
color:#fff;flex-wrap:wrap}
header.top h1{margin:0;font-size:22px;font-weight:650;letter-spacing:.2px}
header.top .runid{color:#b9c2d3;font-size:13px}header.top code{color:#dfe6f3}
.status{padding:6px 14px;border-radius:999px;font-weight:700;text-transform:uppercase;
font-size:13px;letter-spacing:.6px}
.status.ok{background:var(--reuse)}.status.bad{background:var(--failure)}
.status.warn{background:var(--miss);color:#1d2330}.status.idle{background:#6b7385}
.times{display:flex;gap:22px;margin:0 0 0 auto}.times div{display:flex;flex-direction:column}
.times dt{font-size:11px;text-transform:uppercase;color:#9aa6ba;letter-spacing:.5px}
.times dd{margin:0;font-size:13px}
.facts{padding:6px 28px 8px;background:#262e3e;color:#aeb8ca;font-size:12.5px}
.facts a{color:#cfe0ff}.facts .digest{color:#dfe6f3}
.error-line{margin:0;padding:10px 28px;background:var(--failure-bg);color:#7a1717;
border-bottom:1px solid #f0b7b7}
nav{position:sticky;top:0;z-index:2;display:flex;gap:4px;padding:6px 24px;background:#fff;
border-bottom:1px solid var(--line);flex-wrap:wrap}
.navlink{padding:5px 10px;border-radius:6px;color:var(--fg)}
.navlink:hover{background:var(--bg);text-decoration:none}
.badge{display:inline-block;min-width:18px;padding:0 6px;border-radius:9px;
background:var(--none-bg);color:var(--muted);font-size:11.5px;text-align:center}
.navlink.hot .badge{background:var(--failure);color:#fff}
main{max-width:1320px;margin:0 auto;padding:8px 24px 24px}
section{background:var(--card);border:1px solid var(--line);border-radius:10px;
padding:14px 18px 16px;margin:16px 0}
section#summary{background:none;border:0;padding:0}
h2{margin:0 0 6px;font-size:16px;font-weight:650}
.note{margin:0 0 10px;color:var(--muted);font-size:12.5px}
.empty{color:var(--muted);margin:4px 0}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(140px,1fr));gap:10px}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:10px 14px}
.card .k{font-size:11.5px;text-transform:uppercase;letter-spacing:.5px;color:var(--muted)}
.card .v{font-size:24px;font-weight:650;margin:2px 0}.card .v.small{font-size:16px}
.card .s{font-size:12.5px;color:var(--muted)}
.bigbar{display:flex;height:14px;border-radius:7px;overflow:hidden;margin:14px 0 6px;
background:var(--none-bg)}
.seg{display:block;min-width:2px;background:var(--c)}
.legend{color:var(--muted);font-size:12.5px;margin:4px 0 10px}
.legend-item{display:inline-flex;align-items:center;margin-right:14px;white-space:nowrap}
.chip{display:inline-block;width:11px;height:11px;border-radius:3px;margin-right:5px;
vertical-align:-1px;background:var(--c)}
.c-reuse{--c:var(--reuse);--cb:var(--reuse-bg)}
.c-execution{--c:var(--execution);--cb:var(--execution-bg)}
.c-miss{--c:var(--miss);--cb:var(--miss-bg)}.c-invalid{--c:var(--invalid);--cb:var(--invalid-bg)}
.c-corrupt{--c:var(--corrupt);--cb:var(--corrupt-bg)}
.c-forced{--c:var(--forced);--cb:var(--forced-bg)}
.c-predecessor_failure{--c:var(--predecessor_failure);--cb:var(--predecessor_failure-bg)}
.c-failure{--c:var(--failure);--cb:var(--failure-bg)}.c-none{--c:var(--none);--cb:var(--none-bg)}
.scroll{overflow-x:auto}
svg text{font-family:inherit}
.step-graph .box{fill:#fff;stroke:var(--c);stroke-width:1.8}
.step-graph .node:hover .box{fill:var(--cb)}
.step-graph .nodebar{fill:var(--c);stroke:none}
.step-graph .name{font-weight:650;font-size:14px;fill:var(--fg)}
.step-graph .meta{font-size:11.5px;fill:var(--muted)}
.step-graph .edge{fill:none;stroke:#8b95a7;stroke-width:1.6}
.step-graph .arrowhead{fill:#8b95a7}
.matrix{display:grid;gap:3px;align-items:stretch;margin-bottom:3px}
.corner,.colhead{font-size:12px;font-weight:650;color:var(--muted);padding:4px 6px;
white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.colhead{text-align:center;color:var(--fg);border-bottom:2px solid var(--line)}
.lane{font-size:12.5px;padding:5px 6px;white-space:nowrap;overflow:hidden;
text-overflow:ellipsis;align-self:center}
.cell{background:var(--cb);border-left:4px solid var(--c);border-radius:4px;padding:3px 7px;
min-height:36px;overflow:hidden;cursor:default}
.cell:hover{outline:2px solid var(--c);outline-offset:-1px}
.cell .code{display:block;font-size:12px;font-weight:600;white-space:nowrap;overflow:hidden;
text-overflow:ellipsis}
.cell .sub{display:block;font-size:11px;color:var(--muted);white-space:nowrap;overflow:hidden;
text-overflow:ellipsis}
.na{background:repeating-linear-gradient(45deg,#f7f8fa,#f7f8fa 5px,#eff1f4 5px,#eff1f4 10px);
border-radius:4px;min-height:36px}
details.group{border-top:1px solid var(--line);padding:2px 0}
details.group>summary{list-style:none;cursor:pointer}
details.group>summary::-webkit-details-marker{display:none}
details.group[open] .grouplabel{font-weight:650}
.aggregate{display:flex;flex-direction:column;justify-content:center;padding:2px 4px;
min-width:0}
.aggregate .sub{font-size:11px;font-weight:400;color:var(--muted);white-space:nowrap;
overflow:hidden;
text-overflow:ellipsis;margin-top:2px}
.minibar{display:flex;width:100%;height:10px;border-radius:5px;overflow:hidden}
.timeline .tick{stroke:#e6e9ee}.timeline .axis{font-size:11px;fill:var(--muted)}
.timeline .rowlabel{font-size:12.5px;fill:var(--fg)}
.timeline .span{fill:#e3e8f1}.timeline .rowlabel.run{font-weight:650}
.timeline .ph0{fill:#d5d9e1}.timeline .ph1{fill:#c9d6f5}.timeline .ph2{fill:#cdebd9}
.st-extract{--c:#4f6fd1;fill:#4f6fd1}.st-merge{--c:#1f8fb3;fill:#1f8fb3}
.st-normalize{--c:#8a55d4;fill:#8a55d4}.st-failed{--c:var(--failure);fill:var(--failure)}
.tablebox{overflow:auto}.tablebox.tall{max-height:420px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid var(--line);vertical-align:top}
thead th{position:sticky;top:0;background:#f8f9fb;font-size:12px;color:var(--muted);
font-weight:650}
td.n{text-align:right;white-space:nowrap}
table.kv th{width:170px;color:var(--muted);font-weight:600}
.barcell{width:22%}.bar{display:block;height:10px;border-radius:5px;background:var(--c)}
.msg{white-space:pre-wrap;word-break:break-word}
ul.failures{margin:4px 0;padding-left:20px}ul.failures li{margin:4px 0}
ul.failures li.primary{color:#7a1717}
details>summary{cursor:pointer;margin:10px 0 4px;font-weight:600}
footer{max-width:1320px;margin:0 auto;padding:4px 24px 28px;color:var(--muted);font-size:12px}
"""
