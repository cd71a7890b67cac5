"""Fixtures for checks that talk to DRA drivers.

The driver under test, kubelet-side clients (and the `kubelet` role that prepares claims the way a kubelet
would), and private instances of the reference driver for tests that switch faults on, so that parallel tests
never see each other's faults.
"""

from __future__ import annotations

import functools
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path, PurePosixPath
from typing import Any

import allure
import pytest
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from dra_conformance.backends.registry import build_socket_relay
from dra_conformance.config import SuiteConfig
from dra_conformance.driver.applicability import require_private_instances
from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.lease import NodeLeases
from dra_conformance.driver.node_sockets import NodeSockets, SocketAccess, nodes_of_driver, reach_node_sockets
from dra_conformance.driver.profile import DriverProfile, Strictness
from dra_conformance.driver.real_node import (
    DEFAULT_WORKLOAD_IMAGE,
    CdiSpecFiles,
    RealNodeTarget,
    busybox_on,
    endpoint_from,
    real_node_hold,
    tolerations_of,
)
from dra_conformance.driver.reference import PrivateDriver, PrivateDrivers, behaviour_args, reference_program
from dra_conformance.driver.under_test import REAL_NODES_ONLY, DriverUnderTest
from dra_conformance.errors import BackendError, UsageError
from dra_conformance.kube.builders import Builder
from dra_conformance.kube.fault_proxy import ApiFaultProxy
from dra_conformance.kube.leaks import LeakError
from dra_conformance.kube.namespaces import NamespaceReaper, create_namespace
from dra_conformance.kube.pki import CertificateAuthority
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.client import DriverClient
from dra_conformance.kubelet.dra_metrics import EXCLUDED_RECORDS, KubeletWindow
from dra_conformance.kubelet.interposer import KubeletInterposer
from dra_conformance.kubelet.latency import LatencyLog
from dra_conformance.kubelet.node_agent import NodeAgents
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.cluster import (
    REAL_NODE_TAINT,
    BackendCapability,
    ClusterInfo,
    DriverProcesses,
    KubeletRestarts,
)
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.model.findings import Obligations
from dra_conformance.model.masking import ObservedMask
from dra_conformance.model.obligations import Registry
from dra_conformance.model.records import RunRecords
from dra_conformance.plugin import stash
from dra_conformance.plugin.session import backend_of
from dra_conformance.timeouts import Timeouts
from dra_wire.kubelet_api import BindingsError, KubeletAPI, load


@pytest.fixture(scope="session")
def kubelet_api(conformance_run: None) -> KubeletAPI:
    """Bindings of the kubelet plugin APIs (generated from the pinned .proto files on first use)."""
    try:
        return load()
    except BindingsError as error:
        raise BackendError(f"kubelet plugin API bindings: {error}") from None


@pytest.fixture(scope="session")
def driver_profile(conformance_run: None, pytestconfig: pytest.Config) -> DriverProfile:
    """The profile of the driver under test (`--dra-profile`, default the reference driver's)."""
    return pytestconfig.stash[stash.PROFILE]


@pytest.fixture(scope="session")
def driver_under_test(
    request: pytest.FixtureRequest, cluster: ClusterInfo, driver_profile: DriverProfile, api_client: client.ApiClient
) -> DriverUnderTest:
    """The driver being certified, with the kubelet-plugin sockets of it that this machine can reach.

    Where the backend runs the driver it says where its sockets are. Elsewhere (a cluster the suite did not
    build), node agents reach them on the nodes real kubelets serve (`node_sockets`).
    """
    if any(e.driver == driver_profile.driver for e in cluster.drivers) or not cluster.real_nodes:
        ours = driver_profile.driver
        endpoints = {e.node: e for e in cluster.drivers if e.driver == ours and e.node in cluster.nodes}
        if endpoints or not driver_profile.real_nodes_only:
            return DriverUnderTest(driver_profile, endpoints)
        # A driver on real nodes only (fixed kubelet paths, installed as shipped): the backend's real nodes run it
        # and their sockets are files on this machine. Socket checks and scenarios use those nodes, with their pods
        # held off the real kubelet (`PodHold`), as on a cluster the suite did not build.
        # The real node set aside for disruption checks is theirs alone.
        set_aside = cluster.disruption_real_node(ours)
        on_real = {
            e.node: e
            for e in cluster.drivers
            if e.driver == ours and e.node in cluster.real_nodes and e.node != set_aside
        }
        return DriverUnderTest(driver_profile, on_real, real_node_hold(api_client, tuple(on_real)) if on_real else None)
    reached: NodeSockets = request.getfixturevalue("node_sockets")
    return DriverUnderTest(driver_profile, reached.endpoints, reached.hold, reached.why_none(), reached.resync)


@pytest.fixture(scope="session")
def node_sockets(
    pytestconfig: pytest.Config,
    cluster: ClusterInfo,
    driver_profile: DriverProfile,
    api_client: client.ApiClient,
    node_agents: NodeAgents,
) -> Iterator[NodeSockets]:
    """The driver's sockets on the real nodes it publishes devices for, reached through node agents."""
    nodes = nodes_of_driver(api_client, driver_profile.driver, cluster.real_nodes)
    if not nodes:
        yield NodeSockets(unreachable={"any real node": f"{driver_profile.driver} publishes no ResourceSlice there"})
        return
    suite = pytestconfig.stash[stash.SUITE_CONFIG]
    reached = reach_node_sockets(
        api_client,
        driver_profile.driver,
        nodes,
        node_agents,
        lambda node: workload_image(pytestconfig, cluster, node),
        functools.partial(_socket_relay, suite),
        SocketAccess(pytestconfig.getoption("--dra-node-sockets") or SocketAccess.AUTO),
    )
    yield reached
    reached.close()


def _socket_relay(suite: SuiteConfig, architecture: str) -> Path:
    """The node agent's relay for `architecture` nodes; where it cannot be built, why, as the node's reason."""
    try:
        return build_socket_relay(suite, architecture)
    except UsageError:  # no Go toolchain here
        raise BackendError(
            f"the node agent's socket relay for {architecture} nodes cannot be built here: no usable Go toolchain "
            "(install Go >= 1.26, or run the suite's image, which ships the relay)"
        ) from None


def workload_image(pytestconfig: pytest.Config, cluster: ClusterInfo, node: dict[str, Any]) -> str:
    """The image with a shell that pods and agents on `node` (as the API returns it) run."""
    return str(
        pytestconfig.getoption("--dra-workload-image")
        or cluster.details.get("workload_image")
        or busybox_on(node)
        or DEFAULT_WORKLOAD_IMAGE
    )


@pytest.fixture(scope="session")
def node_leases(conformance_run: None, pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lock directory of node leases, shared by every xdist worker of the run (see `driver.lease`)."""
    base = tmp_path_factory.getbasetemp()
    # Each xdist worker's base temp dir sits in the run's one temp dir.
    return (base.parent if hasattr(pytestconfig, "workerinput") else base) / "node-leases"


@pytest.fixture
def held_nodes(
    request: pytest.FixtureRequest, driver_under_test: DriverUnderTest, node_leases: Path, timeouts: Timeouts
) -> Iterator[None]:
    """Where the driver's nodes have real kubelets (its pods held there), this test leases them all.

    Those nodes are shared with kubelet-mode checks and scenario runs, which lease them to use their devices
    alone; a socket check allocating there takes its turn too. Nothing to do where the driver's nodes are fake.
    Request it before the test's tracker, so the leases go only after the test's objects are gone.
    """
    if driver_under_test.hold is None:
        yield
        return
    with ExitStack() as held:
        for node in sorted(driver_under_test.hold.nodes):
            leases = NodeLeases(node_leases, "real", (node,))
            held.enter_context(leases.lease(timeout=timeouts.node_lease, holder=request.node.nodeid))
        yield


@pytest.fixture
def disruption(
    request: pytest.FixtureRequest,
    pytestconfig: pytest.Config,
    cluster: ClusterInfo,
    driver_under_test: DriverUnderTest,
    node_leases: Path,
    timeouts: Timeouts,
) -> Iterator[Disruption]:
    """The driver under test on a leased node only the test uses; running again, as it was, after the test.

    A driver on kwok nodes is disrupted on a set-aside node, as a process of the backend's. A driver installed as
    DaemonSet pods on the local cluster's real nodes is disrupted on a leased real node: stopped by holding its
    DaemonSets off the node (its pod's processes SIGKILLed), started by letting them on again.
    """
    backend = backend_of(pytestconfig)
    if not isinstance(backend, DriverProcesses):
        pytest.skip(f"not applicable: backend {cluster.backend} cannot kill and restart the driver's processes")
    if driver_under_test.profile.real_nodes_only:
        yield from _disruption_on_a_real_node(request, cluster, driver_under_test, backend, node_leases, timeouts)
        return
    if not cluster.set_aside_nodes:
        pytest.skip(f"not applicable: backend {cluster.backend} cannot kill and restart the driver's processes")
    leases = NodeLeases(node_leases, "set-aside", cluster.set_aside_nodes)
    with leases.lease(timeout=timeouts.node_lease, holder=request.node.nodeid) as node:
        endpoint = next((e for e in cluster.drivers if e.node == node and e.driver == driver_under_test.name), None)
        if endpoint is None:
            pytest.skip(f"not applicable: backend {cluster.backend} runs no {driver_under_test.name} on {node}")
        disrupted = Disruption(node, endpoint, backend)
        yield disrupted
        disrupted.restore()
        disrupted.back_to_own_build()


def _disruption_on_a_real_node(
    request: pytest.FixtureRequest,
    cluster: ClusterInfo,
    driver_under_test: DriverUnderTest,
    backend: DriverProcesses,
    node_leases: Path,
    timeouts: Timeouts,
) -> Iterator[Disruption]:
    installed = driver_under_test.profile.install
    if BackendCapability.LOCAL_PROCESSES not in cluster.capabilities or installed is None or not cluster.real_nodes:
        pytest.skip(
            f"not applicable: stopping {driver_under_test.name} and starting it again when the check says needs its "
            "DaemonSet pods on a real node of the local cluster, installed by the profile's `install`"
        )
    if not installed.transforms.pin_to_real_nodes:
        pytest.skip(
            f"not applicable: stopping {driver_under_test.name} holds its DaemonSets off a node, which needs the "
            "install's pinToRealNodes transform (its node affinity names the hold-off label)"
        )
    set_aside = cluster.disruption_real_node(driver_under_test.name)
    if set_aside is None:
        pytest.skip(
            f"not applicable: stopping {driver_under_test.name} needs a real node of its own, which other checks "
            f"leave alone: the cluster has {len(cluster.real_nodes)} real node(s) (--real-nodes 2 or more)"
        )
    # The kubelet-mode checks lease real nodes too ("real"): the set-aside one is taken from them for the check.
    leases = NodeLeases(node_leases, "real", (set_aside,))
    with leases.lease(timeout=timeouts.node_lease, holder=request.node.nodeid) as node:
        endpoint = next((e for e in cluster.drivers if e.node == node and e.driver == driver_under_test.name), None)
        if endpoint is None:
            pytest.skip(f"not applicable: backend {cluster.backend} runs no {driver_under_test.name} on {node}")
        toleration = {"key": REAL_NODE_TAINT["key"], "operator": "Exists", "effect": REAL_NODE_TAINT["effect"]}
        disrupted = Disruption(node, endpoint, backend, toleration=toleration, reroutable=False)
        yield disrupted
        disrupted.back_to_own_build()


@pytest.fixture(scope="session")
def node_agents(
    api_client: client.ApiClient, run_id: str, timeouts: Timeouts, namespace_reaper: NamespaceReaper
) -> Iterator[NodeAgents]:
    """Node agents for real nodes the backend does not describe; their namespace goes with the session."""

    def make_namespace() -> str:
        name = f"dra-node-agents-{secrets.token_hex(3)}"
        create_namespace(api_client, name, run_id, timeouts.namespace_ready)
        return name

    agents = NodeAgents(api_client, make_namespace, timeouts.pod_running)
    yield agents
    if agents.namespace is not None:
        namespace_reaper.delete(agents.namespace)


@pytest.fixture
def real_node(
    request: pytest.FixtureRequest,
    pytestconfig: pytest.Config,
    cluster: ClusterInfo,
    driver_under_test: DriverUnderTest,
    api_client: client.ApiClient,
    node_leases: Path,
    timeouts: Timeouts,
    node_agents: NodeAgents,
) -> Iterator[RealNodeTarget]:
    """A leased node a real kubelet serves; kubelet-mode checks share its driver, so they take turns there.

    Where the backend knows the node (local), its description gives the driver's sockets and CDI dir. Elsewhere a
    node agent finds the kubelet root and CDI dirs, reads CDI specs, and tells whether the sockets are in reach.
    """
    if not cluster.real_nodes:
        pytest.skip(
            f"not applicable: no node of this {cluster.backend} cluster is served by a real kubelet "
            "(the local backend adds one with --dra-real-node)"
        )
    leases = NodeLeases(node_leases, "real", cluster.real_nodes)
    with leases.lease(timeout=timeouts.node_lease, holder=request.node.nodeid) as name:
        node = client.CoreV1Api(api_client).read_node(name).to_dict()
        tolerations = tolerations_of(node["spec"].get("taints") or [])
        image = workload_image(pytestconfig, cluster, node)
        endpoint = next((e for e in cluster.drivers if e.node == name and e.driver == driver_under_test.name), None)
        if endpoint is not None:
            cdi = CdiSpecFiles((PurePosixPath(endpoint.cdi_dir),)) if endpoint.cdi_dir else None
            yield RealNodeTarget(name, endpoint, tolerations, image, cdi)
            return
        agent, layout = node_agents.on(name, image, tolerations)
        endpoint = endpoint_from(layout, driver_under_test.name)
        cdi = CdiSpecFiles(layout.cdi_dirs, None if layout.shares_this_machine else agent)
        yield RealNodeTarget(name, endpoint, tolerations, image, cdi, layout)


@pytest.fixture
def disrupted_real_node(
    request: pytest.FixtureRequest,
    pytestconfig: pytest.Config,
    cluster: ClusterInfo,
    driver_under_test: DriverUnderTest,
    api_client: client.ApiClient,
) -> RealNodeTarget:
    """The real node the `disruption` fixture stops the driver on, as kubelet-mode checks pin pods there.

    A check taking it takes `disruption` too (the same one, leased here: no other lease is taken). Not applicable,
    before any lease, where the driver would be stopped on a fake node, whose kwok reports nothing of a pod's
    devices: `disruption` stops a driver on a real node only where it is installed as DaemonSet pods on 2 or more.
    """
    driver = driver_under_test.name
    if not driver_under_test.profile.real_nodes_only:
        why = "its profile runs it on fake nodes too (nodes: realOnly and a DaemonSet install stop it on a real one)"
    elif cluster.disruption_real_node(driver) is None:
        why = f"this {cluster.backend} cluster has no real node of its own for it ({len(cluster.real_nodes)} real"
        why += " node(s), the driver on each; 2 or more needed)"
    else:
        why = ""
    if why:
        pytest.skip(
            f"not applicable: {driver} is stopped and started on a fake node, whose kwok reports nothing of a pod's "
            f"devices: {why}"
        )
    disruption: Disruption = request.getfixturevalue("disruption")
    node = client.CoreV1Api(api_client).read_node(disruption.node).to_dict()
    tolerations = tolerations_of(node["spec"].get("taints") or [])
    image = workload_image(pytestconfig, cluster, node)
    cdi = CdiSpecFiles((PurePosixPath(disruption.endpoint.cdi_dir),)) if disruption.endpoint.cdi_dir else None
    return RealNodeTarget(disruption.node, disruption.endpoint, tolerations, image, cdi)


@pytest.fixture
def interposer(
    request: pytest.FixtureRequest,
    real_node: RealNodeTarget,
    kubelet_api: KubeletAPI,
    timeouts: Timeouts,
    api_client: client.ApiClient,
    run_records: RunRecords,
) -> Iterator[KubeletInterposer]:
    """A kubelet-side fault interposer registered for the driver under test on the leased real node.

    The node's kubelet is read before and after: what it measured meanwhile (calls slowed or failed on purpose) is
    recorded to be taken out of the canary gate's kubelet figures.
    """
    if real_node.endpoint is None:
        pytest.skip(
            f"not applicable: the driver's sockets on {real_node.name} are not reachable from this machine (the "
            "interposer must run where the node's kubelet root is; run the suite on the node)"
        )
    # Unix socket paths are limited to 107 bytes: the interposer's socket goes in a short temporary directory.
    scratch = Path(tempfile.mkdtemp(prefix="dra-ip-"))
    interposer = KubeletInterposer(kubelet_api, real_node.endpoint, scratch)
    window = KubeletWindow(api_client, (real_node.name,)).start()
    try:
        interposer.start(timeouts.driver_ready)
        yield interposer
    finally:
        interposer.stop()
        shutil.rmtree(scratch, ignore_errors=True)
        window.finish()
        excluded = window.record(request.node.nodeid)
        if excluded is not None:
            run_records.add(EXCLUDED_RECORDS, excluded)


@pytest.fixture
def kubelet_restarts(pytestconfig: pytest.Config, cluster: ClusterInfo) -> KubeletRestarts:
    """The backend, where it can restart a node's kubelet (the local backend's real node)."""
    backend = backend_of(pytestconfig)
    if not isinstance(backend, KubeletRestarts):
        pytest.skip(
            f"not applicable: backend {cluster.backend} cannot restart a node's kubelet (on a cluster the suite did "
            "not build, that is the node owner's to do)"
        )
    return backend


@pytest.fixture
def build(namespace: str, driver_under_test: DriverUnderTest) -> Builder:
    """Builds objects for the driver under test in the test's namespace."""
    return Builder(namespace=namespace, driver=driver_under_test.name, hold=driver_under_test.hold)


@pytest.fixture
def api_fault_proxy(cluster: ClusterInfo, tmp_path: Path) -> Iterator[ApiFaultProxy]:
    """A fault-injecting proxy in front of the API server, serving a certificate of the cluster's CA."""
    if cluster.pki_dir is None or BackendCapability.NODE_CLIENT_CERTS not in cluster.capabilities:
        pytest.skip(f"not applicable: backend {cluster.backend} holds no cluster CA to sign the proxy's certificate")
    authority = CertificateAuthority.load(cluster.pki_dir / "ca.crt", cluster.pki_dir / "ca.key")
    cert, key = authority.issue("api-fault-proxy", ip_addresses=["127.0.0.1"], server=True, client=False).write(
        tmp_path, "api-fault-proxy"
    )
    proxy = ApiFaultProxy(cluster.server, cluster.pki_dir / "ca.crt", cert, key).start()
    yield proxy
    proxy.stop()


@pytest.fixture(scope="session")
def driver_sockets(driver_under_test: DriverUnderTest, cluster: ClusterInfo) -> dict[str, DriverEndpoint]:
    """The driver's sockets per node; checks that talk to them are not applicable where none can be reached."""
    if not driver_under_test.endpoints and driver_under_test.unreachable:
        pytest.skip(
            f"not applicable: no kubelet-plugin socket of {driver_under_test.name} could be reached through a node "
            f"agent ({driver_under_test.unreachable})"
        )
    if not driver_under_test.endpoints and driver_under_test.profile.real_nodes_only:
        pytest.skip(REAL_NODES_ONLY)
    if not driver_under_test.endpoints:
        pytest.skip(
            f"not applicable: backend {cluster.backend} cannot reach the kubelet-plugin sockets of "
            f"{driver_under_test.name} from this machine (socket checks need the local backend, or real nodes "
            "running the driver, which node agents reach)"
        )
    return driver_under_test.endpoints


@pytest.fixture(scope="session")
def latency_log(run_records: RunRecords) -> LatencyLog:
    """Where this worker records kubelet-plugin call latencies."""
    return LatencyLog(run_records)


@pytest.fixture
def driver_client(
    kubelet_api: KubeletAPI, driver_under_test: DriverUnderTest
) -> Iterator[Callable[[DriverEndpoint], DriverClient]]:
    """Opens kubelet-side clients to driver endpoints; all are closed after the test."""
    opened: list[DriverClient] = []

    def open_client(endpoint: DriverEndpoint) -> DriverClient:
        if endpoint.driver == driver_under_test.name:
            driver_under_test.resync(endpoint.node)
        opened.append(
            DriverClient(kubelet_api, endpoint.registration_socket, endpoint.reachable, endpoint.relay_errors)
        )
        return opened[-1]

    yield open_client
    for driver in opened:
        driver.close()


@pytest.fixture
def kubelet(
    driver_client: Callable[[DriverEndpoint], DriverClient], latency_log: LatencyLog, api_client: client.ApiClient
) -> Iterator[KubeletRole]:
    """The kubelet's role in control-plane checks on fake nodes (see `KubeletRole`)."""
    role = KubeletRole(driver_client, latency_log, api_client)
    yield role
    failures = role.unprepare_leftovers()
    assert not failures, f"claims left prepared after the test could not be unprepared: {failures}"


@pytest.fixture
def private_driver(
    dynamic_client: DynamicClient,
    cluster: ClusterInfo,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    namespace: str,
    timeouts: Timeouts,
    driver_profile: DriverProfile,
) -> Iterator[Callable[..., PrivateDriver]]:
    """Starts reference driver instances only this test uses (see `PrivateDrivers`); local backend only.

    Checks built on them switch the reference driver's faults or control its process, so they say something only
    about the reference driver: for any other driver under test, starting one reports the check not applicable.
    The fixture itself always sets up, so that a test may ask for it before `kubelet` (whose leftover unprepares
    then run while the driver is still there) and decide at run time whether it needs one.
    """
    behaviour = behaviour_args(driver_profile.run.process.args) if driver_profile.run else ()
    # Only a backend that runs private instances built the reference driver's binary; `start` skips elsewhere.
    runs_instances = BackendCapability.REFERENCE_DRIVER in cluster.capabilities
    drivers = PrivateDrivers(
        dynamic_client,
        api_client,
        tracker,
        namespace,
        cluster.nodes[:1],
        timeouts,
        program=reference_program(cluster.details) if runs_instances else (),
        behaviour=behaviour,
    )

    def start(
        nodes: tuple[str, ...] | None = None, *, profile: str = "gpu", devices: int = 2, args: tuple[str, ...] = ()
    ) -> PrivateDriver:
        require_private_instances(driver_profile, "a private driver instance (process control included)")
        if BackendCapability.REFERENCE_DRIVER not in cluster.capabilities:
            pytest.skip(f"not applicable: backend {cluster.backend} cannot run private reference driver instances")
        return drivers.start(nodes, profile=profile, devices=devices, args=args)

    yield start
    leaks = drivers.cleanup()
    if leaks:
        raise LeakError(f"leaked by the test's driver after cleanup: {leaks}")


@pytest.fixture(scope="session")
def obligation_registry(conformance_run: None) -> Registry:
    """Every obligation the bundled suites check, from the registry shipped in the package."""
    return Registry.load()


@pytest.fixture
def obligations(
    request: pytest.FixtureRequest,
    driver_profile: DriverProfile,
    run_records: RunRecords,
    obligation_registry: Registry,
    observed_mask: ObservedMask,
) -> Iterator[Obligations]:
    """The obligations this check verifies, by registry id (see `dra_conformance.model.findings`).

    Afterwards the check is labelled in the Allure report with each obligation it verified (story).
    """
    level = request.config.getoption("--dra-strictness") or driver_profile.strictness
    checker = Obligations(
        request.node.nodeid, level == Strictness.STRICT, run_records, obligation_registry, mask=observed_mask
    )
    yield checker
    for obligation in checker.exercised:
        allure.dynamic.story(obligation)  # type: ignore[no-untyped-call]
