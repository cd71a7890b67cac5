"""A control-plane fault covers the checks that ran during it, and a margin after it."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from dra_conformance.kube.cluster_health import FAULT_MARGIN, ClusterHealthWatch, Fault

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


def test_a_fault_starts_right_after_the_last_probe_that_found_the_component_healthy() -> None:
    watch = ClusterHealthWatch.__new__(ClusterHealthWatch)
    watch.faults, watch._open, watch._last_healthy = [], {}, {}
    watch._lock = threading.Lock()
    watch._note("kube-apiserver", "", T0)
    watch._note("kube-apiserver", "unreachable", T0 + timedelta(seconds=3))
    assert watch.faults[0].since == T0, "a check that failed between the probes met the fault too"
    watch._note("kube-apiserver", "", T0 + timedelta(seconds=9))
    assert watch.faults[0].until == T0 + timedelta(seconds=9)
