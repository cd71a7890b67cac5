"""The history's plots as inline SVG, written by hand on the server: no script, no JavaScript build, every text escaped.

One plot per figure and series: the nights on a time axis, a line through consecutive nights that have the figure
(a night without it leaves a gap and a grey tick on the axis, never a zero), the threshold each night was judged
by (dashed red), the device-plugin baseline where one was measured (dashed grey), points over the threshold in red,
and the first night of each excursion ringed and labelled. The canary window (the last 14 days up to the newest
night) is shaded. The verdict timeline is one coloured cell per night.

Element classes are part of the output's structure (the tests read them): `series` (a polyline through consecutive
nights with the figure), `threshold`, `baseline`, `point` (with `over` when over the threshold), `gap`,
`first-over`, `canary-window`, and `verdict` cells with their verdict class.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from html import escape

from dra_conformance.report.fleet.nights import Night
from dra_conformance.report.fleet.trend import CANARY_WINDOW_NIGHTS, PASSING_VERDICTS, Metric, first_over, over

# Three plots side by side on a 1400-pixel-wide window.
WIDTH, HEIGHT = 420, 150
LEFT, RIGHT, TOP, BOTTOM = 50, 12, 22, 28
TIMELINE_HEIGHT = 46
POINT_RADIUS = 3.5
MARK_RADIUS = 7.5
# Dates on a time axis at most (a date label is about 30 pixels wide).
LABELS = 7
# Room above the highest value or limit, so a point on the threshold is not drawn on the frame.
HEADROOM = 1.15


def _x(moment: datetime, start: datetime, end: datetime) -> float:
    span = max((end - start).total_seconds(), 1.0)
    return LEFT + (moment - start).total_seconds() / span * (WIDTH - LEFT - RIGHT)


def _y(value: float, top: float) -> float:
    return TOP + (1 - value / top) * (HEIGHT - TOP - BOTTOM) if top > 0 else HEIGHT - BOTTOM


def _day(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%m-%d")


def _label_step(count: int) -> int:
    """Label every n-th day so that at most LABELS dates share an axis."""
    return max(1, -(-count // LABELS))


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def time_range(nights: Sequence[Night]) -> tuple[datetime, datetime]:
    """The plots' time axis: from the first night to the newest, half a day of margin on both sides."""
    margin = timedelta(hours=12)
    return nights[0].finished_at - margin, nights[-1].finished_at + margin


def _canary_window(start: datetime, end: datetime, newest: datetime) -> str:
    since = max(start, newest - timedelta(days=CANARY_WINDOW_NIGHTS))
    x0, x1 = _x(since, start, end), _x(end, start, end)
    return (
        f'<rect class="canary-window" x="{x0:.1f}" y="{TOP}" width="{x1 - x0:.1f}" '
        f'height="{HEIGHT - TOP - BOTTOM}" fill="#eef4ff"><title>canary window: the last {CANARY_WINDOW_NIGHTS} '
        "days</title></rect>"
    )


def _axes(start: datetime, end: datetime, top: float, unit: str, nights: Sequence[Night]) -> list[str]:
    bottom = HEIGHT - BOTTOM
    parts = [
        f'<line x1="{LEFT}" y1="{bottom}" x2="{WIDTH - RIGHT}" y2="{bottom}" stroke="#888"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" stroke="#888"/>',
        f'<text x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end" font-size="10">{escape(_fmt(top))}{escape(unit)}</text>',
        f'<text x="{LEFT - 4}" y="{bottom}" text-anchor="end" font-size="10">0</text>',
    ]
    days = sorted({night.finished_at.astimezone(UTC).date() for night in nights})
    for day in days[:: _label_step(len(days))]:
        moment = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
        x = _x(moment, start, end)
        parts.append(f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle" font-size="10">{day:%m-%d}</text>')
    return parts


def _step_line(points: list[tuple[float, float | None]], css: str, colour: str) -> list[str]:
    """A dashed line through consecutive nights that have a value (the threshold or the baseline)."""
    lines: list[str] = []
    run: list[tuple[float, float]] = []
    for x, y in [*points, (0.0, None)]:
        if y is None:
            if run:
                drawn = run if len(run) > 1 else [(run[0][0] - 6, run[0][1]), (run[0][0] + 6, run[0][1])]
                coords = " ".join(f"{px:.1f},{py:.1f}" for px, py in drawn)
                lines.append(
                    f'<polyline class="{css}" points="{coords}" fill="none" stroke="{colour}" stroke-dasharray="5,3"/>'
                )
            run = []
        else:
            run.append((x, y))
    return lines


def plot(metric: Metric, nights: Sequence[Night], start: datetime, end: datetime) -> str:
    """One figure of one series as an SVG element."""
    values = [metric.value(n.figures) for n in nights]
    limits = [metric.limit(n.figures) for n in nights]
    baselines = [metric.baseline(n.figures) for n in nights]
    known = [v for v in [*values, *limits, *baselines] if v is not None]
    top = max(known) * HEADROOM if known and max(known) > 0 else 1.0
    xs = [_x(n.finished_at, start, end) for n in nights]
    unit = f" {metric.unit}" if metric.unit else ""
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" data-metric="{escape(metric.key)}" '
        f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img">',
        f"<title>{escape(metric.title)}</title>",
        _canary_window(start, end, nights[-1].finished_at),
        f'<text x="{LEFT}" y="14" font-size="12" font-weight="bold">{escape(metric.title)}</text>',
        *_axes(start, end, top, unit, nights),
    ]
    parts += _step_line(
        [(x, None if v is None else _y(v, top)) for x, v in zip(xs, limits, strict=True)], "threshold", "#c00"
    )
    parts += _step_line(
        [(x, None if v is None else _y(v, top)) for x, v in zip(xs, baselines, strict=True)], "baseline", "#777"
    )
    run: list[tuple[float, float]] = []
    for x, value in [*zip(xs, values, strict=True), (0.0, None)]:
        if value is None:
            if len(run) > 1:
                coords = " ".join(f"{px:.1f},{py:.1f}" for px, py in run)
                parts.append(
                    f'<polyline class="series" points="{coords}" fill="none" stroke="#1f5fbf" stroke-width="2"/>'
                )
            run = []
        else:
            run.append((x, _y(value, top)))
    for night, x, value in zip(nights, xs, values, strict=True):
        when = escape(f"{night.finished_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC, {night.run_id}")
        if value is None:
            parts.append(
                f'<line class="gap" x1="{x:.1f}" y1="{HEIGHT - BOTTOM - 5}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM + 3}" '
                f'stroke="#aaa" stroke-width="2"><title>{when}: no figure</title></line>'
            )
            continue
        is_over = bool(over(metric, night.figures))
        css, colour = ("point over", "#c00") if is_over else ("point", "#1f5fbf")
        parts.append(
            f'<circle class="{css}" cx="{x:.1f}" cy="{_y(value, top):.1f}" r="{POINT_RADIUS}" fill="{colour}">'
            f"<title>{when}: {escape(_fmt(value))}{escape(unit)}</title></circle>"
        )
    for index in first_over(metric, nights):
        value = values[index]
        if value is None:
            continue
        x, y = xs[index], _y(value, top)
        label = escape(f"left threshold {_day(nights[index].finished_at)}")
        anchor = "end" if x > WIDTH / 2 else "start"
        parts.append(
            f'<g class="first-over"><circle cx="{x:.1f}" cy="{y:.1f}" r="{MARK_RADIUS}" fill="none" stroke="#c00" '
            f'stroke-width="2"/><line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM}" stroke="#c00" '
            f'stroke-dasharray="2,2"/><text x="{x + (-6 if anchor == "end" else 6):.1f}" y="{TOP + 10}" '
            f'text-anchor="{anchor}" font-size="11" fill="#c00">{label}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def verdict_class(verdict: str) -> str:
    """The CSS word for a verdict cell (a fixed word, never taken from the input)."""
    if verdict in PASSING_VERDICTS:
        return "passing"
    return "failing" if verdict == "not certified" else "incomplete"


VERDICT_COLOURS = {"passing": "#5aa55a", "failing": "#d04040", "incomplete": "#e0b040"}


def timeline(nights: Sequence[Night], start: datetime, end: datetime, regressed: bool) -> str:
    """The verdict of every night as one coloured cell; the newest ringed when it regressed."""
    cell = max(4.0, min(28.0, (WIDTH - LEFT - RIGHT) / max(len(nights), 1) - 2))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{WIDTH}" height="{TIMELINE_HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {TIMELINE_HEIGHT}" role="img"><title>verdict timeline</title>',
        f'<text x="{LEFT - 4}" y="22" text-anchor="end" font-size="10">verdict</text>',
    ]
    for index, night in enumerate(nights):
        css = verdict_class(night.verdict)
        x = _x(night.finished_at, start, end) - cell / 2
        stroke = ' stroke="#000" stroke-width="3"' if regressed and index == len(nights) - 1 else ""
        when = escape(f"{night.finished_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC, {night.run_id}: {night.verdict}")
        parts.append(
            f'<rect class="verdict {css}" x="{x:.1f}" y="8" width="{cell:.1f}" height="20" '
            f'fill="{VERDICT_COLOURS[css]}"{stroke}><title>{when}</title></rect>'
        )
    for night in nights[:: _label_step(len(nights))]:
        x = _x(night.finished_at, start, end)
        parts.append(f'<text x="{x:.1f}" y="41" text-anchor="middle" font-size="10">{_day(night.finished_at)}</text>')
    parts.append("</svg>")
    return "".join(parts)
