"""The real node leaves nothing behind: after `down`, after SIGINT, after a killed run, and with a shipped driver.

What a real node adds to the host (the list `real_node_host.leftovers` checks): kubepods cgroups in every hierarchy,
mounts under its directories, network namespaces, the CNI bridge, containerd shims, fixed paths the kubelet and
containerd use, and sysctls the kubelet and the bridge change. Each test first sees some of it in place (so the
check can fail), then none of it after the stop. A shipped driver's manifests add the host paths they mount
(hostPath volumes the kubelet creates) and CDI specs in /etc/cdi and /var/run/cdi: after `down`, each of those is as
it was before the cluster started.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_conformance.backends.local import install_record, real_node_host, shipped
from dra_conformance.backends.local.backend import LocalBackend, LocalClusterConfig
from dra_conformance.backends.local.layout import CONTAINERD_CDI_DIRS, STANDARD_KUBELET_ROOT, STATIC_CDI_DIR
from dra_conformance.backends.local.node_namespace import NodeNamespace
from dra_conformance.backends.local.real_node_host import HostRecord, host_record_path, snapshot
from dra_conformance.driver.profile import load_profile
from dra_conformance.kube import waits
from dra_conformance.timeouts import Timeouts
from tests.reference_image import IMAGE_BUILD_DEADLINE, SHIPPED_PROFILE, shipped_driver_cluster

pytestmark = [
    pytest.mark.xdist_group("real-node"),  # one real node per machine: fixed paths, ports and the bridge
    pytest.mark.skipif(os.geteuid() != 0, reason="not applicable: a real node needs root (cgroups, mounts, sysctls)"),
]


@pytest.fixture
def real_backend(tmp_path: Path, timeouts: Timeouts) -> Iterator[LocalBackend]:
    backend = LocalBackend(
        LocalClusterConfig(state_dir=tmp_path / "cluster", nodes=1, metrics="none", real_node=True, timeouts=timeouts)
    )
    yield backend
    backend.stop()


def _started(backend: LocalBackend) -> HostRecord:
    info = backend.start()
    assert info.real_nodes == (real_node_host.REAL_NODE,), info.real_nodes
    record = HostRecord.read(host_record_path(backend.layout))
    assert record is not None, "no host record written before the node started"
    # The driver's token-holder pod runs on the node: a sandbox, its cgroups, mounts and network are in place.
    assert real_node_host.leftovers(backend.layout), "nothing of the real node found on the host while it runs"
    # The kubelet's root is the standard one: the driver registered there (so the check below can fail).
    registered = sorted(p.name for p in (STANDARD_KUBELET_ROOT / "plugins_registry").glob("*.sock"))
    assert registered, f"no registration socket in {STANDARD_KUBELET_ROOT}/plugins_registry while the node runs"
    return record


def _kubelet_root_as_before(record: HostRecord) -> None:
    """Nothing is in /var/lib/kubelet that was not there before the node started (absent then: absent now)."""
    root = STANDARD_KUBELET_ROOT
    if str(root) in record.absent_paths:
        assert not os.path.lexists(root), f"{root} did not exist before the node, and holds now: {snapshot(root)}"
        return
    added = sorted(set(snapshot(root)) - set(record.entries[str(root)]))
    assert added == [], f"left in {root} by the real node: {added}"


def _assert_host_restored(backend: LocalBackend, record: HostRecord) -> None:
    left = real_node_host.leftovers(backend.layout)
    assert left == [], f"left behind by the real node: {left}"
    changed = {
        name: Path("/proc/sys", *name.split(".")).read_text().strip()
        for name, value in record.sysctls.items()
        if Path("/proc/sys", *name.split(".")).read_text().strip() != value
    }
    assert changed == {}, f"sysctls not restored (now; were {record.sysctls}): {changed}"
    _kubelet_root_as_before(record)


def test_down_leaves_nothing_of_the_real_node_behind(real_backend: LocalBackend) -> None:
    record = _started(real_backend)
    real_backend.stop()
    _assert_host_restored(real_backend, record)


def _supervisor_pid(backend: LocalBackend) -> int:
    info = backend.info()
    assert info is not None, "cluster not running"
    return int(info.details["supervisor_pid"])


def test_sigint_to_the_cluster_leaves_nothing_of_the_real_node_behind(
    real_backend: LocalBackend, timeouts: Timeouts
) -> None:
    record = _started(real_backend)
    pid = _supervisor_pid(real_backend)
    os.kill(pid, signal.SIGINT)  # what Ctrl-C at `cluster up`'s terminal sends
    # The supervisor stops its children (two groups, process_stop each), then tears the node down, then exits:
    # the same budget `cluster down` gives it.
    # (Its last state write comes after the teardown; the process itself lingers as our zombie, so watch the state.)
    waits.until(
        lambda: json.loads(real_backend.layout.state.read_text())["phase"],
        lambda phase: phase in {"stopped", "failed"},
        timeout=3 * timeouts.process_stop,
        what=f"supervisor {pid} finished after SIGINT",
    )
    teardown_log = real_backend.layout.component_log("teardown")
    assert not host_record_path(real_backend.layout).exists(), (
        "the supervisor exited without finishing the real node's teardown; its log says: "
        f"{teardown_log.read_text()[-2000:] if teardown_log.exists() else '(no teardown log)'}"
    )
    _assert_host_restored(real_backend, record)


def test_a_killed_run_is_undone_by_the_next_down(real_backend: LocalBackend, timeouts: Timeouts) -> None:
    record = _started(real_backend)
    os.kill(_supervisor_pid(real_backend), signal.SIGKILL)  # no teardown: kubelet and containerd die with it
    waits.until(
        real_backend.info,
        lambda info: info is None,
        timeout=timeouts.process_stop,
        what="supervisor gone",
        describe=str,
    )
    left = real_node_host.leftovers(real_backend.layout)
    assert left, "a killed run left nothing behind, so this test shows nothing about down"
    real_backend.stop()
    _assert_host_restored(real_backend, record)


# Start (the image archive imported, the chart applied, the driver registered) and stop of the shipped driver's
# cluster on a loaded machine.
SHIPPED_CLUSTER_DEADLINE = 600.0
# A static CDI spec, as a chart's node set-up writes one; the test's own name, so nothing of the host's is touched.
STATIC_SPEC = STATIC_CDI_DIR / "dra-conformance-test-static.json"


def _as_found(path: Path) -> list[str] | None:
    """What is at `path`: None where nothing is, else every path below it ([] for a file or an empty directory)."""
    if not os.path.lexists(path):
        return None
    return snapshot(path) if path.is_dir() and not path.is_symlink() else []


def _on_its_own_node(backend: LocalBackend, driver: str) -> NodeNamespace:
    """The second real node, checked to run the driver in its own kubelet root (not the host's /var/lib/kubelet)."""
    further = NodeNamespace.of(backend.layout, real_node_host.node_name(1), 1)
    assert further.leftovers(), f"nothing of {further.node}'s namespaces on the host while it runs"
    own = sorted(p.name for p in (further.kubelet_root / "plugins_registry").glob(f"{driver}-*-reg.sock"))
    host = sorted(p.name for p in (STANDARD_KUBELET_ROOT / "plugins_registry").glob(f"{driver}-*-reg.sock"))
    # One registration each, by different pods: the two kubelets see two roots, not one shared.
    assert len(own) == 1 and len(host) == 1 and own != host, f"{further.node}: {own}; real-node-0: {host}"
    return further


@pytest.mark.timeout(IMAGE_BUILD_DEADLINE + SHIPPED_CLUSTER_DEADLINE)
def test_down_leaves_the_host_paths_of_a_shipped_driver_on_two_real_nodes_as_they_were(tmp_path: Path) -> None:
    profile = load_profile(SHIPPED_PROFILE)
    assert profile.install is not None
    mounted = install_record.host_paths_of(shipped.load_manifests(profile.install.manifests))
    watched = sorted({*map(Path, mounted), *CONTAINERD_CDI_DIRS})
    before = {path: _as_found(path) for path in watched}
    assert not os.path.lexists(STATIC_SPEC), f"{STATIC_SPEC} is there before the test: left by an earlier run?"
    try:
        with shipped_driver_cluster(tmp_path / "cluster", real_nodes=2) as backend:
            info = backend.start()
            assert info.driver_daemonsets == ("fake-dra/fake-dra-kubelet-plugin",), info.driver_daemonsets
            assert info.real_nodes == (real_node_host.REAL_NODE, real_node_host.node_name(1)), info.real_nodes
            further = _on_its_own_node(backend, profile.driver)
            record = HostRecord.read(host_record_path(backend.layout))
            installed = install_record.InstallRecord.read(install_record.record_path(backend.layout))
            assert record is not None and installed is not None, "no host or install record while the node runs"
            assert set(installed.existed) == set(mounted) and installed.refused == {}, installed
            # What a chart's node set-up does: a static spec in /etc/cdi, which the node's containerd now reads.
            STATIC_SPEC.parent.mkdir(parents=True, exist_ok=True)
            STATIC_SPEC.write_text('{"cdiVersion": "0.6.0", "kind": "example.com/test", "devices": []}')
            during = {path: _as_found(path) for path in watched}
            assert during != before, f"the run changed none of {watched}, so the check below shows nothing"
            backend.stop()
        _assert_host_restored(backend, record)
        assert further.leftovers() == [], f"left of {further.node}'s namespaces: {further.leftovers()}"
        after = {path: _as_found(path) for path in watched}
        changed = {str(path): (before[path], after[path]) for path in watched if after[path] != before[path]}
        assert changed == {}, f"not as before the cluster started (before, after): {changed}"
    finally:
        STATIC_SPEC.unlink(missing_ok=True)  # nothing of the test's own on the host, whatever failed
