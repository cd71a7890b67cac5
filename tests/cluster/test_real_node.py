"""The local cluster's real node leaves nothing behind: after `down`, after SIGINT, and after a killed run.

What a real node adds to the host (the list `real_node.leftovers` checks): kubepods cgroups in every hierarchy,
mounts under its directories, network namespaces, the CNI bridge, containerd shims, fixed paths the kubelet and
containerd use, and sysctls the kubelet and the bridge change. Each test first sees some of it in place (so the
check can fail), then none of it after the stop.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_conformance.backends.local import real_node
from dra_conformance.backends.local.backend import LocalBackend, LocalClusterConfig
from dra_conformance.backends.local.layout import STANDARD_KUBELET_ROOT
from dra_conformance.backends.local.real_node import HostRecord, host_record_path, snapshot
from dra_conformance.kube import waits
from dra_conformance.timeouts import Timeouts

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
    assert info.real_nodes == (real_node.REAL_NODE,), info.real_nodes
    record = HostRecord.read(host_record_path(backend.layout))
    assert record is not None, "no host record written before the node started"
    # The driver's token-holder pod runs on the node: a sandbox, its cgroups, mounts and network are in place.
    assert real_node.leftovers(backend.layout), "nothing of the real node found on the host while it runs"
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
    left = real_node.leftovers(backend.layout)
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
    left = real_node.leftovers(real_backend.layout)
    assert left, "a killed run left nothing behind, so this test shows nothing about down"
    real_backend.stop()
    _assert_host_restored(real_backend, record)
