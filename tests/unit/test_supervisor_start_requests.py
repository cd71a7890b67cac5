"""The supervisor starts every process a start request (SIGUSR1) adds, however closely the requests follow each other.

No cluster: the supervisor runs a plan of plain `sleep` processes. The real node adds its stages back to back (an
empty stage, then the kubelet), which once left CI waiting 60 s for a kubelet that had started: the supervisor,
still handling the empty stage's signal, read the kubelet's spec and started it before the caller noted the pids
it would compare against, so the caller never saw a new pid. On a loaded machine this test failed every time then.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.backends.local.process_plan import Plan, ProcessSpec
from dra_conformance.backends.local.supervised import SupervisedCluster
from dra_conformance.kube import waits
from dra_conformance.timeouts import Timeouts

# Back-to-back request pairs (an empty one, then one process): enough to cross the supervisor's loop at every point.
REQUEST_PAIRS = 60
# A supervisor with only `sleep` to start reaches "running" at once; this covers a loaded CI machine.
SUPERVISOR_RUNNING = 30.0


def _sleeper(layout: ClusterLayout, name: str, *, critical: bool) -> ProcessSpec:
    sleep = shutil.which("sleep")
    assert sleep is not None, "no `sleep` on this machine"
    return ProcessSpec(name=name, argv=[sleep, "600"], log=str(layout.component_log(name)), critical=critical)


@pytest.fixture
def supervised(tmp_path: Path) -> Iterator[SupervisedCluster]:
    layout = ClusterLayout(tmp_path / "state")
    layout.logs.mkdir(parents=True)
    plan = Plan(
        processes=[_sleeper(layout, "anchor", critical=True)],
        server="https://127.0.0.1:1",
        ca_file="",
        client_cert_file="",
        client_key_file="",
        ready_timeout=1.0,
        stop_timeout=5.0,
        owner_pid=None,
    )
    plan.write(layout.plan)
    cluster = SupervisedCluster(layout, Timeouts(driver_ready=10.0, process_stop=5.0))
    cluster.spawn()
    try:
        waits.until(
            cluster.state,
            lambda state: state is not None and state.get("phase") == "running",
            timeout=SUPERVISOR_RUNNING,
            what="the supervisor of a plan of one `sleep` running",
        )
        yield cluster
    finally:
        cluster.stop_supervisor()


def test_every_process_of_back_to_back_start_requests_is_started(supervised: SupervisedCluster) -> None:
    layout = supervised.layout
    for index in range(REQUEST_PAIRS):
        supervised.add_processes([])  # as the real node's empty relay stage on one node
        supervised.add_processes([_sleeper(layout, f"worker-{index}", critical=False)])
    running = (supervised.state() or {}).get("processes", {})
    missing = [f"worker-{index}" for index in range(REQUEST_PAIRS) if f"worker-{index}" not in running]
    assert missing == [], f"the supervisor never started {missing}; its state: {supervised.state()}"


def test_a_start_request_to_a_stopping_cluster_fails_at_once_with_the_reason(supervised: SupervisedCluster) -> None:
    supervised.stop_supervisor()
    with pytest.raises(Exception, match="stopping") as raised:
        supervised.add_processes([_sleeper(supervised.layout, "late", critical=False)])
    assert "received SIGTERM" in str(raised.value), raised.value
