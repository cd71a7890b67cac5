"""The fleet table as a static HTML page of its own (fleet.html): no script, every text escaped.

The nightly history's plots (`history_view`) follow the table.
"""

from __future__ import annotations

from html import escape

from dra_conformance.report.fleet import cells
from dra_conformance.report.fleet.merge import ClusterRow, Fleet

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.5em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td:first-child { white-space: nowrap; }
tr.disagrees td:first-child { border-left: 4px solid #c60; }
td.verdict-passing { background: #e6f4e6; }
td.verdict-failing { background: #fbe3e3; }
td.verdict-incomplete { background: #fff4d6; }
td.verdict-stale { background: #e8e8e8; color: #555; }
.disagreements { border-left: 4px solid #c60; padding-left: 1em; }
"""
# The verdict cell's class (a fixed word, never taken from the input).
PASSING = ("certified", "certified with advisories")


def verdict_class(row: ClusterRow) -> str:
    """The CSS class of the row's verdict cell: stale outranks whatever the stale result was."""
    if row.stale:
        return "verdict-stale"
    if row.run.verdict in PASSING:
        return "verdict-passing"
    return "verdict-failing" if row.run.verdict == "not certified" else "verdict-incomplete"


def render_page(fleet: Fleet, history: str = "", history_style: str = "") -> str:
    """The whole page; `history` is the nightly history's section (already HTML, every text in it escaped)."""
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8"><title>Fleet report</title>',
        f"<style>{STYLE}{history_style}</style></head><body>",
        "<h1>Fleet report</h1>",
        f"<p>{escape(cells.headline(fleet))}</p>",
    ]
    if fleet.disagreements:
        parts += ['<section class="disagreements">', f"<p><strong>{escape(cells.DISAGREEMENT_LINE)}</strong></p>"]
        parts += ["<ul>", *(f"<li>{escape(cells.disagreement(found))}</li>" for found in fleet.disagreements), "</ul>"]
        parts.append("</section>")
    parts += ["<table>", "<thead><tr>", *(f"<th>{escape(name)}</th>" for name in cells.COLUMNS), "</tr></thead>"]
    parts += ["<tbody>", *(_row(row) for row in fleet.rows), "</tbody>", "</table>"]
    parts += [f"<p>{escape(note)}</p>" for note in cells.notes(fleet)]
    if history:
        parts.append(history)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _row(row: ClusterRow) -> str:
    classes = " ".join(name for name, on in (("stale", row.stale), ("disagrees", row.disagrees)) if on)
    texts = cells.row_cells(row)
    verdict_at = cells.COLUMNS.index("verdict")
    tds = [
        f'<td class="{verdict_class(row)}">{escape(text)}</td>' if index == verdict_at else f"<td>{escape(text)}</td>"
        for index, text in enumerate(texts)
    ]
    opening = f'<tr class="{classes}">' if classes else "<tr>"
    return opening + "".join(tds) + "</tr>"
