"""A control-plane fault covers the checks that ran during it, and a margin after it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dra_conformance.kube.cluster_health import FAULT_MARGIN, Fault

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def test_a_fault_overlaps_checks_during_it_and_shortly_after_but_not_before_or_long_after() -> None:
    fault = Fault("kube-apiserver", T0, "unreachable", until=T0 + timedelta(seconds=30))
    assert fault.overlaps(T0 - timedelta(seconds=5), T0 + timedelta(seconds=1))
    assert fault.overlaps(T0 + timedelta(seconds=30), T0 + timedelta(seconds=31))
    assert fault.overlaps(T0 + timedelta(seconds=30) + FAULT_MARGIN, T0 + timedelta(seconds=60))
    assert not fault.overlaps(T0 - timedelta(seconds=10), T0 - timedelta(seconds=1))
    assert not fault.overlaps(T0 + timedelta(seconds=31) + FAULT_MARGIN, T0 + timedelta(seconds=90))
    still_open = Fault("kube-apiserver", T0, "unreachable")
    assert still_open.overlaps(T0 + timedelta(hours=1), T0 + timedelta(hours=2))
    assert still_open.describe() == "kube-apiserver unhealthy from 12:00:00 until the end of the run (unreachable)"
