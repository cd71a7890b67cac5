"""Fixtures every check builds on: the run's settings, the cluster, API clients, namespaces and the tracker."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from dra_conformance.canary.inputs import PROVOKED_RECORDS
from dra_conformance.config import SuiteConfig
from dra_conformance.errors import ConformanceError
from dra_conformance.kube.client import client_from_kubeconfig
from dra_conformance.kube.leaks import audit_namespace
from dra_conformance.kube.namespaces import NamespaceReaper, create_namespace
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.records import RunRecords
from dra_conformance.plugin import stash
from dra_conformance.plugin.session import backend_of, cluster_ends_with_run
from dra_conformance.timeouts import Timeouts


@pytest.fixture(scope="session")
def suite_config(conformance_run: None, pytestconfig: pytest.Config) -> SuiteConfig:
    """The run's settings."""
    return pytestconfig.stash[stash.SUITE_CONFIG]


@pytest.fixture(scope="session")
def run_dir(conformance_run: None, pytestconfig: pytest.Config) -> Path:
    """reports/<run-id>/ of this run (shared by all workers)."""
    return pytestconfig.stash[stash.RUN_DIR]


@pytest.fixture(scope="session")
def run_id(conformance_run: None, pytestconfig: pytest.Config) -> str:
    """Identifier of this run, shared by all workers; also labels every namespace the run creates."""
    return pytestconfig.stash[stash.RUN_ID]


@pytest.fixture(scope="session")
def run_records(pytestconfig: pytest.Config, run_dir: Path) -> RunRecords:
    """The part of the run report this worker writes (see `dra_conformance.report`)."""
    return RunRecords(run_dir, stash.worker_name(pytestconfig))


@pytest.fixture(scope="session")
def timeouts(pytestconfig: pytest.Config, suite_config: SuiteConfig) -> Timeouts:
    """The run's named deadlines, scaled by the driver profile's timeout multipliers."""
    return pytestconfig.stash[stash.PROFILE].timeouts.apply(suite_config.timeouts)


@pytest.fixture(scope="session")
def cluster(conformance_run: None, pytestconfig: pytest.Config) -> ClusterInfo:
    """The cluster under test: the one the controller checked, else started (local) once per run."""
    if stash.CLUSTER in pytestconfig.stash:
        return pytestconfig.stash[stash.CLUSTER]
    try:
        return backend_of(pytestconfig).start()
    except ConformanceError as error:
        pytest.fail(f"dra-conformance: {error}", pytrace=False)


@pytest.fixture(scope="session")
def api_client(cluster: ClusterInfo, suite_config: SuiteConfig) -> Iterator[client.ApiClient]:
    """An admin ApiClient of the official `kubernetes` package."""
    context = suite_config.context if cluster.backend == "existing" else None
    with client_from_kubeconfig(cluster.kubeconfig, context) as api:
        yield api


@pytest.fixture(scope="session")
def dynamic_client(api_client: client.ApiClient, tmp_path_factory: pytest.TempPathFactory) -> DynamicClient:
    """A dynamic client (discovery cached in the session's temp dir, not in /tmp)."""
    return DynamicClient(api_client, cache_file=str(tmp_path_factory.mktemp("discovery") / "cache.json"))


def _namespace_name(nodeid: str) -> str:
    test = re.sub(r"[^a-z0-9]+", "-", nodeid.split("::")[-1].lower()).strip("-")
    return f"{test[:40].rstrip('-')}-{secrets.token_hex(3)}"


@pytest.fixture(scope="session")
def namespace_reaper(
    api_client: client.ApiClient, timeouts: Timeouts, pytestconfig: pytest.Config
) -> Iterator[NamespaceReaper]:
    """Session-wide owner of test namespace deletion (see `NamespaceReaper`).

    Where the cluster stops with this run, the namespaces go with it: deleting and awaiting them would only load and
    delay the stop of a cluster nobody will look at again. Otherwise every deletion is requested as its test ends
    and all are awaited at the session's end. Whether the cluster stops is asked again then: a run that attached
    to it meanwhile keeps it, and gets it without this run's namespaces.
    """
    reaper = NamespaceReaper(
        client.CoreV1Api(api_client), timeouts.delete, discarded_with_cluster=cluster_ends_with_run(pytestconfig)
    )
    yield reaper
    reaper.settle(cluster_discarded=cluster_ends_with_run(pytestconfig))


@pytest.fixture
def namespace(
    request: pytest.FixtureRequest,
    api_client: client.ApiClient,
    run_id: str,
    timeouts: Timeouts,
    namespace_reaper: NamespaceReaper,
) -> Iterator[str]:
    """A fresh namespace for one test, with its default ServiceAccount; deleted afterwards (see `namespace_reaper`).

    A check marked `provokes(what)` makes the driver under test meet refusals here on purpose: its namespace and
    window go to the run's records, and the canary gate leaves what happened there out of its error budget.
    """
    name = _namespace_name(request.node.nodeid)
    since = datetime.now(UTC)
    try:
        create_namespace(api_client, name, run_id, timeouts.namespace_ready)
        yield name
    finally:
        for marker in request.node.iter_markers("provokes"):
            request.getfixturevalue("run_records").add(
                PROVOKED_RECORDS,
                {
                    "check": request.node.nodeid,
                    "what": str(marker.args[0]),
                    "namespace": name,
                    "since": since.isoformat(),
                    "until": datetime.now(UTC).isoformat(),
                },
            )
        if not request.config.getoption("--dra-keep-resources"):
            namespace_reaper.delete(name)


@pytest.fixture
def tracker(
    request: pytest.FixtureRequest, dynamic_client: DynamicClient, namespace: str, timeouts: Timeouts
) -> Iterator[ResourceTracker]:
    """Creates objects for the test and deletes them (newest first, awaited) before its namespace goes."""
    keep = request.config.getoption("--dra-keep-resources")
    resources = ResourceTracker(dynamic_client, delete_timeout=timeouts.delete, keep=keep)
    yield resources
    resources.cleanup()
    if not keep:
        audit_namespace(dynamic_client, namespace, timeouts.delete)
