"""The fleet table as Markdown (stdout and fleet.md)."""

from __future__ import annotations

from dra_conformance.report.fleet import cells
from dra_conformance.report.fleet.merge import Fleet


def cell(text: str) -> str:
    """Text safe in a Markdown table cell: one line, pipes escaped, no HTML a renderer would interpret."""
    flat = " ".join(text.split())
    return flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def render_markdown(fleet: Fleet) -> str:
    """The whole report: headline, disagreements first, the table, notes."""
    lines = ["# Fleet report", "", cell(cells.headline(fleet)), ""]
    if fleet.disagreements:
        lines += [f"**{cells.DISAGREEMENT_LINE}**", ""]
        lines += [f"- {cell(cells.disagreement(found))}" for found in fleet.disagreements]
        lines.append("")
    lines += [
        "| " + " | ".join(cells.COLUMNS) + " |",
        "|" + "---|" * len(cells.COLUMNS),
        *("| " + " | ".join(cell(text) for text in cells.row_cells(row)) + " |" for row in fleet.rows),
    ]
    notes = cells.notes(fleet)
    if notes:
        lines += ["", *(cell(note) for note in notes)]
    return "\n".join(lines) + "\n"
