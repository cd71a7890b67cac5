"""Watch mode: the Metrics API's availability and sample lag sampled over a period (`--dra-metrics-watch DURATION`).

The rollout rule wants 24 h of stable availability before widening. A point-in-time read cannot show that, so the
watch samples every version at a fixed cadence: the APIService's `Available` condition and a real read of
NodeMetrics and PodMetrics. A tick counts as available only when both hold and the read returned node samples.
The age of the oldest sample served at a tick is that tick's lag; a tick whose read failed has no lag: it is
unavailable, never "zero lag" and never "zero use".

`run_watch` and `summarize` are pure (a clock and a wait are passed in); `sample_tick` does the reads.
"""

from __future__ import annotations

import datetime
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.errors import UsageError
from dra_conformance.metrics import availability as version_availability
from dra_conformance.metrics import reads as metrics_reads
from dra_conformance.metrics import samples as metrics_sampling
from dra_conformance.model.stats import percentile

# Sampling cadence, not synchronization: a third of the 15 s collection interval metrics-server and the reference
# adapter use, so every collection is seen; a 24 h watch is then 17,281 ticks of four reads per version.
WATCH_INTERVAL = 5.0
# The rollout rule: availability must have been watched stable for 24 h before a rollout widens.
STABLE_WATCH_SECONDS = 24 * 3600.0
# Unavailability reasons kept per version in the report (the most frequent ones).
REASONS_KEPT = 5
# Availability ratio a version needs over a watch (--dra-metrics-watch) to count as stable: 99.9 % allows ~86 s of a
# 24 h watch (an aggregator re-probe, an adapter restart), not an outage.
STABLE_AVAILABILITY_RATIO = 0.999

_DURATION = re.compile(r"([1-9][0-9]*)([smh])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """`30s`, `10m` or `24h` in seconds; anything else (or shorter than one interval) is a usage error."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise UsageError(f"--dra-metrics-watch {text!r}: expected a whole number of s, m or h (e.g. 30s, 10m, 24h)")
    seconds = float(int(match[1]) * _UNIT_SECONDS[match[2]])
    if seconds < WATCH_INTERVAL:
        raise UsageError(f"--dra-metrics-watch {text}: shorter than the {WATCH_INTERVAL:g} s sampling interval")
    return seconds


def format_duration(seconds: float) -> str:
    """Seconds, to the whole second, as the largest whole unit that fits ("24 h", "10 min", "35 s")."""
    seconds = float(round(seconds))
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


@dataclass(frozen=True)
class Tick:
    """What one version showed at one tick, `at` seconds after the watch started."""

    at: float
    version: str
    available: bool
    # Why the tick is not available ("" when it is).
    reason: str = ""
    # Age of the oldest sample served at this tick; None when nothing could be read (never 0).
    lag: float | None = None


@dataclass
class VersionWatch:
    """One version over the whole watch."""

    ticks: int
    available_ticks: int
    ratio: float | None
    lag_p50: float | None
    lag_p95: float | None
    lag_max: float | None
    # Ticks with no lag: the read failed or served no node sample (counted unavailable, not as fresh).
    ticks_without_lag: int
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass
class WatchSummary:
    """The watch's figures per version, and whether they show the stable availability widening needs."""

    requested_seconds: float
    watched_seconds: float
    interval: float
    started: str
    versions: dict[str, VersionWatch]

    def ratio(self, version: str) -> float:
        """Availability ratio of a version (0 when it was never sampled)."""
        found = self.versions.get(version)
        return found.ratio if found is not None and found.ratio is not None else 0.0

    def unstable(self, versions: Iterable[str], slo: float) -> list[str]:
        """Why `versions` were not stable over the watch (availability below the ratio, lag p95 over the SLO)."""
        problems = []
        for version in versions:
            found = self.versions.get(version)
            if found is None or found.ratio is None:
                problems.append(f"{version} not sampled")
                continue
            if found.ratio < STABLE_AVAILABILITY_RATIO:
                problems.append(
                    f"{version} available {found.ratio:.1%} of {found.ticks} ticks "
                    f"(needs {STABLE_AVAILABILITY_RATIO:.1%}; {found.reasons})"
                )
            if found.lag_p95 is not None and found.lag_p95 > slo:
                problems.append(f"{version} sample age p95 {found.lag_p95:g} s over the {slo:g} s SLO")
        return problems

    def statement(self, versions: Iterable[str], slo: float) -> str:
        """One line for the verdict: stable for 24 h, unstable (why), or not yet stable (watched too short)."""
        needed = list(versions)
        figures = "; ".join(
            f"{v} available {self.ratio(v):.1%}, sample age p95 {self.versions[v].lag_p95} s"
            for v in needed
            if v in self.versions
        )
        problems = self.unstable(needed, slo)
        if problems:
            return f"unstable over {format_duration(self.watched_seconds)} watched: {'; '.join(problems)}"
        if self.watched_seconds < STABLE_WATCH_SECONDS:
            return (
                f"not yet stable: watched {format_duration(self.watched_seconds)} of the "
                f"{format_duration(STABLE_WATCH_SECONDS)} widening needs ({figures})"
            )
        return f"stable over {format_duration(self.watched_seconds)} watched ({figures})"

    def stable(self, versions: Iterable[str], slo: float) -> bool:
        """24 h watched and every one of `versions` available and fresh throughout."""
        return self.watched_seconds >= STABLE_WATCH_SECONDS and not self.unstable(versions, slo)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def summarize(
    ticks: list[Tick], *, requested: float, interval: float, started: str, versions: Iterable[str]
) -> WatchSummary:
    """The figures of a watch from its ticks (lags are taken only from ticks that read samples)."""
    offsets = [tick.at for tick in ticks]
    watched = max(offsets) - min(offsets) if offsets else 0.0
    found: dict[str, VersionWatch] = {}
    for version in versions:
        own = [tick for tick in ticks if tick.version == version]
        lags = [tick.lag for tick in own if tick.lag is not None]
        available = sum(tick.available for tick in own)
        reasons = Counter(tick.reason for tick in own if not tick.available)
        found[version] = VersionWatch(
            ticks=len(own),
            available_ticks=available,
            ratio=round(available / len(own), 6) if own else None,
            lag_p50=_round(percentile(lags, 0.5)) if lags else None,
            lag_p95=_round(percentile(lags, 0.95)) if lags else None,
            lag_max=_round(max(lags)) if lags else None,
            ticks_without_lag=len(own) - len(lags),
            reasons=dict(reasons.most_common(REASONS_KEPT)),
        )
    return WatchSummary(round(requested, 3), round(watched, 3), interval, started, found)


def run_watch(
    sample: Callable[[float], list[Tick]],
    duration: float,
    interval: float,
    *,
    clock: Callable[[], float],
    wait: Callable[[float], object],
) -> list[Tick]:
    """Call `sample(offset)` at offsets 0, interval, 2 x interval, ... up to `duration`; every tick it returned.

    The cadence is fixed to the start: a tick that takes longer than the interval moves on to the next slot still
    ahead instead of drifting, so the watch ends at its deadline.
    """
    start = clock()
    deadline = start + duration
    ticks: list[Tick] = []
    slot = 0
    while True:
        ticks.extend(sample(clock() - start))
        slot = max(slot + 1, int((clock() - start) // interval) + 1)
        next_tick = start + slot * interval
        if next_tick > deadline:
            return ticks
        wait(max(0.0, next_tick - clock()))


_READ_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError, KeyError)


def sample_tick(
    api: client.ApiClient, versions: Iterable[str], at: float, scope: metrics_sampling.SampleScope
) -> list[Tick]:
    """One tick: each version's APIService condition and a real read of its NodeMetrics and PodMetrics in `scope`."""
    ticks = []
    for version in versions:
        try:
            condition = version_availability.apiservice_condition(api, version)
        except _READ_ERRORS as error:
            condition = f"APIService unreadable: {type(error).__name__}"
        try:
            found = metrics_sampling.samples(api, version, scope)
        except _READ_ERRORS as error:
            reason = f"read failed: {error.status}" if isinstance(error, ApiException) else type(error).__name__
            ticks.append(Tick(at, version, False, reason if condition.startswith("True") else condition))
            continue
        nodes = [s for s in found.values() if s.kind == "node"]
        now = datetime.datetime.now(datetime.UTC)
        lag = max(metrics_sampling.lag_seconds(found.values(), now)) if nodes else None
        if not condition.startswith("True"):
            ticks.append(Tick(at, version, False, condition, lag))
        elif not nodes:
            ticks.append(Tick(at, version, False, "no NodeMetrics served"))
        else:
            ticks.append(Tick(at, version, True, "", lag))
    return ticks


def watch(
    api: client.ApiClient, duration: float, scope: metrics_sampling.SampleScope, *, interval: float = WATCH_INTERVAL
) -> WatchSummary:
    """Sample every version of metrics.k8s.io (in `scope`) every `interval` seconds for `duration` seconds."""
    pacing = threading.Event()  # never set: its wait is the pause until the next tick of the cadence
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    ticks = run_watch(
        lambda at: sample_tick(api, metrics_reads.VERSIONS, at, scope),
        duration,
        interval,
        clock=time.monotonic,
        wait=lambda seconds: pacing.wait(seconds),
    )
    return summarize(ticks, requested=duration, interval=interval, started=started, versions=metrics_reads.VERSIONS)
