"""Renders everything a local cluster needs on disk (PKI, kubeconfigs, configs) and the process plan."""

from __future__ import annotations

import json
import secrets
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from dra_conformance import versions
from dra_conformance.backends.local.build import Binaries
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.errors import BackendError
from dra_conformance.kube import kubeconfig
from dra_conformance.kube.pki import CertificateAuthority, service_account_keypair

LOOPBACK = "127.0.0.1"
SERVICE_CIDR = "10.96.0.0/16"
# The first service IP is the `kubernetes` Service; it must be a SAN of the serving cert even though nothing
# here routes to it (no kube-proxy).
KUBERNETES_SERVICE_IP = "10.96.0.1"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
FRONT_PROXY_CLIENT = "front-proxy-client"
# Fake pod IPs handed out by kwok; never dialled (see the design's "loopback only").
POD_CIDR = "10.244.0.1/16"
# Fake nodes get distinct loopback addresses, starting here.
NODE_ADDRESS_BASE = 10


# Listener ports (see listener_port_range): Linux's default ephemeral range starts at 32768; below 20000 sit
# many well-known services; 200 random probes find a free port unless thousands are in use.
DEFAULT_EPHEMERAL_LOW = 32768
MIN_LISTENER_PORT = 20000
MIN_RANGE_SIZE = 1000
PORT_PROBES = 200


def node_address(index: int) -> str:
    """Loopback address of the fake node with this index (127.0.0.10, .11, ...)."""
    return f"127.0.0.{NODE_ADDRESS_BASE + index}"


def listener_port_range() -> range:
    """Ports for our listeners: from MIN_LISTENER_PORT up to the kernel's ephemeral range.

    A port the kernel hands out with bind(0) is an ephemeral one, and until the component binds it, any outgoing
    connection on the machine may take it as its source port: in CI a controller-manager failed with "bind: address
    already in use" that way while the tests around it made thousands of connections. Below the ephemeral range
    only listeners compete.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = DEFAULT_EPHEMERAL_LOW
    # A machine whose ephemeral range starts low still gets a range (where only the probe protects it).
    return range(MIN_LISTENER_PORT, max(low, MIN_LISTENER_PORT + MIN_RANGE_SIZE))


def free_port(taken: frozenset[int] = frozenset()) -> int:
    """A loopback port nothing listens on, chosen at random below the ephemeral range (see listener_port_range).

    Another cluster starting at the same moment may still pick it; start-up then fails loudly, naming the port.
    """
    ports = listener_port_range()
    for _ in range(PORT_PROBES):
        port = secrets.choice(ports)
        if port in taken:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((LOOPBACK, port))
            except OSError:
                continue
        return port
    raise BackendError(f"no free loopback port found in {PORT_PROBES} tries in {ports.start}-{ports.stop - 1}")


@dataclass(frozen=True)
class Ports:
    """Loopback ports of one local cluster, chosen at `up` so several checkouts can run side by side."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int

    @classmethod
    def allocate(cls) -> Ports:
        """Pick a free port for every listener."""
        chosen: list[int] = []
        for _ in range(6):
            chosen.append(free_port(frozenset(chosen)))
        return cls(*chosen)


@dataclass(frozen=True)
class ProcessSpec:
    """One process the supervisor runs.

    `wait_for` names an HTTPS URL that must answer 200 before it starts. When a `critical` process exits the
    whole cluster stops; a non-critical one (a DRA driver, which tests may crash on purpose) is only recorded.
    """

    name: str
    argv: list[str]
    log: str
    wait_for: str | None = None
    critical: bool = True
    # Variables added to the supervisor's environment for this process (a driver profile's `run.env`).
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """Everything the supervisor needs: processes in start order, and how to probe the API server."""

    processes: list[ProcessSpec]
    server: str
    ca_file: str
    client_cert_file: str
    client_key_file: str
    ready_timeout: float
    stop_timeout: float
    owner_pid: int | None = None
    # Directories outside the state directory the supervisor removes after its children stopped.
    cleanup_paths: list[str] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)

    def write(self, path: Path) -> None:
        """Serialize the plan as JSON."""
        path.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def read(cls, path: Path) -> Plan:
        """Load a plan written by `write`."""
        raw = json.loads(path.read_text())
        raw["processes"] = [ProcessSpec(**spec) for spec in raw["processes"]]
        return cls(**raw)


AUDIT_POLICY = {
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
) -> Plan:
    """Write PKI, kubeconfigs and configs under `layout`, and return the process plan."""
    for directory in (layout.pki, layout.config, layout.logs, layout.etcd_data):
        directory.mkdir(parents=True, exist_ok=True)
    pki, cfg = layout.pki, layout.config
    server = f"https://{LOOPBACK}:{ports.apiserver}"

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
    # How kube-apiserver authenticates to a real kubelet (logs, exec); fake nodes never see it.
    cluster_ca.issue("kube-apiserver-kubelet-client", organizations=["system:masters"]).write(
        pki, "apiserver-kubelet-client"
    )
    sa_private, sa_public = service_account_keypair()
    (pki / "sa.key").touch(mode=0o600)
    (pki / "sa.key").write_bytes(sa_private)
    (pki / "sa.pub").write_bytes(sa_public)

    identities = {
        "admin": ("dra-conformance-admin", ["system:masters"]),
        "controller-manager": ("system:kube-controller-manager", []),
        "scheduler": ("system:kube-scheduler", []),
        # kwok plays the kubelet of every fake node, so it needs more than one node identity allows.
        "kwok": ("kwok-controller", ["system:masters"]),
    }
    kubeconfigs: dict[str, Path] = {}
    for stem, (user, groups) in identities.items():
        issued = cluster_ca.issue(user, organizations=groups)
        issued.write(pki, stem)
        target = layout.kubeconfig if stem == "admin" else cfg / f"{stem}.kubeconfig"
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

    (cfg / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))
    # An explicit config keeps kwok from reading ~/.kwok/kwok.yaml of whoever runs the suite. It holds only
    # stages: kwok applies its option defaults (parallelism) only when the file has no KwokConfiguration.
    # kwok-metrics.yaml (beside the stages) adds emulated kubelet resource metrics for metrics-server to scrape.
    kwok_metrics = kwok_stages.with_name("kwok-metrics.yaml")
    (cfg / "kwok.yaml").write_text(kwok_stages.read_text() + "\n---\n" + kwok_metrics.read_text())

    gates = versions.feature_gate_flag()
    etcd = ProcessSpec(
        "etcd",
        [
            str(binaries.etcd),
            "--name=dra-conformance",
            f"--data-dir={layout.etcd_data}",
            f"--listen-client-urls=http://{LOOPBACK}:{ports.etcd_client}",
            f"--advertise-client-urls=http://{LOOPBACK}:{ports.etcd_client}",
            f"--listen-peer-urls=http://{LOOPBACK}:{ports.etcd_peer}",
            f"--initial-advertise-peer-urls=http://{LOOPBACK}:{ports.etcd_peer}",
            f"--initial-cluster=dra-conformance=http://{LOOPBACK}:{ports.etcd_peer}",
            # A throwaway test store: fsync on every write costs more than the data is worth.
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ],
        str(layout.component_log("etcd")),
    )
    apiserver = ProcessSpec(
        "kube-apiserver",
        [
            str(binaries.kube),
            "apiserver",
            f"--etcd-servers=http://{LOOPBACK}:{ports.etcd_client}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            # The lease reconciler refuses a loopback advertise address; the `kubernetes` Service endpoints it would
            # maintain are unusable here anyway (no kube-proxy).
            "--endpoint-reconciler-type=none",
            f"--secure-port={ports.apiserver}",
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
            f"--audit-policy-file={cfg / 'audit-policy.yaml'}",
            "--audit-log-maxbackup=3",
            "--audit-log-maxsize=100",
            f"--feature-gates={gates}",
            f"--runtime-config={versions.runtime_config_flag()}",
            "--profiling=false",
            "--v=1",
        ],
        str(layout.component_log("kube-apiserver")),
    )
    readyz = f"{server}/readyz"

    def component_auth(stem: str) -> list[str]:
        path = kubeconfigs[stem]
        return [
            f"--kubeconfig={path}",
            f"--authentication-kubeconfig={path}",
            f"--authorization-kubeconfig={path}",
        ]

    controller_manager = ProcessSpec(
        "kube-controller-manager",
        [
            str(binaries.kube),
            "controller-manager",
            *component_auth("controller-manager"),
            f"--bind-address={LOOPBACK}",
            f"--secure-port={ports.controller_manager}",
            f"--cert-dir={cfg / 'controller-manager-certs'}",
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
            f"--feature-gates={gates}",
            "--profiling=false",
            "--v=1",
        ],
        str(layout.component_log("kube-controller-manager")),
        wait_for=readyz,
    )
    scheduler = ProcessSpec(
        "kube-scheduler",
        [
            str(binaries.kube),
            "scheduler",
            *component_auth("scheduler"),
            f"--bind-address={LOOPBACK}",
            f"--secure-port={ports.scheduler}",
            f"--cert-dir={cfg / 'scheduler-certs'}",
            "--leader-elect=false",
            f"--feature-gates={gates}",
            "--profiling=false",
            "--v=1",
        ],
        str(layout.component_log("kube-scheduler")),
        wait_for=readyz,
    )
    kwok = ProcessSpec(
        "kwok",
        [
            str(binaries.kwok),
            f"--config={cfg / 'kwok.yaml'}",
            f"--kubeconfig={kubeconfigs['kwok']}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--server-address={LOOPBACK}:{ports.kwok}",
            f"--node-ip={LOOPBACK}",
            f"--node-port={ports.kwok}",
            f"--cidr={POD_CIDR}",
            "--node-lease-duration-seconds=40",
        ],
        str(layout.component_log("kwok")),
        wait_for=readyz,
    )

    return Plan(
        processes=[etcd, apiserver, controller_manager, scheduler, kwok],
        server=server,
        ca_file=str(pki / "ca.crt"),
        client_cert_file=str(pki / "admin.crt"),
        client_key_file=str(pki / "admin.key"),
        ready_timeout=ready_timeout,
        stop_timeout=stop_timeout,
        owner_pid=owner_pid,
        cleanup_paths=[str(path) for path in cleanup_paths or []],
        details={f"port.{name}": str(port) for name, port in asdict(ports).items()},
    )
