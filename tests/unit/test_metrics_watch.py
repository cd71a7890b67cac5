"""Watch mode's pure logic: the duration option, the tick cadence, the figures, and what they do to the verdict."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dra_conformance.errors import UsageError
from dra_conformance.metrics.decisions import DECISIONS, verdict
from dra_conformance.metrics.evidence import Evidence
from dra_conformance.metrics.verdict import render_markdown, summarize_verdict, verdict_record
from dra_conformance.metrics.watch import (
    STABLE_WATCH_SECONDS,
    WATCH_INTERVAL,
    Tick,
    WatchSummary,
    parse_duration,
    run_watch,
    summarize,
)

HEALTHY = {"v1": "True/Passed", "v1beta1": "True/Passed"}
VERSIONS = ("v1", "v1beta1")


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30.0), ("10m", 600.0), ("24h", 86400.0), (" 5s ", 5.0)])
def test_durations_parse_into_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "1.5h", "10min", "-5s", "0s", "30S", "1h30m", "s", "4s", "05s"])
def test_anything_else_is_one_usage_line(text: str) -> None:
    with pytest.raises(UsageError) as refused:
        parse_duration(text)
    assert "--dra-metrics-watch" in str(refused.value) and "\n" not in str(refused.value), refused.value


class FakeClock:
    """A clock that only moves when the watch waits or a tick takes time."""

    def __init__(self, tick_cost: float = 0.0) -> None:
        self.now, self.tick_cost = 100.0, tick_cost
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def _sampler(clock: FakeClock, offsets: list[float]) -> Callable[[float], list[Tick]]:
    def sample(at: float) -> list[Tick]:
        offsets.append(at)
        clock.now += clock.tick_cost
        return [Tick(at, "v1", True, lag=1.0)]

    return sample


def test_ticks_follow_a_fixed_cadence_up_to_the_deadline() -> None:
    clock, offsets = FakeClock(tick_cost=0.5), list[float]()
    ticks = run_watch(_sampler(clock, offsets), 30.0, 5.0, clock=clock, wait=clock.wait)
    assert offsets == [0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0] and len(ticks) == 7, offsets
    assert all(w == pytest.approx(4.5) for w in clock.waits), clock.waits  # the tick's own time is not added


def test_a_tick_slower_than_the_interval_skips_to_the_next_slot_ahead() -> None:
    clock, offsets = FakeClock(tick_cost=7.0), list[float]()
    run_watch(_sampler(clock, offsets), 30.0, 5.0, clock=clock, wait=clock.wait)
    assert offsets == [0.0, 10.0, 20.0, 30.0], offsets  # no drift, no burst of late ticks, ends at the deadline


def _ticks(pattern: str, version: str = "v1", lag: float = 10.0) -> list[Tick]:
    """One tick per character: "+" available with `lag`, "-" unreadable (no lag), "s" available but stale."""
    found = []
    for index, mark in enumerate(pattern):
        at = index * WATCH_INTERVAL
        if mark == "+":
            found.append(Tick(at, version, True, lag=lag))
        elif mark == "s":
            found.append(Tick(at, version, True, lag=600.0))
        else:
            found.append(Tick(at, version, False, "False/FailedDiscoveryCheck"))
    return found


def _summary(ticks: list[Tick], requested: float | None = None) -> WatchSummary:
    span = max(t.at for t in ticks) if ticks else 0.0
    return summarize(ticks, requested=requested or span, interval=WATCH_INTERVAL, started="t0", versions=VERSIONS)


def test_figures_per_version_take_lag_only_from_ticks_that_read_samples() -> None:
    summary = _summary(_ticks("++-+") + _ticks("++++", "v1beta1", lag=20.0))
    v1, v1beta1 = summary.versions["v1"], summary.versions["v1beta1"]
    assert (v1.ticks, v1.available_ticks, v1.ratio) == (4, 3, 0.75), v1
    # the unreadable tick has no lag: it is neither zero nor fresh, and it is counted as such
    assert v1.ticks_without_lag == 1 and v1.lag_p95 == 10.0 and v1.lag_p50 == 10.0, v1
    assert v1.reasons == {"False/FailedDiscoveryCheck": 1}, v1
    assert v1beta1.ratio == 1.0 and v1beta1.lag_p95 == 20.0, v1beta1
    assert summary.watched_seconds == 3 * WATCH_INTERVAL, summary


def test_a_version_never_read_has_no_lag_rather_than_zero() -> None:
    summary = _summary(_ticks("---"))
    v1 = summary.versions["v1"]
    assert v1.ratio == 0.0 and v1.lag_p95 is None and v1.lag_max is None and v1.ticks_without_lag == 3, v1
    assert summary.versions["v1beta1"].ratio is None and summary.ratio("v1beta1") == 0.0


def test_a_short_healthy_watch_says_not_yet_stable_and_holds_widening() -> None:
    watch = _summary(_ticks("+" * 7) + _ticks("+" * 7, "v1beta1"))  # 30 s
    evidence = Evidence(available=HEALTHY, lag_p95=10.0, new_sample_seen=True, server_version="v1.38.0", watch=watch)
    assert verdict(evidence) == [DECISIONS[3]]
    assert evidence.stability().startswith("not yet stable: watched 30 s of the 24 h"), evidence.stability()


def test_a_day_of_stable_availability_lets_the_verdict_widen() -> None:
    ticks = [Tick(0.0, v, True, lag=10.0) for v in VERSIONS] + [
        Tick(STABLE_WATCH_SECONDS, v, True, lag=12.0) for v in VERSIONS
    ]
    evidence = Evidence(available=HEALTHY, lag_p95=10.0, new_sample_seen=True, server_version="v1.38.0")
    evidence.watch = _summary(ticks)
    assert verdict(evidence) == [DECISIONS[4]], evidence.stability()
    assert evidence.stability().startswith("stable over 24 h watched"), evidence.stability()


def test_on_1_37_a_day_of_stable_availability_still_keeps_v1beta1_and_watches_it_too() -> None:
    v1_only_stable = [Tick(0.0, "v1", True, lag=1.0), Tick(STABLE_WATCH_SECONDS, "v1", True, lag=1.0)]
    v1beta1_flapping = [Tick(0.0, "v1beta1", False, "missing"), Tick(STABLE_WATCH_SECONDS, "v1beta1", True, lag=1.0)]
    evidence = Evidence(available=HEALTHY, lag_p95=1.0, new_sample_seen=True, server_version="v1.37.2")
    evidence.watch = _summary(v1_only_stable + v1beta1_flapping)
    # v1beta1 must stay served for the HPA, so its outage over the watch needs a fix and blocks widening
    assert verdict(evidence) == [DECISIONS[0], DECISIONS[2], DECISIONS[3]], evidence.stability()
    assert evidence.stability().startswith("unstable over 24 h watched: v1beta1 available 50.0%"), evidence.stability()


def test_an_outage_or_stale_samples_during_the_watch_reach_the_verdict_though_the_last_read_was_fine() -> None:
    outage = Evidence(available=HEALTHY, lag_p95=10.0, new_sample_seen=True, server_version="v1.38.0")
    outage.watch = _summary(_ticks("++-++++"))
    assert verdict(outage)[0] == DECISIONS[0] and DECISIONS[3] in verdict(outage), outage.stability()
    stale = Evidence(available=HEALTHY, lag_p95=10.0, new_sample_seen=True, server_version="v1.38.0")
    stale.watch = _summary(_ticks("+++s+++") + _ticks("+++++++", "v1beta1"))
    assert DECISIONS[1] in verdict(stale) and "sample age p95 600" in stale.stability(), stale.stability()


def test_without_a_watch_the_verdict_never_calls_availability_stable() -> None:
    evidence = Evidence(available=HEALTHY, lag_p95=10.0, new_sample_seen=True, server_version="v1.38.0")
    assert verdict(evidence) == [DECISIONS[3]] and evidence.stability().startswith("not measured for widening"), (
        verdict(evidence)
    )


def test_the_verdict_record_terminal_and_markdown_carry_the_watch_figures() -> None:
    evidence = Evidence(available=HEALTHY, lag_p95=10.0, new_sample_seen=True, server_version="v1.37.2")
    evidence.watch = _summary(_ticks("+++-+++") + _ticks("+++++++", "v1beta1", lag=20.0))
    record = verdict_record(evidence, verdict(evidence))
    assert record["evidence"]["watch"]["versions"]["v1"]["ratio"] == round(6 / 7, 6), record
    section = summarize_verdict([record])
    assert section is not None and section.artifact == "metrics-verdict.json"
    text = "\n".join(section.lines)
    assert "v1: available 85.7% (6/7 ticks)" in text and "availability: unstable over 30 s" in text, text
    markdown = render_markdown(record)
    assert "| v1 | 85.7% | 6/7 | 10.0 | 10.0 | 10.0 | 1 |" in markdown, markdown
    assert "Keep serving v1beta1 because the HPA controller" in markdown, markdown
