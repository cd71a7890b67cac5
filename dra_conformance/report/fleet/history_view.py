"""The history's section of fleet.html, per cluster and driver.

The canary window, the verdict timeline, a plot per figure (inline SVG from `svg`), and what regressed on the newest
night.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from dra_conformance.report.fleet import svg
from dra_conformance.report.fleet.trend import METRICS, Regression, Series, canary_window, first_over

STYLE = """
section.history { margin-top: 2em; }
section.series { border-top: 1px solid #ccc; margin-top: 1.5em; padding-top: 0.5em; }
p.regressed { color: #900; font-weight: bold; border-left: 4px solid #c00; padding-left: 0.6em; }
p.window { color: #234; }
div.plots { display: flex; flex-wrap: wrap; gap: 0.4em 1em; }
svg.timeline { display: block; margin: 0.3em 0; }
"""


def render_history(series: Sequence[Series], regressions: Sequence[Regression], scope: str) -> str:
    """The section: `scope` says which nights it holds (all, or since when) and where the history is kept."""
    regressed = {(r.series.cluster, r.series.driver): r for r in regressions}
    parts = ['<section class="history">', "<h2>Nightly history</h2>", f"<p>{escape(scope)}</p>"]
    if not series:
        parts.append("<p>No nights in the history for this period.</p>")
    # Series whose newest night regressed first, then by cluster and driver.
    for one in sorted(series, key=lambda s: ((s.cluster, s.driver) not in regressed, s.cluster, s.driver)):
        parts.append(_series(one, regressed.get((one.cluster, one.driver))))
    parts.append("</section>")
    return "\n".join(parts)


def _series(one: Series, found: Regression | None) -> str:
    start, end = svg.time_range(one.nights)
    nights = len(one.nights)
    parts = [
        '<section class="series">',
        f"<h3>{escape(one.cluster)} · {escape(one.driver)}</h3>",
        f"<p>{nights} night{'s' if nights != 1 else ''}, "
        f"{escape(one.nights[0].finished_at.strftime('%Y-%m-%d'))} to "
        f"{escape(one.nights[-1].finished_at.strftime('%Y-%m-%d'))}.</p>",
        f'<p class="window">Canary window: {escape(canary_window(one.nights))}.</p>',
    ]
    if found is not None:
        parts.append(f'<p class="regressed">Newest night regressed: {escape("; ".join(found.reasons))}</p>')
    left = [
        f"{metric.label} on {one.nights[marks[-1]].finished_at.strftime('%Y-%m-%d')}"
        for metric in METRICS
        if (marks := first_over(metric, one.nights))
    ]
    if left:
        parts.append(f"<p>Last left its threshold: {escape(', '.join(left))}.</p>")
    parts.append(svg.timeline(one.nights, start, end, regressed=found is not None))
    parts += ['<div class="plots">', *(svg.plot(metric, one.nights, start, end) for metric in METRICS), "</div>"]
    parts.append("</section>")
    return "\n".join(parts)
