"""kwok: plays the kubelet of every fake node (Ready status, leases, pod phases, emulated resource metrics)."""

from __future__ import annotations

from dataclasses import dataclass

from dra_conformance.backends.local.components.base import ControlPlaneContext
from dra_conformance.backends.local.components.kube_apiserver import SERVING, KubeApiserver
from dra_conformance.backends.local.network import LOOPBACK, POD_CIDR
from dra_conformance.backends.local.process_plan import ProcessSpec
from dra_conformance.backends.local.supervised import SupervisedCluster

# The annotation (and value) of the nodes kwok manages; the fake nodes carry it.
NODE_ANNOTATION = "kwok.x-k8s.io/node"
NODE_ANNOTATION_VALUE = "fake"
CONFIG_FILE = "kwok.yaml"


@dataclass(frozen=True)
class Kwok:
    """kwok, managing only the nodes annotated for it; started once the API serves (system:masters needs no role)."""

    name: str = "kwok"
    # Its identity's kubeconfig in ControlPlaneContext.kubeconfigs.
    identity: str = "kwok"

    def command(self, context: ControlPlaneContext) -> list[ProcessSpec]:
        """Kwok serving every fake node's kubelet endpoints on one loopback port."""
        argv = [
            str(context.binaries.kwok),
            f"--config={context.layout.config / CONFIG_FILE}",
            f"--kubeconfig={context.kubeconfigs[self.identity]}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={NODE_ANNOTATION}={NODE_ANNOTATION_VALUE}",
            f"--server-address={LOOPBACK}:{context.ports.kwok}",
            f"--node-ip={LOOPBACK}",
            f"--node-port={context.ports.kwok}",
            f"--cidr={POD_CIDR}",
            "--node-lease-duration-seconds=40",
        ]
        log = str(context.layout.component_log(self.name))
        return [ProcessSpec(self.name, argv, log, wait_for=KubeApiserver.serving_url(context), awaited=SERVING)]

    def ready(self, cluster: SupervisedCluster) -> None:
        """Nothing of its own: it shows it works when the fake nodes turn Ready (see fake_nodes.FakeNodes)."""
