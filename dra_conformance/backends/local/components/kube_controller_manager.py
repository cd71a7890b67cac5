"""kube-controller-manager: every default controller (resourceclaim, device-taint-eviction, node lifecycle, ...)."""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from dra_conformance.backends.local.components.base import ControlPlaneContext, serving_flags
from dra_conformance.backends.local.components.kube_apiserver import KubeApiserver
from dra_conformance.backends.local.network import LOOPBACK, SERVICE_CIDR
from dra_conformance.backends.local.process_plan import ProcessSpec
from dra_conformance.backends.local.supervised import STARTUP_POLL_CAP, SupervisedCluster
from dra_conformance.kube import waits
from dra_conformance.kube.nodes import lifecycle_tainted


def component_auth(context: ControlPlaneContext, component: str) -> list[str]:
    """The flags that make a component use its own identity for the API and for delegated authn/authz."""
    path = context.kubeconfigs[component]
    return [f"--kubeconfig={path}", f"--authentication-kubeconfig={path}", f"--authorization-kubeconfig={path}"]


@dataclass(frozen=True)
class KubeControllerManager:
    """The controller-manager, started once the API server is ready."""

    name: str = "kube-controller-manager"
    # Its identity's kubeconfig in ControlPlaneContext.kubeconfigs.
    identity: str = "controller-manager"

    def command(self, context: ControlPlaneContext) -> list[ProcessSpec]:
        """kube-controller-manager signing with the cluster CA, a client per controller."""
        pki = context.layout.pki
        argv = [
            str(context.binaries.kube),
            "controller-manager",
            *component_auth(context, self.identity),
            f"--bind-address={LOOPBACK}",
            f"--secure-port={context.ports.controller_manager}",
            *serving_flags(context, self.name),
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # The default set plus nothing: resourceclaim, device-taint-eviction, garbage collector, namespace,
            # serviceaccount-token are all in it. Cloud and bootstrap-token controllers are off by default.
            "--controllers=*",
            # Its default client limit (QPS 20, burst 30) paced its start: with a client per controller
            # (--use-service-account-credentials) it took 4 s to reach the node lifecycle controller, which lifts the
            # not-ready taint `cluster up` waits for (warm start 8.85 s -> 5.09 s, bench/cluster_up, 3 runs each).
            "--kube-api-qps=100",
            "--kube-api-burst=200",
            f"--feature-gates={context.feature_gates}",
            "--profiling=false",
            "--v=1",
        ]
        log = str(context.layout.component_log(self.name))
        return [ProcessSpec(self.name, argv, log, wait_for=KubeApiserver.ready_url(context))]

    def ready(self, cluster: SupervisedCluster) -> None:
        """Wait until its node lifecycle controller lifted the not-ready taint new nodes get, on every node.

        Waited for last in a start, so the controller-manager's start-up overlaps with the drivers': a test starting
        earlier would see no usable node.
        """
        with cluster.api() as api_client:
            core = client.CoreV1Api(api_client)
            waits.until(
                lambda: lifecycle_tainted(core),
                lambda tainted: not tainted,
                timeout=cluster.timeouts.node_ready,
                what="the node lifecycle controller lifting the not-ready taint of every node",
                describe=lambda tainted: f"still tainted: {tainted}",
                retry_on=(ApiException, HTTPError),
                max_interval=STARTUP_POLL_CAP,
            )
