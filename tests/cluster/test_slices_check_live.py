"""`dra-conformance slices check --kubeconfig`: a live cluster's ResourceSlices, listed by the real API server.

Each case runs the command as a user would, against the run's local cluster: the reference driver's own pools (the
`gpu` device profile on every fake node), a private instance publishing its `gpu-partitions` pool (the pool the
unit tests and bench/bench_slices_check.py read from drivers/fake-dra-go/testdata), and an identity that may not
list ResourceSlices. The allocator program is built (or found in the build cache) once per module, outside the
tests' deadlines; nothing this module creates is cluster-wide (a private driver named after the test's namespace, a
ServiceAccount in it), so parallel workers do not meet.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_conformance.backends.registry import build_slice_allocator
from dra_conformance.config import SuiteConfig
from dra_conformance.driver.reference import PrivateDriver
from dra_conformance.kube import builders, kubeconfig, waits
from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.kube.identities import request_token
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.timeouts import Timeouts

REFERENCE_DRIVER = "gpu.fake-dra.example.com"
# Python start-up, one LIST and the allocator's run (well under a second on the pools here); guards a hang only.
COMMAND_DEADLINE = 120.0
# The reference driver publishes `devices.perNode` devices per node (fixtures/profiles/reference-driver.yaml), none
# consuming counters: one shape, so combinations of 1..8 of it, each asked three ways, after each device alone.
DEVICES_PER_NODE = 8
# Two GPUs of the gpu-partitions profile: 14 devices (a whole, two halves and four quarters each) in three shapes,
# 164 combinations up to the default bound of 8 devices, 14 + 3 x 164 allocations, as bench_slices_check measures.
PARTITION_GPUS = 2
PARTITION_DEVICES = 14
PARTITION_COMBINATIONS = 164
PARTITION_ALLOCATIONS = PARTITION_DEVICES + 3 * PARTITION_COMBINATIONS


@pytest.fixture(scope="module")
def allocator_built(suite_config: SuiteConfig) -> None:
    """The allocator program in the run's build cache, so the commands below only find it (a first build is Go's)."""
    build_slice_allocator(suite_config)


def _check(
    kubeconfig_path: Path, driver: str, suite_config: SuiteConfig, workdir: Path
) -> subprocess.CompletedProcess[str]:
    cache = [f"--cache-dir={suite_config.cache_dir}"] if suite_config.cache_dir else []
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "dra_conformance.cli",
            "slices",
            "check",
            f"--kubeconfig={kubeconfig_path}",
            f"--driver={driver}",
            *cache,
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=COMMAND_DEADLINE,
        check=False,
    )


def _pools_listed(api_client: client.ApiClient, driver: str) -> dict[str, list[dict[str, Any]]]:
    """The driver's slices as the API server lists them, by pool."""
    group, version = RESOURCE_API.split("/")
    listed = client.CustomObjectsApi(api_client).list_cluster_custom_object(
        group, version, "resourceslices", field_selector=f"spec.driver={driver}"
    )
    pools: dict[str, list[dict[str, Any]]] = {}
    for piece in listed["items"]:
        pools.setdefault(piece["spec"]["pool"]["name"], []).append(piece)
    return pools


def _complete(pools: dict[str, list[dict[str, Any]]]) -> bool:
    return bool(pools) and all(
        len(pieces) == pieces[0]["spec"]["pool"]["resourceSliceCount"] for pieces in pools.values()
    )


def _pool_lines(stdout: str, driver: str) -> dict[str, str]:
    """The report's line per pool, by pool name."""
    found = (re.match(rf"pool {re.escape(driver)}/(\S+): ", line) for line in stdout.splitlines())
    return {match.group(1): match.string for match in found if match}


@pytest.mark.usefixtures("allocator_built")
def test_the_reference_drivers_pools_on_the_cluster_are_checked_without_findings(
    cluster: ClusterInfo, api_client: client.ApiClient, suite_config: SuiteConfig, tmp_path: Path
) -> None:
    pools = _pools_listed(api_client, REFERENCE_DRIVER)
    assert pools, f"the reference driver publishes no slices on {cluster.kubeconfig}"
    result = _check(cluster.kubeconfig, REFERENCE_DRIVER, suite_config, tmp_path)
    observed = f"exit {result.returncode}\n{result.stdout}{result.stderr[-2000:]}"
    assert result.returncode == 0, observed
    lines = result.stdout.splitlines()
    assert lines[0] == f"slices check of the cluster of {cluster.kubeconfig}: {len(pools)} pools", observed
    by_pool = _pool_lines(result.stdout, REFERENCE_DRIVER)
    assert sorted(by_pool) == sorted(pools), observed
    assert not [line for line in lines if line.startswith("pool ") and line not in by_pool.values()], (
        f"another driver's pool in the report: {observed}"
    )
    for line in by_pool.values():
        assert (
            f": {DEVICES_PER_NODE} devices in 1 shapes, 0 counter sets; tried {DEVICES_PER_NODE} devices alone and "
            f"{DEVICES_PER_NODE} combinations x 3 ways ({DEVICES_PER_NODE * 4} allocated)"
        ) in line, observed
        assert line.endswith(
            f"largest allocated: {DEVICES_PER_NODE} devices (the counters allow {DEVICES_PER_NODE})"
        ), observed
    assert lines[-1].startswith(
        f"no findings: {DEVICES_PER_NODE * len(pools)} combinations, "
        f"{DEVICES_PER_NODE * 4 * len(pools)} allocations asked of the allocator in "
    ), observed


@pytest.mark.usefixtures("allocator_built")
def test_a_partitionable_pool_on_the_cluster_gets_every_combination_up_to_the_bound(
    cluster: ClusterInfo,
    api_client: client.ApiClient,
    private_driver: Callable[..., PrivateDriver],
    suite_config: SuiteConfig,
    timeouts: Timeouts,
    tmp_path: Path,
) -> None:
    # As the partition checks start it (suites/partitions/conftest.py): the driver's name derives from `gpu`.
    driver = private_driver(devices=PARTITION_GPUS, args=("--profile=gpu-partitions",)).name
    pools = waits.until(
        lambda: _pools_listed(api_client, driver),
        _complete,
        timeout=timeouts.driver_ready,
        what=f"every slice of {driver}'s pool published",
    )
    result = _check(cluster.kubeconfig, driver, suite_config, tmp_path)
    observed = f"exit {result.returncode}\n{result.stdout}{result.stderr[-2000:]}"
    assert result.returncode == 0, observed
    lines = result.stdout.splitlines()
    assert lines[0] == f"slices check of the cluster of {cluster.kubeconfig}: 1 pools", observed
    (line,) = _pool_lines(result.stdout, driver).values()
    assert line.startswith(f"pool {driver}/{next(iter(pools))}: "), observed
    assert (
        f"{PARTITION_DEVICES} devices in 3 shapes, {PARTITION_GPUS} counter sets; tried {PARTITION_DEVICES} devices "
        f"alone and {PARTITION_COMBINATIONS} combinations x 3 ways ("
    ) in line, observed
    assert line.endswith("largest allocated: 8 devices (the counters allow 8)"), observed
    assert lines[-1].startswith(
        f"no findings: {PARTITION_COMBINATIONS} combinations, {PARTITION_ALLOCATIONS} allocations asked"
    ), observed


def test_an_identity_that_may_not_list_slices_gets_one_line_and_exit_2(
    api_client: client.ApiClient,
    tracker: ResourceTracker,
    namespace: str,
    suite_config: SuiteConfig,
    tmp_path: Path,
) -> None:
    """A ServiceAccount with no rights (it goes with the test's namespace): the API server's 403, not a traceback."""
    tracker.create(builders.service_account("no-rights", namespace))
    ca_pem = Path(api_client.configuration.ssl_ca_cert).read_bytes()
    token = request_token(api_client, namespace, "no-rights")
    document = kubeconfig.render(str(api_client.configuration.host), ca_pem, user="no-rights", token=token)
    path = kubeconfig.write(tmp_path / "no-rights.kubeconfig", document)
    result = _check(path, REFERENCE_DRIVER, suite_config, tmp_path)
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    observed = f"exit {result.returncode}, output {lines}"
    assert result.returncode == 2, observed
    assert lines == [f"dra-conformance: list ResourceSlices of {path}: 403 Forbidden"], observed
