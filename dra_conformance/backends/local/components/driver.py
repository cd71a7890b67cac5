"""The driver under test: one supervised process per fake node, or a DaemonSet pod on a real node."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from dra_conformance.backends.local import driver_daemonset, drivers
from dra_conformance.backends.local.process_plan import ProcessSpec
from dra_conformance.backends.local.supervised import STARTUP_POLL_CAP, SupervisedCluster
from dra_conformance.driver.pool import PoolState, node_pools
from dra_conformance.driver.profile import DriverProfile
from dra_conformance.errors import DriverStartError, WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.processes import listening


class DriverUnderTest:
    """The profile's driver on `nodes`: as supervised host processes, or (`in_pods`) as DaemonSet pods."""

    name = "driver"

    def __init__(
        self, profile: DriverProfile, binaries: dict[str, Path], nodes: tuple[str, ...], *, in_pods: bool = False
    ) -> None:
        """Run the driver of `profile` (its `{bin:...}` placeholders from `binaries`) on `nodes`."""
        self.profile = profile
        self.binaries = binaries
        self.nodes = nodes
        self.in_pods = in_pods
        self._deployment: drivers.DriverDeployment | None = None

    def command(self, cluster: SupervisedCluster) -> list[ProcessSpec]:
        """One process per node, as the profile's `run` says; installs the identity and RBAC they need first."""
        if self._deployment is None:
            with cluster.api() as api_client:
                self._deployment = drivers.deploy(
                    api_client,
                    cluster.layout,
                    self.nodes,
                    self.profile,
                    self.binaries,
                    server=str(api_client.configuration.host),
                    ca_pem=(cluster.layout.pki / "ca.crt").read_bytes(),
                )
        return self._deployment.processes

    @property
    def endpoints(self) -> list[DriverEndpoint]:
        """Where each node's driver registers (after `command`)."""
        assert self._deployment is not None, "command() renders the deployment first"
        return self._deployment.endpoints

    def start(self, cluster: SupervisedCluster) -> list[DriverEndpoint]:
        """Start the driver on every node (host processes or pods) and wait until each is ready."""
        self.launch(cluster)
        self.ready(cluster)
        return self.endpoints

    def install(self, cluster: SupervisedCluster) -> None:
        """Install the driver's identity and RBAC, and render its processes, without starting them."""
        self.command(cluster)

    def launch(self, cluster: SupervisedCluster) -> None:
        """Start the driver on every node (host processes or pods) without waiting for it (`ready` does)."""
        processes = self.command(cluster)
        assert self._deployment is not None
        if self.in_pods:
            with cluster.api() as api_client:
                self._create_daemonsets(api_client, self._deployment)
        else:
            builds = self._deployment.builds
            recorded = {node: {b: asdict(spec) for b, spec in specs.items()} for node, specs in builds.items()}
            drivers.builds_path(cluster.layout).write_text(json.dumps(recorded, indent=2))
            identity = self._deployment.record(self.profile)
            drivers.identity_path(cluster.layout).write_text(json.dumps(identity, indent=2))
            cluster.add_processes(processes)

    def _create_daemonsets(self, api_client: client.ApiClient, deployment: drivers.DriverDeployment) -> None:
        account = self.profile.identity.service_account
        apps = client.AppsV1Api(api_client)
        for endpoint, spec in zip(deployment.endpoints, deployment.processes, strict=True):
            writable = (*deployment.directories[endpoint.node], endpoint.plugins_dir)
            body = driver_daemonset.manifest(spec, endpoint.node, account.namespace, account.name, writable)
            apps.create_namespaced_daemon_set(account.namespace, body)

    def ready(self, cluster: SupervisedCluster) -> None:
        """Wait until the driver on each node registered a socket and published a complete pool for it."""
        account = self.profile.identity.service_account
        with cluster.api() as api_client:
            core = client.CoreV1Api(api_client)
            for endpoint in self.endpoints:
                if not self.in_pods:
                    await_driver(
                        cluster, api_client, self.profile, endpoint, exit_of(cluster, self.profile, endpoint.node)
                    )
                    continue

                def failed(node: str = endpoint.node) -> str | None:
                    reason = driver_daemonset.failure(core, account.namespace, node)
                    return f"driver {self.profile.driver} on {node}: its pod {reason}" if reason else None

                def log(node: str = endpoint.node) -> str:
                    pods = driver_daemonset.pods_of(core, account.namespace, node)
                    return driver_daemonset.log_tail(core, pods[-1]) if pods else "(no pod yet)"

                await_driver(cluster, api_client, self.profile, endpoint, failed, log)


def exit_of(cluster: SupervisedCluster, profile: DriverProfile, node: str) -> Callable[[], str | None]:
    """Why the supervised driver process on `node` is gone (its exit code and log), or None while it runs."""
    name = drivers.process_name(node)

    def exited() -> str | None:
        code = cluster.exit_code(name)
        if code is None:
            return None
        return (
            f"driver {profile.driver} on {node} exited with code {code} at start; last lines "
            f"of {cluster.layout.component_log(name)}: {cluster.log_tail(name)}"
        )

    return exited


def await_driver(
    cluster: SupervisedCluster,
    api_client: client.ApiClient,
    profile: DriverProfile,
    endpoint: DriverEndpoint,
    failed: Callable[[], str | None],
    log_tail: Callable[[], str] | None = None,
) -> None:
    """Wait until the driver on the node registered a socket and published a complete pool for it.

    `failed` says why the driver will not come up (it exited, its pod crash-loops), which ends the wait at once;
    `log_tail` gives its last log lines for a timeout (by default, those of its supervised process).
    """
    name = drivers.process_name(endpoint.node)
    tail = log_tail or (lambda: cluster.log_tail(name))

    def observe() -> tuple[bool, dict[str, PoolState]]:
        reason = failed()
        if reason is not None:
            raise DriverStartError(reason)
        return listening(endpoint.registration_socket), node_pools(api_client, profile.driver, endpoint.node)

    def describe(seen: tuple[bool, dict[str, PoolState]]) -> str:
        registered, pools = seen
        published = "; ".join(pool.describe() for pool in pools.values()) or "no ResourceSlice for this node"
        socket = "a registration socket" if registered else f"no socket answering in {endpoint.registrar_dir}"
        return f"{socket}; {published}"

    deadline = profile.timeouts.factor("driver_ready") * cluster.timeouts.driver_ready
    try:
        waits.until(
            observe,
            lambda seen: seen[0] and bool(seen[1]) and all(pool.complete for pool in seen[1].values()),
            timeout=deadline,
            what=f"driver {profile.driver} on {endpoint.node} registered with a complete pool",
            describe=describe,
            retry_on=(ApiException, HTTPError),
            max_interval=STARTUP_POLL_CAP,
        )
    except WaitTimeout as error:
        raise DriverStartError(f"{error}; last lines of its log: {tail()}") from None
