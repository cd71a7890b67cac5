"""`dra-conformance report --fleet`: read the inputs, build the table, keep the history, print, write its files.

The history (`history`) keeps every run read, across invocations, in a SQLite file by default (`DEFAULT_HISTORY`
under the reports dir) or in a PostgreSQL database many CI runners share (`--history postgresql://...`). The exit
code is EXIT_REGRESSED when the newest night of a cluster that is not stale regressed (`trend.regression`), with
one line on stderr saying what regressed, so a CI job can page.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from dra_conformance.report.fleet.document import fleet_document
from dra_conformance.report.fleet.durations import spell_duration
from dra_conformance.report.fleet.history import open_history, redacted
from dra_conformance.report.fleet.history_view import STYLE as HISTORY_STYLE
from dra_conformance.report.fleet.history_view import render_history
from dra_conformance.report.fleet.markdown import render_markdown
from dra_conformance.report.fleet.merge import Fleet, build_fleet
from dra_conformance.report.fleet.nights import Night, night_of
from dra_conformance.report.fleet.page import render_page
from dra_conformance.report.fleet.runs import run_of
from dra_conformance.report.fleet.sources import FleetInputError, read_inputs
from dra_conformance.report.fleet.trend import Regression, regression, series_of

FLEET_MARKDOWN = "fleet.md"
FLEET_JSON = "fleet.json"
FLEET_HTML = "fleet.html"
# The history's default file, under the reports dir (`--reports-dir`, else reports/).
DEFAULT_HISTORY = "fleet-history.sqlite3"
EXIT_OK = 0
# The newest night of a cluster regressed (verdict worse than the night before, or a figure newly over its
# threshold). Apart from 1 (a failed run) and 2 (a usage error), so a CI job can page on this one alone.
EXIT_REGRESSED = 3


@dataclass(frozen=True)
class HistoryView:
    """What the history adds to the report: the page's section and the newest nights that regressed."""

    section: str
    regressions: tuple[Regression, ...]
    new_runs: int
    stored: int


def load_fleet(inputs: Sequence[Path], now: datetime, stale_after: timedelta) -> Fleet:
    """The fleet table of every run under `inputs`; bad input raises FleetInputError (one line)."""
    fleet, _ = _read(inputs, now, stale_after)
    return fleet


def _read(inputs: Sequence[Path], now: datetime, stale_after: timedelta) -> tuple[Fleet, list[Night]]:
    found = read_inputs(inputs)
    pairs = [(summary, run_of(summary)) for summary in found.summaries]
    fleet = build_fleet([run for _, run in pairs], now, stale_after, found.skipped)
    return fleet, [night_of(summary, run) for summary, run in pairs]


def keep_history(
    nights: Sequence[Night], location: str, since: timedelta | None, now: datetime, stale_after: timedelta
) -> HistoryView:
    """Ingest `nights` into the history at `location`, read back the period, judge the newest night of each series.

    A series whose newest night is older than `stale_after` is not judged: the fleet table already shows it stale,
    and its last regression is no news to page on.
    """
    history = open_history(location)
    try:
        new = history.ingest(nights)
        stored = history.nights(now - since if since is not None else None)
    finally:
        history.close()
    series = series_of(stored)
    regressions = tuple(
        found
        for one in series
        if now - one.nights[-1].finished_at <= stale_after and (found := regression(one)) is not None
    )
    period = f"the last {spell_duration(since)}" if since is not None else "every night stored"
    scope = (
        f"{period.capitalize()}: {len(stored)} night{'s' if len(stored) != 1 else ''} of {len(series)} "
        f"cluster{'s' if len(series) != 1 else ''} and driver{'s' if len(series) != 1 else ''}, from the history "
        f"{redacted(location)}. Gaps are nights without the figure; dashed red is the threshold the night was judged "
        "by, dashed grey the device-plugin baseline; a ring marks the night a figure left its threshold; the shaded "
        "band is the canary window."
    )
    return HistoryView(render_history(series, regressions, scope), regressions, new, len(stored))


def write_fleet(fleet: Fleet, output: Path, history: HistoryView | None = None) -> list[Path]:
    """Write fleet.md, fleet.json and fleet.html (with the history's plots) into `output` (created); their paths."""
    page = render_page(fleet, history.section, HISTORY_STYLE) if history is not None else render_page(fleet)
    files = {
        FLEET_MARKDOWN: render_markdown(fleet),
        FLEET_JSON: json.dumps(fleet_document(fleet), indent=2) + "\n",
        FLEET_HTML: page,
    }
    try:
        output.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (output / name).write_text(text, encoding="utf-8")
    except OSError as error:
        raise FleetInputError(f"--output {output}: cannot write: {error.strerror or error}") from None
    return [output / name for name in files]


def regression_line(regressions: Sequence[Regression]) -> str:
    """The one line a paging CI job shows: 'regressed: <cluster> <driver> <day> (<run>): <what> | <next>'."""
    return "regressed: " + " | ".join(found.line() for found in regressions)


def fleet_command(
    inputs: Sequence[Path],
    stale_after: timedelta,
    output: Path | None,
    now: datetime,
    echo: Callable[[str], None],
    note: Callable[[str], None],
    history: str | None = None,
    since: timedelta | None = None,
) -> int:
    """Print the fleet table as Markdown (`echo`); with `output`, also write its three files there (`note` says so).

    With `history` (a SQLite file or a postgresql:// URL), keep every run read there and plot the nights (since
    `since` ago) in fleet.html; return EXIT_REGRESSED when a newest night regressed, else EXIT_OK.
    """
    fleet, nights = _read(inputs, now, stale_after)
    view = keep_history(nights, history, since, now, stale_after) if history is not None else None
    echo(render_markdown(fleet).rstrip("\n"))
    if output is not None:
        for path in write_fleet(fleet, output, view):
            note(f"wrote {path}")
    if view is None:
        return EXIT_OK
    note(f"history {redacted(history or '')}: {view.new_runs} new run(s) stored, {view.stored} night(s) shown")
    if view.regressions:
        note(regression_line(view.regressions))
        return EXIT_REGRESSED
    return EXIT_OK
