"""etcd: the cluster's store, a throwaway one."""

from __future__ import annotations

from dataclasses import dataclass

from dra_conformance.backends.local.components.base import ControlPlaneContext
from dra_conformance.backends.local.network import LOOPBACK
from dra_conformance.backends.local.process_plan import ProcessSpec
from dra_conformance.backends.local.supervised import SupervisedCluster

NAME = "dra-conformance"
QUOTA_BACKEND_BYTES = 4 * 1024**3


@dataclass(frozen=True)
class Etcd:
    """A one-member etcd on loopback, started first."""

    name: str = "etcd"

    def command(self, context: ControlPlaneContext) -> list[ProcessSpec]:
        """Etcd with its data under the state directory."""
        ports = context.ports
        argv = [
            str(context.binaries.etcd),
            f"--name={NAME}",
            f"--data-dir={context.layout.etcd_data}",
            f"--listen-client-urls=http://{LOOPBACK}:{ports.etcd_client}",
            f"--advertise-client-urls=http://{LOOPBACK}:{ports.etcd_client}",
            f"--listen-peer-urls=http://{LOOPBACK}:{ports.etcd_peer}",
            f"--initial-advertise-peer-urls=http://{LOOPBACK}:{ports.etcd_peer}",
            f"--initial-cluster={NAME}=http://{LOOPBACK}:{ports.etcd_peer}",
            # A throwaway test store: fsync on every write costs more than the data is worth.
            "--unsafe-no-fsync=true",
            f"--quota-backend-bytes={QUOTA_BACKEND_BYTES}",
            "--log-level=warn",
        ]
        return [ProcessSpec(self.name, argv, str(context.layout.component_log(self.name)))]

    @staticmethod
    def client_url(context: ControlPlaneContext) -> str:
        """Where the API server reaches it."""
        return f"http://{LOOPBACK}:{context.ports.etcd_client}"

    def ready(self, cluster: SupervisedCluster) -> None:
        """Nothing of its own to wait for: the API server's readyz, which the supervisor probes, checks etcd."""
