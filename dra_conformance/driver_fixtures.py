"""Fixtures for checks that talk to DRA drivers.

The driver under test, kubelet-side clients (and the `kubelet` role that prepares claims the way a kubelet
would), and private instances of the reference fake driver for tests that switch faults on, so that parallel
tests never see each other's faults.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import allure
import grpc
import pytest
import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from dra_conformance import kinds, kubeconfig
from dra_conformance.backends.base import ClusterInfo, DriverEndpoint
from dra_conformance.backends.local.backend import repository_root
from dra_conformance.fake_driver import FakeDriverProcess, driver_argv
from dra_conformance.identities import request_token, token_holder_pod
from dra_conformance.kubelet_api import KubeletAPI, load
from dra_conformance.leaks import LeakError, driver_leftovers, slice_leftovers
from dra_conformance.plugin import RUN_DIR_KEY
from dra_conformance.plugin_client import CallResult, ClaimRef, PluginClient
from dra_conformance.timeouts import Timeouts
from dra_conformance.tracker import ResourceTracker

DRIVER_RBAC = repository_root() / "drivers" / "fake-dra" / "deploy" / "rbac.yaml"
# kwok marks a pod with claims Ready only once this annotation says its claims were prepared
# (clusters/local/kwok-stages.yaml): on fake nodes the test plays the kubelet.
PREPARED_ANNOTATION = "dra-conformance.io/prepared"
LATENCY_DIR = "latency"


@dataclass(frozen=True)
class DriverUnderTest:
    """The DRA driver being certified and where its kubelet-plugin sockets are, per node."""

    name: str
    endpoints: dict[str, DriverEndpoint]


@pytest.fixture(scope="session")
def kubelet_api() -> KubeletAPI:
    """Bindings of the kubelet plugin APIs (generated from the pinned .proto files on first use)."""
    return load()


@pytest.fixture(scope="session")
def driver_under_test(cluster: ClusterInfo) -> DriverUnderTest:
    """The driver whose sockets this machine can reach; skips when there is none (e.g. a remote cluster)."""
    if not cluster.drivers:
        pytest.skip(f"backend {cluster.backend} exposes no kubelet-plugin sockets on this machine")
    name = cluster.drivers[0].driver
    return DriverUnderTest(name, {e.node: e for e in cluster.drivers if e.driver == name})


class LatencyLog:
    """Client-side latencies of kubelet-plugin calls, written per worker and summarized at the end of the run."""

    def __init__(self, path: Path) -> None:
        """Append JSON lines to `path`."""
        self.path = path

    def record(self, method: str, result: CallResult) -> CallResult:
        """Remember one call's latency and hand the result back."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as log:
            log.write(json.dumps({"method": method, "latency": result.latency}) + "\n")
        return result


@pytest.fixture(scope="session")
def latency_log(pytestconfig: pytest.Config) -> LatencyLog:
    """Where this worker records call latencies (reports/<run-id>/latency/<worker>.jsonl)."""
    worker = getattr(pytestconfig, "workerinput", {}).get("workerid", "main")
    return LatencyLog(pytestconfig.stash[RUN_DIR_KEY] / LATENCY_DIR / f"{worker}.jsonl")


def summarize_latencies(run_dir: Path) -> dict[str, dict[str, float]]:
    """p50/p95/max per method over every worker's latency log."""
    samples: dict[str, list[float]] = {}
    for path in sorted((run_dir / LATENCY_DIR).glob("*.jsonl")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            samples.setdefault(entry["method"], []).append(entry["latency"])
    summary = {}
    for method, values in sorted(samples.items()):
        ordered = sorted(values)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        summary[method] = {"count": len(ordered), "p50": statistics.median(ordered), "p95": p95, "max": ordered[-1]}
    return summary


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Print and store the kubelet-plugin call latencies (p50, p95) of the run."""
    if hasattr(config, "workerinput") or RUN_DIR_KEY not in config.stash:
        return
    run_dir = config.stash[RUN_DIR_KEY]
    summary = summarize_latencies(run_dir)
    if not summary:
        return
    (run_dir / "protocol-latency.json").write_text(json.dumps(summary, indent=2))
    terminalreporter.section("kubelet-plugin call latency (client side)")
    for method, figures in summary.items():
        terminalreporter.line(
            f"{method}: n={figures['count']:.0f} p50={figures['p50'] * 1000:.1f} ms "
            f"p95={figures['p95'] * 1000:.1f} ms max={figures['max'] * 1000:.1f} ms"
        )
    allure_dir = getattr(config.option, "allure_report_dir", None)
    if allure_dir:
        lines = [
            f"latency.{method}.p{q}={figures[f'p{q}'] * 1000:.1f}ms"
            for method, figures in summary.items()
            for q in (50, 95)
        ]
        Path(allure_dir, "environment.properties").write_text("\n".join(lines) + "\n")


class KubeletRole:
    """Does what the kubelet would do on a real node: prepare claims before a pod starts, unprepare them after.

    Each call is an Allure step named for that role. Claims still prepared when the test ends are unprepared.
    """

    def __init__(
        self, open_client: Callable[[DriverEndpoint], PluginClient], latencies: LatencyLog, api_client: client.ApiClient
    ) -> None:
        """Reach drivers through `open_client`; record every call's latency."""
        self.open_client = open_client
        self.latencies = latencies
        self.api_client = api_client
        self.prepared: dict[tuple[DriverEndpoint, str], ClaimRef] = {}

    def prepare(self, endpoint: DriverEndpoint, claims: list[ClaimRef], **options: Any) -> CallResult:
        """NodePrepareResources on `endpoint` for `claims`."""
        # Remembered before the call: a prepare that failed or timed out may still complete in the driver, and a
        # kubelet would unprepare such claims when the pod goes away.
        for claim in claims:
            self.prepared[(endpoint, claim.uid)] = claim
        with allure.step(f"kubelet on {endpoint.node}: NodePrepareResources {[c.name for c in claims]}"):
            return self.latencies.record("NodePrepareResources", self.open_client(endpoint).prepare(claims, **options))

    def unprepare(self, endpoint: DriverEndpoint, claims: list[ClaimRef], **options: Any) -> CallResult:
        """NodeUnprepareResources on `endpoint` for `claims`."""
        with allure.step(f"kubelet on {endpoint.node}: NodeUnprepareResources {[c.name for c in claims]}"):
            result = self.latencies.record(
                "NodeUnprepareResources", self.open_client(endpoint).unprepare(claims, **options)
            )
        for claim in claims:
            answer = result.claims.get(claim.uid)
            if answer is not None and not answer.error:
                self.prepared.pop((endpoint, claim.uid), None)
        return result

    def start_containers(self, namespace: str, pod: str) -> None:
        """Start the pod's containers, as the kubelet does after a successful prepare.

        On fake nodes that means setting the annotation kwok waits for before it marks the pod Ready.
        """
        with allure.step(f"kubelet: start containers of {namespace}/{pod}"):
            client.CoreV1Api(self.api_client).patch_namespaced_pod(
                pod, namespace, {"metadata": {"annotations": {PREPARED_ANNOTATION: "true"}}}
            )

    def unprepare_leftovers(self) -> list[str]:
        """Unprepare what the test left prepared; returns the failures."""
        failures = []
        for (endpoint, uid), claim in list(self.prepared.items()):
            try:
                answer = self.unprepare(endpoint, [claim]).claims.get(uid)
            except grpc.RpcError as error:
                failures.append(f"{claim.namespace}/{claim.name} on {endpoint.node}: {error}")
                continue
            if answer is None or answer.error:
                failures.append(f"{claim.namespace}/{claim.name} on {endpoint.node}: {answer}")
        return failures


@pytest.fixture
def kubelet(
    plugin_client: Callable[[DriverEndpoint], PluginClient], latency_log: LatencyLog, api_client: client.ApiClient
) -> Iterator[KubeletRole]:
    """The kubelet's role in control-plane checks on fake nodes (see `KubeletRole`)."""
    role = KubeletRole(plugin_client, latency_log, api_client)
    yield role
    failures = role.unprepare_leftovers()
    assert not failures, f"claims left prepared after the test could not be unprepared: {failures}"


@pytest.fixture
def plugin_client(kubelet_api: KubeletAPI) -> Iterator[Callable[[DriverEndpoint], PluginClient]]:
    """Opens kubelet-side clients to driver endpoints; all are closed after the test."""
    opened: list[PluginClient] = []

    def open_client(endpoint: DriverEndpoint) -> PluginClient:
        opened.append(PluginClient(kubelet_api, endpoint.registration_socket))
        return opened[-1]

    yield open_client
    for plugin in opened:
        plugin.close()


def driver_cluster_role(name: str, driver: str) -> dict[str, Any]:
    """The reference driver's least-privilege ClusterRole (from deploy/rbac.yaml), for another driver name."""
    role = next(doc for doc in yaml.safe_load_all(DRIVER_RBAC.read_text()) if doc["kind"] == "ClusterRole")
    for rule in role["rules"]:
        if "resourceclaims/driver" in rule["resources"]:
            rule["resourceNames"] = [driver]
    return {**role, "metadata": {"name": name}}


class DriverIdentity:
    """A driver's ServiceAccount in the test namespace, with the reference RBAC; tokens bound to each node."""

    def __init__(
        self,
        tracker: ResourceTracker,
        api_client: client.ApiClient,
        namespace: str,
        driver: str,
        rbac: Callable[[str, str], dict[str, Any]] = driver_cluster_role,
        service_account: str = "driver",
    ) -> None:
        """Create the ServiceAccount and its ClusterRole/Binding (tracked for cleanup)."""
        self.tracker, self.api_client, self.namespace, self.driver = tracker, api_client, namespace, driver
        self.service_account = service_account
        role_name = f"{namespace}-{service_account}"
        tracker.create(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": service_account, "namespace": namespace},
            }
        )
        tracker.create(rbac(role_name, driver))
        tracker.create(cluster_role_binding(role_name, namespace, service_account))

    def token_for(self, node: str) -> str:
        """A token carrying `node` as node-name claim (its holder pod is tracked and deleted after the test)."""
        holder = token_holder_pod(self.namespace, self.service_account, node, f"{self.service_account}-on-{node}")
        pod = self.tracker.create(holder)
        return request_token(
            self.api_client,
            self.namespace,
            self.service_account,
            bound_pod=(pod["metadata"]["name"], pod["metadata"]["uid"]),
        )

    def kubeconfig_for(self, node: str, directory: Path) -> Path:
        """A kubeconfig for this identity on `node`."""
        ca_file = self.api_client.configuration.ssl_ca_cert
        return kubeconfig.write(
            directory / f"{node}.kubeconfig",
            kubeconfig.render(
                str(self.api_client.configuration.host),
                Path(ca_file).read_bytes(),
                user=f"driver@{node}",
                token=self.token_for(node),
            ),
        )


def cluster_role_binding(name: str, namespace: str, service_account: str) -> dict[str, Any]:
    """Bind the ClusterRole `name` to a ServiceAccount."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }


@dataclass
class PrivateDriver:
    """A fake driver instance that only one test uses."""

    name: str
    processes: dict[str, FakeDriverProcess]

    def on(self, node: str) -> FakeDriverProcess:
        """The process serving `node`."""
        return self.processes[node]


@pytest.fixture
def private_driver(
    dynamic_client: DynamicClient,
    cluster: ClusterInfo,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    namespace: str,
    timeouts: Timeouts,
) -> Iterator[Callable[..., PrivateDriver]]:
    """Starts fake driver instances with a name of their own (so faults stay private to the test).

    Local backend only: the processes run on this machine and the backend's nodes are fake.
    """
    if "fake-driver" not in cluster.capabilities:
        pytest.skip(f"backend {cluster.backend} cannot run private fake driver instances")
    # Socket paths are limited to 107 bytes, so the kubelet roots live in a short temp directory.
    scratch = Path(tempfile.mkdtemp(prefix="dra-"))
    started: list[FakeDriverProcess] = []

    def start(nodes: tuple[str, ...] | None = None, *, profile: str = "gpu", devices: int = 2) -> PrivateDriver:
        driver = f"{profile}-{namespace.rsplit('-', 1)[1]}.fake-dra.example.com"
        identity = DriverIdentity(tracker, api_client, namespace, driver)
        processes = {}
        for node in nodes or cluster.nodes[:1]:
            endpoint = DriverEndpoint(driver, node, scratch / node / "kubelet")
            argv = driver_argv(
                endpoint,
                kubeconfig=identity.kubeconfig_for(node, scratch),
                devices=devices,
                profile=profile,
                state_dir=scratch / node / "state",
                cdi_dir=scratch / node / "cdi",
                delete_slices_on_exit=True,
            )
            process = FakeDriverProcess(endpoint, argv, scratch / node / "driver.log")
            started.append(process)
            process.start(timeouts.driver_ready)
            processes[node] = process
        return PrivateDriver(driver, processes)

    yield start
    leaks = []
    slices = kinds.resource(dynamic_client, "resource.k8s.io/v1", "ResourceSlice")
    for process in started:
        if process.exit_code is None:
            leaks += driver_leftovers(process.control.prepared(), scratch / process.endpoint.node / "cdi")
            process.stop(timeouts.process_stop)
        else:
            # A driver that died (crash fault) cannot remove its slice; the kubelet would, once it unregistered.
            slices.delete(field_selector=f"spec.driver={process.endpoint.driver},spec.nodeName={process.endpoint.node}")
    for driver in {process.endpoint.driver for process in started}:
        leaks += slice_leftovers(dynamic_client, driver)
    shutil.rmtree(scratch, ignore_errors=True)
    if leaks:
        raise LeakError(f"leaked by the test's driver after cleanup: {leaks}")
