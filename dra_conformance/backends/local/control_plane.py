"""Renders what a local cluster's control plane needs on disk (PKI, kubeconfigs, configs) and its process plan.

The flags of each process come from its own builder (components/): etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, started by the supervisor in that order.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from dra_conformance import versions
from dra_conformance.backends.local.build import Binaries
from dra_conformance.backends.local.components import kwok as kwok_component
from dra_conformance.backends.local.components.base import Component, ControlPlaneContext, Ports, server_url
from dra_conformance.backends.local.components.etcd import Etcd
from dra_conformance.backends.local.components.kube_apiserver import AUDIT_POLICY, AUDIT_POLICY_FILE, KubeApiserver
from dra_conformance.backends.local.components.kube_controller_manager import KubeControllerManager
from dra_conformance.backends.local.components.kube_scheduler import KubeScheduler
from dra_conformance.backends.local.components.kwok import Kwok
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.backends.local.network import FRONT_PROXY_CLIENT, KUBERNETES_SERVICE_IP, LOOPBACK
from dra_conformance.backends.local.ports import PortReservation
from dra_conformance.backends.local.process_plan import Plan, ProcessSpec
from dra_conformance.backends.local.supervised import SupervisedCluster
from dra_conformance.kube import kubeconfig
from dra_conformance.kube.pki import CertificateAuthority, service_account_keypair

# The control plane in start order.
COMPONENTS: tuple[Component[ControlPlaneContext, SupervisedCluster], ...] = (
    Etcd(),
    KubeApiserver(),
    Kwok(),  # first: it waits only until the API serves (see kube_apiserver.BOOTSTRAP_OBJECT_CHECKS)
    KubeControllerManager(),
    KubeScheduler(),
)

# Client identities: kubeconfig stem -> (user, groups). "admin" is the kubeconfig users and tests connect with.
IDENTITIES = {
    "admin": ("dra-conformance-admin", ["system:masters"]),
    "controller-manager": ("system:kube-controller-manager", []),
    "scheduler": ("system:kube-scheduler", []),
    # kwok plays the kubelet of every fake node, so it needs more than one node identity allows.
    "kwok": ("kwok-controller", ["system:masters"]),
}


# Components whose serving certificate the cluster CA issues (see _write_pki), by the name their flags use.
SERVING_CERTS = (KubeControllerManager().name, KubeScheduler().name)


def allocate_ports(reservation: PortReservation) -> Ports:
    """A port for every listener of the control plane, each held by `reservation` (see ports.py)."""
    return Ports(*(reservation.take() for _ in range(6)))


def _write_pki(layout: ClusterLayout) -> CertificateAuthority:
    """The cluster CA, the front-proxy CA, the serving and client certificates, the service-account keys."""
    pki = layout.pki
    cluster_ca = CertificateAuthority.create("dra-conformance-ca")
    cluster_ca.write(pki, "ca")
    # A separate CA for the aggregation layer: a cert from the cluster CA must never pass as a front proxy.
    front_proxy_ca = CertificateAuthority.create("dra-conformance-front-proxy-ca")
    front_proxy_ca.write(pki, "front-proxy-ca")
    cluster_ca.issue(
        "kube-apiserver",
        dns_names=[
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ],
        ip_addresses=[LOOPBACK, KUBERNETES_SERVICE_IP],
        server=True,
        client=False,
    ).write(pki, "apiserver")
    front_proxy_ca.issue(FRONT_PROXY_CLIENT).write(pki, "front-proxy-client")
    # Given a serving certificate, the controller-manager and the scheduler skip making a self-signed RSA one at
    # every start (0.33 s of the controller-manager's start before it reaches the node lifecycle controller).
    for component in SERVING_CERTS:
        issued = cluster_ca.issue(
            component, dns_names=["localhost"], ip_addresses=[LOOPBACK], server=True, client=False
        )
        cert, _ = layout.serving_cert(component)
        issued.write(cert.parent, cert.stem)
    # How kube-apiserver authenticates to a real kubelet (logs, exec); fake nodes never see it.
    cluster_ca.issue("kube-apiserver-kubelet-client", organizations=["system:masters"]).write(
        pki, "apiserver-kubelet-client"
    )
    sa_private, sa_public = service_account_keypair()
    (pki / "sa.key").touch(mode=0o600)
    (pki / "sa.key").write_bytes(sa_private)
    (pki / "sa.pub").write_bytes(sa_public)
    return cluster_ca


def _write_kubeconfigs(layout: ClusterLayout, cluster_ca: CertificateAuthority, server: str) -> dict[str, Path]:
    """One client certificate and kubeconfig per identity; returns identity -> kubeconfig."""
    kubeconfigs: dict[str, Path] = {}
    for stem, (user, groups) in IDENTITIES.items():
        issued = cluster_ca.issue(user, organizations=groups)
        issued.write(layout.pki, stem)
        target = layout.kubeconfig if stem == "admin" else layout.config / f"{stem}.kubeconfig"
        kubeconfigs[stem] = kubeconfig.write(
            target,
            kubeconfig.render(
                server,
                cluster_ca.cert_pem,
                user=user,
                client_cert_pem=issued.cert_pem,
                client_key_pem=issued.key_pem,
            ),
        )
    return kubeconfigs


def _write_configs(layout: ClusterLayout, kwok_stages: Path) -> None:
    cfg = layout.config
    (cfg / AUDIT_POLICY_FILE).write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))
    # An explicit config keeps kwok from reading ~/.kwok/kwok.yaml of whoever runs the suite. It holds only
    # stages: kwok applies its option defaults (parallelism) only when the file has no KwokConfiguration.
    # kwok-metrics.yaml (beside the stages) adds emulated kubelet resource metrics for metrics-server to scrape.
    kwok_metrics = kwok_stages.with_name("kwok-metrics.yaml")
    (cfg / kwok_component.CONFIG_FILE).write_text(kwok_stages.read_text() + "\n---\n" + kwok_metrics.read_text())


def render(
    layout: ClusterLayout,
    binaries: Binaries,
    ports: Ports,
    *,
    kwok_stages: Path,
    ready_timeout: float,
    stop_timeout: float,
    owner_pid: int | None,
    cleanup_paths: list[Path] | None = None,
    scheduler_qps: int | None = None,
) -> Plan:
    """Write PKI, kubeconfigs and configs under `layout`, and return the process plan."""
    for directory in (layout.pki, layout.config, layout.logs, layout.etcd_data):
        directory.mkdir(parents=True, exist_ok=True)
    cluster_ca = _write_pki(layout)
    kubeconfigs = _write_kubeconfigs(layout, cluster_ca, server_url(ports))
    _write_configs(layout, kwok_stages)
    context = ControlPlaneContext(layout, binaries, ports, versions.feature_gate_flag(), kubeconfigs, scheduler_qps)
    processes: list[ProcessSpec] = [spec for component in COMPONENTS for spec in component.command(context)]
    return Plan(
        processes=processes,
        server=context.server,
        ca_file=str(layout.pki / "ca.crt"),
        client_cert_file=str(layout.pki / "admin.crt"),
        client_key_file=str(layout.pki / "admin.key"),
        ready_timeout=ready_timeout,
        stop_timeout=stop_timeout,
        owner_pid=owner_pid,
        cleanup_paths=[str(path) for path in cleanup_paths or []],
        details={f"port.{name}": str(port) for name, port in vars(ports).items()},
    )
