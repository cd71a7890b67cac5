"""The Resource Metrics API of a local cluster: the reference adapter or the real metrics-server, aggregated."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from dra_conformance.backends.local import drivers, metrics
from dra_conformance.backends.local.process_plan import ProcessSpec
from dra_conformance.backends.local.supervised import STARTUP_POLL_CAP, SupervisedCluster
from dra_conformance.kube import waits
from dra_conformance.metrics import api as metrics_api


def control_socket(cluster_runtime: Path) -> Path:
    """Control socket of the reference metrics adapter (faults, requests served), under the cluster's runtime dir."""
    return cluster_runtime / "fake-metrics" / "control.sock"


@dataclass(frozen=True)
class MetricsAdapter:
    """`kind` "fake" (the reference adapter, v1 and v1beta1) or "metrics-server" (v1beta1 only), on `port`."""

    kind: str
    port: int
    metrics_server: Path
    name: str = "metrics"

    def _served(self) -> tuple[tuple[str, ...], str, str]:
        """The versions it serves, and the namespace and name of its Service."""
        if self.kind == "metrics-server":
            return metrics.METRICS_SERVER_VERSIONS, "metrics-server", "metrics-server"
        return metrics.VERSIONS, metrics.NAMESPACE, metrics.SERVICE

    def _rendered(self, cluster: SupervisedCluster) -> tuple[ProcessSpec, bytes]:
        layout = cluster.layout
        if self.kind == "metrics-server":
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
        """Start it and register its APIServices, without waiting for them (`ready` does)."""
        spec, ca_bundle = self._rendered(cluster)
        versions, namespace, service = self._served()
        cluster.add_processes([spec])
        with cluster.api() as api_client:
            metrics.register(api_client, self.port, ca_bundle, versions, namespace, service)

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
            with metrics_api.suite_client(api_client) as reader:
                metrics_api.wait_answering(reader, versions, timeout)
