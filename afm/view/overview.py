"""Overview blocks (what the page's "Runs" section shows for each source) and the page's no-JavaScript summary.

A block is a dict with a ``title`` and one of ``lines`` (strings), ``table`` (``head`` + ``rows``) or ``chart``
(``x`` and named ``series`` of ``y``). The page's script draws them; :func:`noscript_html` writes the same blocks
and the first rows of the table as plain HTML for a browser without JavaScript. Every string is escaped here:
trajectory text is data, never markup.
"""

from __future__ import annotations

from collections import Counter
from html import escape
from typing import Any

from afm.view.samples import TOOL_STATUS_BITS, Source

NOSCRIPT_ROWS = 300


def count_blocks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Counts every source gets: samples by status and failure kind, finish reason, correctness, tool-call status."""
    status = Counter(r.get("st") or "ok" for r in rows)
    failure = Counter(r["fail"] for r in rows if r.get("fail"))
    finish = Counter(str(r["fin"]) for r in rows if r.get("fin"))
    scored = [r["acc"] for r in rows if r.get("acc") is not None]
    tools = Counter(name for r in rows if r.get("ts") for name, bit in TOOL_STATUS_BITS.items() if r["ts"] & bit)
    table = [["samples", len(rows)], ["by status", _counts(status)]]
    if failure:
        table.append(["failed, by kind", _counts(failure)])
    if finish:
        table.append(["by finish reason", _counts(finish)])
    if scored:
        right = sum(1 for a in scored if a >= 0.5)
        table.append(["correct (acc ≥ 0.5) / scored", f"{right} / {len(scored)}"])
    if tools:
        table.append(["samples with a tool call that was …", _counts(tools)])
    return [{"title": "Counts", "table": {"head": ["what", "counts"], "rows": table}}]


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in counter.most_common())


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def block_html(block: dict[str, Any]) -> str:
    """One overview block as escaped HTML."""
    out = [f"<h3>{escape(str(block.get('title', '')))}</h3>"]
    for line in block.get("lines") or []:
        out.append(f"<p>{escape(str(line))}</p>")
    table = block.get("table")
    chart = block.get("chart")
    if chart:  # without a script, a chart is its table of values
        head = [chart.get("xlabel", "x"), *(s["name"] for s in chart["series"])]
        rows = [[x, *(s["y"][i] for s in chart["series"])] for i, x in enumerate(chart["x"])]
        table = {"head": head, "rows": rows}
    if table:
        out.append("<table><tr>" + "".join(f"<th>{escape(str(h))}</th>" for h in table["head"]) + "</tr>")
        for row in table["rows"]:
            out.append("<tr>" + "".join(f"<td>{escape(_cell(c))}</td>" for c in row) + "</tr>")
        out.append("</table>")
    return "\n".join(out)


def noscript_html(title: str, sources: list[Source], blocks: list[list[dict[str, Any]]],
                  rows: list[dict[str, Any]]) -> str:
    """The page without JavaScript: each source's overview, then the first :data:`NOSCRIPT_ROWS` samples."""
    out = ['<div class="noscript">', f"<h1>{escape(title)}</h1>",
           "<p>JavaScript is off: this is a summary. Turn it on to filter, sort and read the trajectories.</p>"]
    for source, source_blocks in zip(sources, blocks, strict=True):
        out.append(f"<h2>{escape(source.label)} ({escape(source.kind)}: {escape(source.path)})</h2>")
        out += [block_html(b) for b in source_blocks]
    shown = rows[:NOSCRIPT_ROWS]
    out.append(f"<h2>Samples (the first {len(shown)} of {len(rows)})</h2>")
    head = ["run", "benchmark", "id", "question", "gold", "prediction", "acc", "turns", "tool calls", "tokens",
            "wall s", "status"]
    out.append('<table class="samples"><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr>")
    for r in shown:
        cells = [sources[r["src"]].label, r.get("bench"), f"{r.get('qid')} #{r.get('k')}", r.get("q"), r.get("gold"),
                 r.get("pred"), r.get("acc"), r.get("turns"), r.get("calls"), r.get("tok"), r.get("wall"),
                 r.get("st")]
        out.append("<tr>" + "".join(f"<td>{escape(_cell(c))}</td>" for c in cells) + "</tr>")
    out += ["</table>", "</div>"]
    return "\n".join(out)
