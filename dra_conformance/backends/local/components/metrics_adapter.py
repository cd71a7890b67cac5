"""The Resource Metrics API of a local cluster: the reference adapter or the real metrics-server, aggregated."""

from __future__ import annotations

import socket
from dataclasses import dataclass, replace
from pathlib import Path

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from dra_conformance.backends.local import drivers, metrics
from dra_conformance.backends.local.network import LOOPBACK
from dra_conformance.backends.local.process_plan import Plan, ProcessSpec
from dra_conformance.backends.local.supervised import STARTUP_POLL_CAP, SupervisedCluster
from dra_conformance.errors import BackendError
from dra_conformance.kube import waits
from dra_conformance.metrics import availability as version_availability
from dra_conformance.metrics import reads as metrics_reads

# A listening socket on loopback accepts at once.
CONNECT_TIMEOUT = 0.5


def control_socket(cluster_runtime: Path) -> Path:
    """Control socket of the reference metrics adapter (faults, requests served), under the cluster's runtime dir."""
    return cluster_runtime / "fake-metrics" / "control.sock"


def components(kind: str) -> frozenset[str]:
    """The pinned components (`build.ON_DEMAND`) the implementation `kind` runs: metrics-server's binary, for it."""
    return frozenset({"metrics_server"}) if kind == "metrics-server" else frozenset()


@dataclass(frozen=True)
class MetricsAdapter:
    """`kind` "fake" (the reference adapter, v1 and v1beta1) or "metrics-server" (v1beta1 only), on `port`."""

    kind: str
    port: int
    # The real metrics-server's binary; built (and needed) only for `kind` "metrics-server" (`components`).
    metrics_server: Path | None
    name: str = "metrics"
    # Set once its process is in the supervisor's plan (`planned`): the CA of the serving certificate it runs with.
    ca_bundle: bytes | None = None

    def planned(self, cluster: SupervisedCluster, plan: Plan) -> MetricsAdapter:
        """The reference adapter's process added to `plan`, so it starts with the control plane; itself otherwise.

        It needs no API server to start (the real metrics-server does), so its interpreter's start-up overlaps
        the control plane's instead of following it.
        """
        if self.kind != "fake":
            return self
        spec, ca_bundle = self._rendered(cluster)
        waiting = [index for index, planned in enumerate(plan.processes) if planned.wait_for]
        plan.processes.insert(waiting[0] if waiting else len(plan.processes), spec)
        return replace(self, ca_bundle=ca_bundle)

    def _served(self) -> tuple[tuple[str, ...], str, str]:
        """The versions it serves, and the namespace and name of its Service."""
        if self.kind == "metrics-server":
            return metrics.METRICS_SERVER_VERSIONS, "metrics-server", "metrics-server"
        return metrics.VERSIONS, metrics.NAMESPACE, metrics.SERVICE

    def _rendered(self, cluster: SupervisedCluster) -> tuple[ProcessSpec, bytes]:
        layout = cluster.layout
        if self.kind == "metrics-server":
            if self.metrics_server is None:
                raise BackendError("metrics-server: its binary was not built for this cluster (build.select)")
            return metrics.metrics_server_process(layout, self.metrics_server, self.port)
        return metrics.process(layout, self.port, control_socket(drivers.runtime_dir(layout)))

    def command(self, cluster: SupervisedCluster) -> list[ProcessSpec]:
        """Its process (and its serving certificate, written under the PKI dir)."""
        return [self._rendered(cluster)[0]]

    def start(self, cluster: SupervisedCluster) -> None:
        """Start it, register its APIServices and wait until they are Available and answering."""
        self.launch(cluster)
        self.ready(cluster)

    def launch(self, cluster: SupervisedCluster) -> None:
        """Start it and, once it listens, register its APIServices, without waiting for them (`ready` does).

        Registered before it listens, an APIService fails the aggregator's first checks, and their retries back
        off (up to seconds) past the moment it would answer.
        """
        versions, namespace, service = self._served()
        if self.ca_bundle is None:
            spec, ca_bundle = self._rendered(cluster)
            cluster.add_processes([spec])
            name = spec.name
        else:
            ca_bundle, name = self.ca_bundle, metrics.PROCESS_NAME
        waits.until(
            self._listening,
            bool,
            timeout=cluster.timeouts.metrics_available,
            what=f"{name} listening on {LOOPBACK}:{self.port}",
            describe=lambda _: cluster.log_tail(name),
            max_interval=STARTUP_POLL_CAP,
        )
        with cluster.api() as api_client:
            metrics.register(api_client, self.port, ca_bundle, versions, namespace, service)

    def _listening(self) -> bool:
        try:
            with socket.create_connection((LOOPBACK, self.port), timeout=CONNECT_TIMEOUT):
                return True
        except OSError:
            return False

    def ready(self, cluster: SupervisedCluster) -> None:
        """Wait until its APIServices are Available and each version answers a list."""
        versions = self._served()[0]
        timeout = cluster.timeouts.metrics_available
        with cluster.api() as api_client:
            waits.until(
                lambda: {v: s for v, s in metrics.available(api_client).items() if v.split(".")[0] in versions},
                lambda state: all(value.startswith("True") for value in state.values()),
                timeout=timeout,
                what=f"metrics.k8s.io APIServices {versions} Available",
                describe=str,
                retry_on=(ApiException, HTTPError),
                max_interval=STARTUP_POLL_CAP,
            )
            with metrics_reads.suite_client(api_client) as reader:
                version_availability.wait_answering(reader, versions, timeout, max_interval=STARTUP_POLL_CAP)
