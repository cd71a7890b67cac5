"""The history's judgements, pure functions of the stored nights: series, thresholds, the canary window, regressions.

A series is one cluster and one driver, its nights oldest first (a night is one run; two runs on one day are two
points). A figure is over its threshold when it exceeds the limit the run itself was judged by (the canary gate's
threshold, the metrics verdict's SLO, the error budget), or, for the flake rate, when any test was flaky.

The newest night regressed when its verdict is worse than the night before's, or when a figure is over its threshold
and was not the night before (within it, or absent). A CI job pages on that (exit code EXIT_REGRESSED of
`command`).

The canary window of the seed: the range is not widened until 14 clean nights in a row, a clean night being one
whose verdict passes, whose canary gate passed, and whose figures are all within their thresholds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date

from dra_conformance.report.fleet.nights import Figures, Night

# The seed's canary window: the range is widened only after this many clean nights in a row.
CANARY_WINDOW_NIGHTS = 14
# A rerun must not hide a flake: any flaky test is over the line.
FLAKE_RATE_THRESHOLD = 0.0
# Verdicts from best to worst; one the history does not know ranks with "incomplete" (not a pass, not a failure).
VERDICT_RANK = {"certified": 0, "certified with advisories": 1, "incomplete": 2, "not certified": 3}
UNKNOWN_VERDICT_RANK = VERDICT_RANK["incomplete"]
PASSING_VERDICTS = ("certified", "certified with advisories")
GATE_PASSED = "pass"


@dataclass(frozen=True)
class Metric:
    """One plotted figure: its title, unit, and how to read its value, limit and baseline from a night."""

    key: str
    # How the regression line and the page name it: 'allocation p95'.
    label: str
    title: str
    unit: str
    value: Callable[[Figures], float | None]
    limit: Callable[[Figures], float | None]
    baseline: Callable[[Figures], float | None] = lambda _: None


METRICS = (
    Metric(
        "allocation_p95",
        "allocation p95",
        "allocation p95 (DRA) vs device-plugin baseline",
        "s",
        lambda f: f.allocation_p95,
        lambda f: f.allocation_limit,
        lambda f: f.allocation_baseline,
    ),
    Metric(
        "ready_p95",
        "pod-ready p95",
        "pod-ready p95 (DRA) vs device-plugin baseline",
        "s",
        lambda f: f.ready_p95,
        lambda f: f.ready_limit,
        lambda f: f.ready_baseline,
    ),
    Metric(
        "prepare_p95",
        "kubelet prepare p95",
        "kubelet-observed prepare p95",
        "s",
        lambda f: f.prepare_p95,
        lambda f: f.prepare_limit,
    ),
    Metric(
        "errors_used",
        "error budget used",
        "error budget used (errors counted)",
        "",
        lambda f: f.errors_used,
        lambda f: f.error_budget,
    ),
    Metric(
        "freshness_p95",
        "metrics freshness p95",
        "metrics freshness p95 (sample lag)",
        "s",
        lambda f: f.freshness_p95,
        lambda f: f.freshness_slo,
    ),
    Metric(
        "flake_rate",
        "flake rate",
        "flake rate (over repeated runs)",
        "",
        lambda f: f.flake_rate,
        lambda _: FLAKE_RATE_THRESHOLD,
    ),
)


@dataclass(frozen=True)
class Series:
    """One cluster and driver: its nights, oldest first."""

    cluster: str
    driver: str
    nights: tuple[Night, ...]


@dataclass(frozen=True)
class Regression:
    """What regressed on a series' newest night."""

    series: Series
    reasons: tuple[str, ...]

    def line(self) -> str:
        """'local/a gpu.example.com 2026-12-05: verdict certified -> not certified; allocation p95 0.9 s > 0.5 s'."""
        newest = self.series.nights[-1]
        day = newest.finished_at.astimezone(UTC).strftime("%Y-%m-%d")
        return f"{self.series.cluster} {self.series.driver} {day} ({newest.run_id}): {'; '.join(self.reasons)}"


def series_of(nights: Sequence[Night]) -> list[Series]:
    """The nights grouped by cluster and driver, each oldest first, the groups by cluster then driver."""
    grouped: dict[tuple[str, str], list[Night]] = defaultdict(list)
    for night in nights:
        grouped[(night.cluster, night.driver)].append(night)
    return [
        Series(cluster, driver, tuple(sorted(group, key=lambda n: (n.finished_at, n.run_id))))
        for (cluster, driver), group in sorted(grouped.items())
    ]


def over(metric: Metric, figures: Figures) -> bool | None:
    """Whether the figure exceeds its limit; None where the night has no figure or no limit."""
    value, limit = metric.value(figures), metric.limit(figures)
    if value is None or limit is None:
        return None
    return value > limit


def first_over(metric: Metric, nights: Sequence[Night]) -> list[int]:
    """The indexes of the nights a figure left its threshold: over, and not over the night before."""
    marks, before = [], False
    for index, night in enumerate(nights):
        now = over(metric, night.figures)
        if now and not before:
            marks.append(index)
        before = bool(now)
    return marks


def rank(verdict: str) -> int:
    """A verdict's place from best (0) to worst."""
    return VERDICT_RANK.get(verdict, UNKNOWN_VERDICT_RANK)


def is_clean(night: Night) -> bool:
    """Verdict passing, canary gate passed, no figure over its threshold."""
    return (
        night.verdict in PASSING_VERDICTS
        and night.canary_gate == GATE_PASSED
        and not any(over(metric, night.figures) for metric in METRICS)
    )


def clean_streak(nights: Sequence[Night]) -> int:
    """Clean nights in a row up to the newest, counted by calendar day (UTC): a day with an unclean run breaks it."""
    days: dict[date, bool] = {}
    for night in nights:
        day = night.finished_at.astimezone(UTC).date()
        days[day] = days.get(day, True) and is_clean(night)
    streak = 0
    for day in sorted(days, reverse=True):
        if not days[day]:
            break
        streak += 1
    return streak


def canary_window(nights: Sequence[Night]) -> str:
    """'3 of 14 clean nights: range not widened until 14 clean nights' or '14 clean nights: the range may widen'."""
    streak = clean_streak(nights)
    if streak >= CANARY_WINDOW_NIGHTS:
        return f"{streak} clean nights in a row: the range may widen"
    return (
        f"{streak} of {CANARY_WINDOW_NIGHTS} clean nights in a row: "
        f"range not widened until {CANARY_WINDOW_NIGHTS} clean nights"
    )


def regression(series: Series) -> Regression | None:
    """What regressed on the series' newest night against the night before; None when nothing did (or one night)."""
    if len(series.nights) < 2:
        return None
    before, newest = series.nights[-2], series.nights[-1]
    reasons = []
    if rank(newest.verdict) > rank(before.verdict):
        reasons.append(f"verdict {before.verdict} -> {newest.verdict}")
    for metric in METRICS:
        if over(metric, newest.figures) and not over(metric, before.figures):
            value, limit = metric.value(newest.figures), metric.limit(newest.figures)
            unit = f" {metric.unit}" if metric.unit else ""
            reasons.append(f"{metric.label} {value:g}{unit} over its threshold {limit:g}{unit}")
    return Regression(series, tuple(reasons)) if reasons else None
