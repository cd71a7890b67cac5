"""kube-apiserver: serves the API on loopback with TLS, RBAC, the aggregation layer and an audit log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dra_conformance import versions
from dra_conformance.backends.local.components.base import ControlPlaneContext
from dra_conformance.backends.local.components.etcd import Etcd
from dra_conformance.backends.local.network import FRONT_PROXY_CLIENT, LOOPBACK, SERVICE_ACCOUNT_ISSUER, SERVICE_CIDR
from dra_conformance.backends.local.process_plan import ProcessSpec
from dra_conformance.backends.local.supervised import SupervisedCluster

AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    # RequestReceived doubles every entry without adding who/what/version.
    "omitStages": ["RequestReceived"],
    "rules": [
        # Heartbeats and leader leases are most of the traffic and say nothing about consumers.
        {"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
        {"level": "None", "nonResourceURLs": ["/healthz*", "/livez*", "/readyz*"]},
        {"level": "Metadata"},
    ],
}
AUDIT_POLICY_FILE = "audit-policy.yaml"
# The supervisor's timeline entry for `serving_url` first answering 200.
SERVING = "apiserver_serving"
# The readiness checks of the post-start hooks that write the cluster's default objects (the bootstrap RBAC roles and
# bindings, the system priority classes). Each hook waits a whole second before its first try (`wait.Poll`, not
# immediate, in pkg/registry/{rbac,scheduling}/rest), so /readyz turns ok about 1.5 s after the API answers on 2
# cores. What only needs the API (kwok; Node objects; the driver's own identity, written as system:masters) starts
# without them; components that authorize with the bootstrap roles wait for the whole /readyz.
BOOTSTRAP_OBJECT_CHECKS = (
    "poststarthook/rbac/bootstrap-roles",
    "poststarthook/scheduling/bootstrap-system-priority-classes",
)


@dataclass(frozen=True)
class KubeApiserver:
    """The API server, started once etcd runs; ready when its /readyz answers 200."""

    name: str = "kube-apiserver"

    def command(self, context: ControlPlaneContext) -> list[ProcessSpec]:
        """kube-apiserver with the certificates and configs `control_plane.render` wrote."""
        pki, cfg, layout = context.layout.pki, context.layout.config, context.layout
        argv = [
            str(context.binaries.kube),
            "apiserver",
            f"--etcd-servers={Etcd.client_url(context)}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            # The lease reconciler refuses a loopback advertise address; the `kubernetes` Service endpoints it would
            # maintain are unusable here anyway (no kube-proxy).
            "--endpoint-reconciler-type=none",
            f"--secure-port={context.ports.apiserver}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            # A real node's name does not resolve here; its InternalIP does (and its serving cert names it).
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            # No --enable-aggregator-routing: with it the aggregator dials EndpointSlice addresses, and EndpointSlice
            # validation rejects loopback ones. Without it, an ExternalName Service (localhost) routes an aggregated
            # API to a local process, and nothing dials a Service ClusterIP (there is no kube-proxy).
            f"--audit-log-path={layout.audit_log}",
            f"--audit-policy-file={cfg / AUDIT_POLICY_FILE}",
            "--audit-log-maxbackup=3",
            "--audit-log-maxsize=100",
            f"--feature-gates={context.feature_gates}",
            f"--runtime-config={versions.runtime_config_flag()}",
            "--profiling=false",
            "--v=1",
        ]
        return [ProcessSpec(self.name, argv, str(layout.component_log(self.name)))]

    @staticmethod
    def ready_url(context: ControlPlaneContext) -> str:
        """What answers 200 once it serves: the supervisor probes it before starting the components that need it."""
        return f"{context.server}/readyz"

    @staticmethod
    def serving_url(context: ControlPlaneContext) -> str:
        """What answers 200 once it serves everything but the default objects its bootstrap hooks are writing."""
        excluded = "&".join(f"exclude={check}" for check in BOOTSTRAP_OBJECT_CHECKS)
        return f"{context.server}/readyz?{excluded}"

    def serving(self, cluster: SupervisedCluster) -> None:
        """Wait until the API serves, its bootstrap roles and priority classes possibly still being written."""
        cluster.await_timeline(SERVING)

    def ready(self, cluster: SupervisedCluster) -> None:
        """Wait until the supervisor saw /readyz answer and started the rest of the control plane."""
        cluster.await_running()
