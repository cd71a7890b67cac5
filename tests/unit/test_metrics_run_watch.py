"""The Metrics API watched for the whole run: outages, since when, and what they do to the metrics verdict."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dra_conformance.metrics import decisions as metrics_decisions
from dra_conformance.metrics import evidence as metrics_evidence
from dra_conformance.metrics import reads as metrics_reads
from dra_conformance.metrics import run_watch
from dra_conformance.metrics.run_watch import (
    ABSENT,
    AVAILABLE,
    CHANGE_MARGIN,
    READ_FAILURES_CONFIRM,
    READ_TIMEOUT,
    RUN_WATCH_INTERVAL,
    UNAVAILABLE,
    UNKNOWN,
    Outage,
    Probe,
    RunAvailabilityWatch,
    outages,
    run_watch_entry,
)
from dra_conformance.metrics.verdict import render_markdown, summarize_verdict, verdict_record
from dra_conformance.plugin.metrics_fixtures import changes_metrics_api

START = datetime(2026, 12, 5, 18, 0, 0, tzinfo=UTC)
TICK = timedelta(seconds=RUN_WATCH_INTERVAL)
# The verdict promises an outage within two minutes of its start.
NOTICE_BOUND = timedelta(minutes=2)
# How long the thread test waits for the watch to notice (its interval there is a few milliseconds).
THREAD_NOTICE_TIMEOUT = 10.0


def _probes(
    version: str, states: Sequence[str], *, reason: str = "read failed: 503", since: datetime | None = None
) -> list[Probe]:
    """One probe of `version` per tick from START, in `states`."""
    return [
        Probe(
            START + i * TICK,
            version,
            state,
            reason if state == UNAVAILABLE else "",
            since if state == UNAVAILABLE else None,
        )
        for i, state in enumerate(states)
    ]


def _healthy_evaluation() -> dict[str, Any]:
    """The metrics checks' evaluation when their one up-front read found both versions Available."""
    evidence = metrics_evidence.Evidence(
        available={"v1": "True/Passed", "v1beta1": "True/Passed"}, lag_p50=3.0, lag_p95=5.0, server_version="v1.37.2"
    )
    record: dict[str, Any] = json.loads(json.dumps(verdict_record(evidence, metrics_decisions.verdict(evidence))))
    return record


def test_an_adapter_frozen_during_the_run_is_an_outage_from_the_first_failed_read() -> None:
    probes = _probes("v1", [AVAILABLE] * 3 + [UNAVAILABLE] * 5)
    (outage,) = outages(probes)
    assert (outage.version, outage.since, outage.until) == ("v1", START + 3 * TICK, None), outage
    assert outage.noticed == START + (3 + READ_FAILURES_CONFIRM - 1) * TICK, outage
    assert outage.describe() == "v1 unavailable since 18:00:15 UTC (read failed: 503)", outage.describe()


def test_an_outage_is_noticed_within_two_minutes_even_when_every_read_runs_out_its_timeout() -> None:
    """Each probe of a frozen adapter waits READ_TIMEOUT per version: the slowest cadence the watch can have."""
    slowest = timedelta(seconds=RUN_WATCH_INTERVAL + READ_TIMEOUT * 2 * len(metrics_reads.VERSIONS))
    probes = [Probe(START + i * slowest, "v1", UNAVAILABLE, "read failed: ReadTimeoutError") for i in range(10)]
    (outage,) = outages(probes)
    assert outage.noticed - outage.since <= NOTICE_BOUND, (outage, slowest)


def test_an_adapter_frozen_before_the_run_is_unavailable_since_the_aggregator_said_so() -> None:
    frozen = START - timedelta(minutes=3)
    (outage,) = outages(_probes("v1", [UNAVAILABLE] * 4, reason="FailedDiscoveryCheck", since=frozen))
    assert (outage.since, outage.reason) == (frozen, "FailedDiscoveryCheck"), outage


def test_one_failed_read_is_not_an_outage_and_a_recovery_ends_one() -> None:
    assert outages(_probes("v1", [AVAILABLE, UNAVAILABLE, AVAILABLE, UNAVAILABLE, AVAILABLE])) == []
    (outage,) = outages(_probes("v1", [AVAILABLE, UNAVAILABLE, UNAVAILABLE, UNAVAILABLE, AVAILABLE]))
    assert (outage.since, outage.until) == (START + TICK, START + 4 * TICK), outage
    assert "until 18:00:20 UTC" in outage.describe(), outage.describe()


def test_an_api_server_that_does_not_answer_or_a_version_with_no_apiservice_is_no_outage() -> None:
    assert outages(_probes("v1", [UNKNOWN] * 5)) == [], "a control-plane fault is the health watch's"
    assert outages(_probes("v1", [ABSENT] * 5)) == [], "nothing registered: the up-front read judges it"
    streak = outages(_probes("v1", [UNAVAILABLE, UNKNOWN, UNAVAILABLE, AVAILABLE]))
    assert [o.since for o in streak] == [START], f"an unknown probe neither ends nor breaks a streak: {streak}"


def test_a_check_that_changes_the_metrics_api_on_purpose_is_excused_with_its_margin() -> None:
    probes = _probes("v1", [AVAILABLE] + [UNAVAILABLE] * 4 + [AVAILABLE])
    window = (START + TICK, START + 3 * TICK)
    assert START + 4 * TICK <= window[1] + CHANGE_MARGIN, "the fourth tick is within the margin in this test"
    assert outages(probes, [window]) == [], outages(probes, [window])
    later = _probes("v1", [AVAILABLE] + [UNAVAILABLE] * 8)
    (outage,) = outages(later, [window])
    assert outage.since > window[1] + CHANGE_MARGIN, f"the outage after the change starts after it: {outage}"


def test_any_outage_makes_the_verdict_fix_first_since_t_never_available() -> None:
    """As measured: the up-front read saw both Available; the adapter froze as the run started."""
    evaluation = _healthy_evaluation()
    assert not any(d.startswith("fix first") for d in evaluation["decisions"]), evaluation["decisions"]
    probes = _probes("v1", [AVAILABLE] + [UNAVAILABLE] * 4) + _probes("v1beta1", [AVAILABLE] * 5)
    section = summarize_verdict([evaluation, run_watch_entry(probes, [], START, "")])
    assert section is not None, "an evaluation and a watch make a verdict"
    decisions = section.document["decisions"]
    assert decisions[0] == "fix first: v1 unavailable since 18:00:05 UTC (read failed: 503)", decisions
    assert metrics_decisions.DECISIONS[4] not in decisions and metrics_decisions.asks_fix(decisions), decisions
    text = "\n".join(section.lines)
    assert "v1 unavailable since 18:00:05 UTC (read failed: 503), noticed 18:00:10 UTC" in text, text
    assert "at the availability read (one moment)" in text, text
    markdown = render_markdown(section.document)
    assert markdown.startswith("# Metrics API verdict\n\n- **fix first: v1 unavailable since 18:00:05"), markdown


def test_without_outages_the_evaluation_stands_and_without_an_evaluation_only_an_outage_is_a_verdict() -> None:
    evaluation = _healthy_evaluation()
    healthy = run_watch_entry(_probes("v1", [AVAILABLE] * 3), [], START, "")
    section = summarize_verdict([evaluation, healthy])
    assert section is not None and section.document["decisions"] == evaluation["decisions"], section
    assert summarize_verdict([healthy]) is None, "no metrics checks and no outage: nothing to decide"
    alone = summarize_verdict([run_watch_entry(_probes("v1", [UNAVAILABLE] * 3), [], START, "")])
    assert alone is not None and alone.document["decisions"] == [
        "fix first: v1 unavailable since 18:00:00 UTC (read failed: 503)"
    ], alone


def test_a_version_only_the_up_front_read_found_unavailable_stays_in_the_line() -> None:
    found = [Outage("v1beta1", START, START + TICK, "read failed: 503")]
    decisions = run_watch.decisions_with_outages(
        ["fix first: v1 unavailable (no APIService)", metrics_decisions.DECISIONS[3]],
        found,
        "fix first: v1 unavailable (no APIService)",
    )
    assert decisions == [
        "fix first: v1beta1 unavailable since 18:00:00 UTC (read failed: 503); v1 unavailable (no APIService) at "
        "the availability read",
        metrics_decisions.DECISIONS[3],
    ], decisions


def test_outages_survive_the_record_round_trip() -> None:
    (outage,) = outages(_probes("v1", [AVAILABLE, UNAVAILABLE, UNAVAILABLE, AVAILABLE]))
    entry = json.loads(
        json.dumps(run_watch_entry(_probes("v1", [AVAILABLE, UNAVAILABLE, UNAVAILABLE, AVAILABLE]), [], START, ""))
    )
    assert run_watch.outages_from_json(entry[run_watch.RUN_WATCH_KEY]["outages"]) == [outage], entry


def test_the_watch_notices_each_outage_once_outside_the_changing_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread: probes, excuses what a changing check covers, and calls `notice` once per outage."""
    ticks = iter(range(1000))

    def fake_probe(_api: Any, version: str, now: Any = None) -> Probe:
        tick = next(ticks)
        state = UNAVAILABLE if version == "v1" and tick >= 2 else AVAILABLE
        return Probe(START + tick * TICK, version, state, "read failed: 503" if state == UNAVAILABLE else "")

    monkeypatch.setattr(run_watch, "probe", fake_probe)
    noticed: list[Outage] = []
    seen = threading.Event()

    def notice(outage: Outage) -> None:
        noticed.append(outage)
        seen.set()

    watch = RunAvailabilityWatch(None, lambda: [], notice, interval=0.001)
    watch.start()
    assert seen.wait(THREAD_NOTICE_TIMEOUT), f"no outage noticed within {THREAD_NOTICE_TIMEOUT} s: {watch.error}"
    probes = watch.stop()
    assert watch.error == "", watch.error
    assert [o.version for o in noticed] == ["v1"], f"noticed {noticed} from {len(probes)} probes"
    assert outages(probes)[0].since == noticed[0].since, (noticed, outages(probes))


@pytest.mark.parametrize(
    ("nodeid", "fixtures", "changes"),
    [
        (
            "suites/metrics/test_metrics_api.py::test_rollback_leaves_no_v1_apiservice_and_v1beta1_still_answers",
            (),
            True,
        ),
        ("suites/rollback/test_metrics_rollback.py::test_before_the_change_both_metrics_versions_serve", (), True),
        ("tests/metrics/test_adapter_faults.py::test_stale_samples", ("metrics_adapter",), True),
        ("suites/metrics/test_metrics_api.py::test_samples_are_fresh_enough_for_autoscaling", (), False),
        ("suites/rollback/test_device_plugin_rollback.py::test_before", (), False),
    ],
)
def test_which_checks_change_the_metrics_api_on_purpose(nodeid: str, fixtures: tuple[str, ...], changes: bool) -> None:
    assert changes_metrics_api(nodeid, fixtures) is changes, nodeid
