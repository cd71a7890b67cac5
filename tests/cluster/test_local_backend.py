"""The local backend stops every process it started: on `down`, and when the run that owns it goes away.

Each test starts its own small cluster in a temporary state directory (warm start ~3 s), beside the shared one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock
from kubernetes import client

from dra_conformance.backends.existing import ExistingBackend, ExistingClusterConfig
from dra_conformance.backends.local import drivers
from dra_conformance.backends.local.backend import LocalBackend, LocalClusterConfig
from dra_conformance.errors import BackendError
from dra_conformance.kube import waits
from dra_conformance.kube.client import client_from_kubeconfig
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.timeouts import Timeouts


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status  # a zombie has exited; only its parent's bookkeeping remains


def _component_pids(info: ClusterInfo) -> dict[str, int]:
    return {key[4:]: int(value) for key, value in info.details.items() if key.startswith("pid.")}


@pytest.fixture
def private_backend(tmp_path: Path, timeouts: Timeouts) -> Iterator[LocalBackend]:
    backend = LocalBackend(LocalClusterConfig(state_dir=tmp_path / "cluster", nodes=1, timeouts=timeouts))
    yield backend
    backend.stop()


def test_down_stops_every_component(private_backend: LocalBackend, timeouts: Timeouts) -> None:
    info = private_backend.start()
    pids = _component_pids(info)
    expected = {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
        "driver-kwok-node-0",
        "driver-kwok-set-aside-0",
        "driver-kwok-set-aside-1",
        "fake-metrics",
    }
    assert set(pids) == expected, pids
    assert all(_alive(pid) for pid in pids.values()), pids

    private_backend.stop()

    assert private_backend.info() is None
    still_running = {name: pid for name, pid in pids.items() if _alive(pid)}
    assert still_running == {}, f"processes left after down: {still_running}"
    runtime = drivers.runtime_dir(private_backend.layout)
    assert not runtime.exists(), f"driver sockets left in {runtime}: {list(runtime.rglob('*'))}"


def test_cluster_stops_when_its_owner_process_exits(tmp_path: Path, timeouts: Timeouts) -> None:
    # Stands in for a pytest controller that is killed with SIGKILL and so cannot clean up itself.
    owner = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    backend = LocalBackend(
        LocalClusterConfig(state_dir=tmp_path / "cluster", nodes=1, timeouts=timeouts, owner_pid=owner.pid)
    )
    try:
        pids = _component_pids(backend.start())
        owner.kill()
        owner.wait()
        waits.until(
            lambda: {name: pid for name, pid in pids.items() if _alive(pid)},
            lambda alive: not alive,
            timeout=3 * timeouts.process_stop,
            what="every component to exit after its owner was killed",
            describe=lambda alive: f"still running: {alive}",
        )
        assert backend.info() is None
        waits.until(
            lambda: drivers.runtime_dir(backend.layout).exists(),
            lambda exists: not exists,
            timeout=timeouts.process_stop,
            what="driver socket directory removed by the supervisor",
        )
    finally:
        owner.kill()
        backend.stop()


def test_start_attaches_to_the_running_cluster_instead_of_starting_another(
    private_backend: LocalBackend,
) -> None:
    first = private_backend.start()
    second = private_backend.start()
    assert second.details["supervisor_pid"] == first.details["supervisor_pid"], (first.details, second.details)


def test_existing_backend_describes_the_cluster_behind_a_kubeconfig(cluster: ClusterInfo) -> None:
    existing = ExistingBackend(ExistingClusterConfig(kubeconfig=cluster.kubeconfig)).start()
    assert set(cluster.nodes) <= set(existing.nodes), (cluster.nodes, existing.nodes)
    assert existing.server == cluster.server


def test_existing_backend_reports_an_unreachable_server_in_one_line(cluster: ClusterInfo, tmp_path: Path) -> None:
    # Same credentials, but a port nothing listens on.
    text = cluster.kubeconfig.read_text().replace(cluster.server, "https://127.0.0.1:1")
    (tmp_path / "kubeconfig").write_text(text)
    backend = ExistingBackend(ExistingClusterConfig(kubeconfig=tmp_path / "kubeconfig"))
    with pytest.raises(BackendError) as unreachable:
        backend.start()
    message = str(unreachable.value)
    assert message.startswith("cluster https://127.0.0.1:1 (kubeconfig"), message
    assert "is not usable: unreachable: " in message, message
    assert "\n" not in message, message


def test_fake_nodes_have_distinct_loopback_addresses(cluster: ClusterInfo) -> None:
    with client_from_kubeconfig(cluster.kubeconfig) as api:
        nodes = client.CoreV1Api(api).list_node().items
    addresses = {
        n.metadata.name: [a.address for a in n.status.addresses if a.type == "InternalIP"]
        for n in nodes
        if n.metadata.name in cluster.nodes
    }
    flat = [ip for ips in addresses.values() for ip in ips]
    assert all(ip.startswith("127.") for ip in flat) and len(set(flat)) == len(cluster.nodes), addresses


def _holder() -> subprocess.Popen[bytes]:
    """A stand-in for a pytest run holding the cluster: lives until killed."""
    return subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)


def _backend_of(state_dir: Path, timeouts: Timeouts, owner: subprocess.Popen[bytes]) -> LocalBackend:
    return LocalBackend(LocalClusterConfig(state_dir=state_dir, nodes=1, timeouts=timeouts, owner_pid=owner.pid))


def _await_watched(backend: LocalBackend, owners: list[int], timeouts: Timeouts, what: str) -> None:
    """Wait until the supervisor's state says it watches exactly `owners` (sorted pids)."""
    waits.until(
        lambda: json.loads(backend.layout.state.read_text()),
        lambda state: state["owners"] == owners,
        timeout=timeouts.process_stop,
        what=what,
        describe=lambda state: f"phase {state['phase']}, watching {state['owners']}",
    )


def test_a_run_that_attached_keeps_the_cluster_after_the_run_that_started_it_released_it(
    tmp_path: Path, timeouts: Timeouts
) -> None:
    first, second = _holder(), _holder()
    starter, attached = (
        _backend_of(tmp_path / "cluster", timeouts, first),
        _backend_of(tmp_path / "cluster", timeouts, second),
    )
    try:
        started = starter.start()
        pids = _component_pids(started)
        assert attached.start().details["supervisor_pid"] == started.details["supervisor_pid"]
        assert not starter.ends_with(first.pid), "another run holds the cluster: the starter's release keeps it"
        starter.release(first.pid)
        first.kill()
        first.wait()
        # The supervisor saw its first owner exit and, under the lock, kept the cluster for the second.
        _await_watched(starter, [second.pid], timeouts, f"supervisor watching only the attached run {second.pid}")
        running = attached.info()
        assert running is not None and _component_pids(running) == pids, running
        assert all(_alive(pid) for pid in pids.values()), pids
        assert not attached.ends_with(first.pid), "a run that released the cluster no longer holds it"
        assert attached.ends_with(second.pid), "the last holder's release stops the cluster"
        attached.release(second.pid)  # the last one out stops it
        assert attached.info() is None
        assert {name: pid for name, pid in pids.items() if _alive(pid)} == {}
    finally:
        for holder in (first, second):
            holder.kill()
            holder.wait()
        starter.stop()


def test_the_cluster_stops_when_its_last_owner_dies_without_releasing_it(tmp_path: Path, timeouts: Timeouts) -> None:
    first, second = _holder(), _holder()
    starter, attached = (
        _backend_of(tmp_path / "cluster", timeouts, first),
        _backend_of(tmp_path / "cluster", timeouts, second),
    )
    try:
        pids = _component_pids(starter.start())
        attached.start()
        _await_watched(
            starter,
            sorted([first.pid, second.pid]),
            timeouts,
            f"supervisor watching both runs {first.pid} and {second.pid}",
        )
        second.kill()  # the attached run dies first, unclean: the starter still holds the cluster
        second.wait()
        waits.until(
            lambda: (json.loads(starter.layout.state.read_text()), json.loads(starter.layout.owners.read_text())),
            lambda seen: seen[0]["owners"] == [first.pid] and [o["pid"] for o in seen[1]["owners"]] == [first.pid],
            timeout=timeouts.process_stop,
            what=f"supervisor watching, and the owners file listing, only the starting run {first.pid}",
            describe=lambda seen: f"phase {seen[0]['phase']}, watching {seen[0]['owners']}, owners file {seen[1]}",
        )
        assert starter.info() is not None, "the cluster stopped while its starter still held it"
        first.kill()
        first.wait()
        waits.until(
            lambda: {name: pid for name, pid in pids.items() if _alive(pid)},
            lambda alive: not alive,
            timeout=3 * timeouts.process_stop,
            what="every component to exit after the last owner was killed",
            describe=lambda alive: f"still running: {alive}",
        )
        assert starter.info() is None
    finally:
        for holder in (first, second):
            holder.kill()
            holder.wait()
        starter.stop()


def test_a_driver_kill_is_recorded_while_the_cluster_lock_is_held_after_an_owner_exited(
    tmp_path: Path, timeouts: Timeouts
) -> None:
    """A driver swap holds the cluster's lock while it waits for its kill of the old driver to be recorded.

    The supervisor settles an owner's exit under that lock: it must go on recording exits until it gets it (CI of
    239bb12: a mutant's swap timed out because the previous mutant's run had just exited).
    """
    first, second = _holder(), _holder()
    starter, attached = (
        _backend_of(tmp_path / "cluster", timeouts, first),
        _backend_of(tmp_path / "cluster", timeouts, second),
    )
    try:
        starter.start()
        attached.start()
        _await_watched(
            starter,
            sorted([first.pid, second.pid]),
            timeouts,
            f"supervisor watching both runs {first.pid} and {second.pid}",
        )
        with FileLock(str(starter.layout.lock)):
            second.kill()
            second.wait()
            _await_watched(starter, [first.pid], timeouts, f"supervisor no longer watching the killed run {second.pid}")
            assert starter.kill_driver("kwok-node-0") == -9
        waits.until(
            lambda: [o["pid"] for o in json.loads(starter.layout.owners.read_text())["owners"]],
            lambda owners: owners == [first.pid],
            timeout=timeouts.process_stop,
            what=f"owners file pruned to the starting run {first.pid} once the lock was free",
            describe=str,
        )
        assert starter.info() is not None, "the cluster stopped while its starter still held it"
    finally:
        for holder in (first, second):
            holder.kill()
            holder.wait()
        starter.stop()


def test_restarting_one_killed_driver_leaves_another_killed_driver_down(private_backend: LocalBackend) -> None:
    """Two test processes disrupt drivers of one cluster at once (pytest -n 2): one's restart is not the other's."""
    private_backend.start()
    first, second = "kwok-set-aside-0", "kwok-set-aside-1"
    assert private_backend.kill_driver(first) == -9
    assert private_backend.kill_driver(second) == -9
    private_backend.start_driver(first)

    state = private_backend.supervised.state() or {}
    assert drivers.process_name(second) in state.get("exited", {}), (
        f"the driver on {second}, killed and not restarted, runs again after {first}'s restart: "
        f"exited {state.get('exited')}, processes {state.get('processes')}"
    )
    assert private_backend.kill_driver(first) == -9, "a restarted driver is killed and recorded again"
    private_backend.start_driver(second)
    private_backend.start_driver(first)
