"""`dra-conformance report --fleet`: read the inputs, build the table, print its Markdown, write its files."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path

from dra_conformance.report.fleet.document import fleet_document
from dra_conformance.report.fleet.markdown import render_markdown
from dra_conformance.report.fleet.merge import Fleet, build_fleet
from dra_conformance.report.fleet.page import render_page
from dra_conformance.report.fleet.runs import run_of
from dra_conformance.report.fleet.sources import FleetInputError, read_inputs

FLEET_MARKDOWN = "fleet.md"
FLEET_JSON = "fleet.json"
FLEET_HTML = "fleet.html"


def load_fleet(inputs: Sequence[Path], now: datetime, stale_after: timedelta) -> Fleet:
    """The fleet table of every run under `inputs`; bad input raises FleetInputError (one line)."""
    found = read_inputs(inputs)
    return build_fleet([run_of(summary) for summary in found.summaries], now, stale_after, found.skipped)


def write_fleet(fleet: Fleet, output: Path) -> list[Path]:
    """Write fleet.md, fleet.json and fleet.html into `output` (created); return their paths."""
    files = {
        FLEET_MARKDOWN: render_markdown(fleet),
        FLEET_JSON: json.dumps(fleet_document(fleet), indent=2) + "\n",
        FLEET_HTML: render_page(fleet),
    }
    try:
        output.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (output / name).write_text(text, encoding="utf-8")
    except OSError as error:
        raise FleetInputError(f"--output {output}: cannot write: {error.strerror or error}") from None
    return [output / name for name in files]


def fleet_command(
    inputs: Sequence[Path],
    stale_after: timedelta,
    output: Path | None,
    now: datetime,
    echo: Callable[[str], None],
    note: Callable[[str], None],
) -> None:
    """Print the fleet table as Markdown (`echo`); with `output`, also write its three files there (`note` says so)."""
    fleet = load_fleet(inputs, now, stale_after)
    echo(render_markdown(fleet).rstrip("\n"))
    if output is not None:
        for path in write_fleet(fleet, output):
            note(f"wrote {path}")
