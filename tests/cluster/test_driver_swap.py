"""`--replace-driver`: a running local cluster gets another profile's driver, and nothing of the old one is left.

Each test starts its own one-node cluster in a temporary state directory, owned by this test process.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from dra_conformance.backends.local import drivers
from dra_conformance.backends.local.backend import LocalBackend, LocalClusterConfig
from dra_conformance.driver.pool import node_pools
from dra_conformance.errors import UsageError
from dra_conformance.kube.client import client_from_kubeconfig
from dra_conformance.timeouts import Timeouts
from tests.shared_cluster import renamed_reference_profile


def _alive(pid: int) -> bool:
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


@pytest.fixture
def first_driver(tmp_path: Path, timeouts: Timeouts) -> Iterator[tuple[LocalBackend, Path]]:
    """A one-node cluster running the driver gpu-a.swap.example.com, owned by this process; stopped afterwards."""
    config = LocalClusterConfig(
        state_dir=tmp_path / "cluster",
        nodes=1,
        timeouts=timeouts,
        owner_pid=None,
        profile=renamed_reference_profile(tmp_path, "gpu-a.swap.example.com", 2),
    )
    backend = LocalBackend(config)
    try:
        backend.start()
        yield backend, tmp_path
    finally:
        backend.stop()


def test_replaced_driver_leaves_no_process_slice_or_socket_and_the_new_one_publishes_complete_pools(
    first_driver: tuple[LocalBackend, Path], timeouts: Timeouts
) -> None:
    backend, directory = first_driver
    before = backend.info()
    assert before is not None
    old_pids = {k: int(v) for k, v in before.details.items() if k.startswith("pid.driver-")}
    old_sockets = [endpoint.registration_socket for endpoint in before.drivers]
    second = renamed_reference_profile(directory, "gpu-b.swap.example.com", 3)

    after = LocalBackend(
        LocalClusterConfig(
            state_dir=backend.config.state_dir, nodes=1, timeouts=timeouts, profile=second, replace_driver=True
        )
    ).start()

    assert after.details["supervisor_pid"] == before.details["supervisor_pid"], "the control plane was restarted"
    assert after.details["profile"] == str(second), after.details["profile"]
    still = {name: pid for name, pid in old_pids.items() if _alive(pid)}
    assert not still, f"old driver processes still running: {still}"
    assert not [path for path in old_sockets if path.exists()], f"old sockets left: {old_sockets}"
    with client_from_kubeconfig(after.kubeconfig) as api:
        slices = client.ResourceV1Api(api).list_resource_slice().items
        drivers_seen = sorted({item.spec.driver for item in slices})
        assert drivers_seen == ["gpu-b.swap.example.com"], f"slices of drivers {drivers_seen} after the swap"
        for endpoint in after.drivers:
            pools = node_pools(api, "gpu-b.swap.example.com", endpoint.node)
            assert pools and all(pool.complete for pool in pools.values()), f"{endpoint.node}: {pools}"
            assert len([d for item in slices if item.spec.node_name == endpoint.node for d in item.spec.devices]) == 3


def test_replace_is_refused_while_another_run_holds_the_cluster(
    first_driver: tuple[LocalBackend, Path], timeouts: Timeouts
) -> None:
    backend, directory = first_driver
    holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        attach = LocalClusterConfig(
            state_dir=backend.config.state_dir,
            nodes=1,
            timeouts=timeouts,
            profile=backend.config.profile,
            owner_pid=holder.pid,
        )
        LocalBackend(attach).start()
        second = renamed_reference_profile(directory, "gpu-b.swap.example.com", 3)
        replace = LocalClusterConfig(
            state_dir=backend.config.state_dir, nodes=1, timeouts=timeouts, profile=second, replace_driver=True
        )
        with pytest.raises(UsageError) as refused:
            LocalBackend(replace).start()
    finally:
        holder.kill()
        holder.wait()
    message = str(refused.value)
    assert f"runs {holder.pid} hold the cluster and would lose their driver midway" in message, message
    info = backend.info()
    assert info is not None and info.details["profile"] == str(backend.config.profile), "the driver was swapped"
    assert drivers.identity_path(backend.layout).exists(), "the refused swap removed the driver's identity record"


def test_a_directory_that_existed_before_the_run_survives_the_swap_and_cluster_down(
    tmp_path: Path, timeouts: Timeouts
) -> None:
    """A host directory the profile names in `createDirs` (allowed by `hostPaths`) is the user's, not the run's."""
    host = tmp_path / "host-existing"
    host.mkdir()
    (host / "keep.txt").write_text("mine")
    profile = renamed_reference_profile(tmp_path, "gpu-a.swap.example.com", 2)
    raw = yaml.safe_load(profile.read_text())
    raw["run"]["createDirs"] = [str(host), "{data_dir}/scratch"]
    raw["hostPaths"] = [*raw["hostPaths"], str(host)]
    profile.write_text(yaml.safe_dump(raw, sort_keys=False))
    backend = LocalBackend(
        LocalClusterConfig(state_dir=tmp_path / "cluster", nodes=1, timeouts=timeouts, owner_pid=None, profile=profile)
    )
    try:
        started = backend.start()
        scratch = [backend.layout.root / "nodes" / node / "driver-data" / "scratch" for node in started.nodes]
        assert all(path.is_dir() for path in scratch), f"createDirs not created: {scratch}"
        second = renamed_reference_profile(tmp_path, "gpu-b.swap.example.com", 3)
        LocalBackend(
            LocalClusterConfig(
                state_dir=backend.config.state_dir, nodes=1, timeouts=timeouts, profile=second, replace_driver=True
            )
        ).start()
        assert sorted(p.name for p in host.iterdir()) == ["keep.txt"], f"after the swap: {list(host.iterdir())}"
        assert not [path for path in scratch if path.exists()], f"the swap left what it created: {scratch}"
    finally:
        backend.stop()
    assert (host / "keep.txt").read_text() == "mine", f"after cluster down: {list(host.iterdir())}"
