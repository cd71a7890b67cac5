"""Each component builder of the local cluster renders its own flags (pure: no process, no cluster)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from cryptography import x509

from dra_conformance import paths, versions
from dra_conformance.backends.local import control_plane, drivers
from dra_conformance.backends.local.build import Binaries
from dra_conformance.backends.local.components.base import Component, ControlPlaneContext, Ports
from dra_conformance.backends.local.components.driver import DriverUnderTest
from dra_conformance.backends.local.components.etcd import Etcd
from dra_conformance.backends.local.components.fake_nodes import SET_ASIDE_NODES, FakeNodes, manifest
from dra_conformance.backends.local.components.kube_apiserver import KubeApiserver
from dra_conformance.backends.local.components.kube_controller_manager import KubeControllerManager
from dra_conformance.backends.local.components.kube_scheduler import KubeScheduler
from dra_conformance.backends.local.components.kwok import Kwok
from dra_conformance.backends.local.components.metrics_adapter import MetricsAdapter
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.backends.local.process_plan import Plan
from dra_conformance.backends.local.supervised import SupervisedCluster
from dra_conformance.driver.profile import load_profile
from dra_conformance.timeouts import Timeouts

PORTS = Ports(
    etcd_client=21001, etcd_peer=21002, apiserver=21003, controller_manager=21004, scheduler=21005, kwok=21006
)
BINARIES = Binaries.of(
    {
        name: Path(f"/opt/bin/{name.replace('_', '-')}")
        for name in ("etcd", "kwok", "kube", "metrics_server", "dra_test_driver", "reference_driver_go")
    }
)
READYZ = "https://127.0.0.1:21003/readyz"
# Every check but the two bootstrap hooks that write default roles and priority classes (kube_apiserver.py).
SERVING = (
    f"{READYZ}?exclude=poststarthook/rbac/bootstrap-roles"
    "&exclude=poststarthook/scheduling/bootstrap-system-priority-classes"
)


@pytest.fixture
def context(tmp_path: Path) -> ControlPlaneContext:
    return _context(ClusterLayout(tmp_path / "cluster"))


def _context(layout: ClusterLayout) -> ControlPlaneContext:
    """The context `control_plane.render` gives the builders for `layout` (every identity's kubeconfig)."""
    kubeconfigs = {name: layout.config / f"{name}.kubeconfig" for name in ("controller-manager", "scheduler", "kwok")}
    return ControlPlaneContext(layout, BINARIES, PORTS, versions.feature_gate_flag(), kubeconfigs)


def _render(layout: ClusterLayout) -> Plan:
    return control_plane.render(
        layout,
        BINARIES,
        PORTS,
        kwok_stages=paths.cluster_assets() / "kwok-stages.yaml",
        ready_timeout=1.0,
        stop_timeout=1.0,
        owner_pid=None,
    )


def _flags(argv: list[str]) -> dict[str, str]:
    return dict(arg[2:].split("=", 1) for arg in argv if arg.startswith("--") and "=" in arg)


def test_etcd_listens_on_its_two_ports_and_starts_without_waiting(context: ControlPlaneContext) -> None:
    (spec,) = Etcd().command(context)
    flags = _flags(spec.argv)
    assert spec.argv[0] == "/opt/bin/etcd" and spec.wait_for is None and spec.critical, spec
    assert flags["listen-client-urls"] == flags["advertise-client-urls"] == "http://127.0.0.1:21001", flags
    assert flags["initial-cluster"] == "dra-conformance=http://127.0.0.1:21002", flags
    assert flags["data-dir"] == str(context.layout.etcd_data) and flags["unsafe-no-fsync"] == "true", flags
    assert spec.log == str(context.layout.component_log("etcd")), spec.log


def test_apiserver_serves_on_its_port_from_etcd_with_the_pinned_gates(context: ControlPlaneContext) -> None:
    (spec,) = KubeApiserver().command(context)
    flags = _flags(spec.argv)
    assert spec.argv[:2] == ["/opt/bin/kube", "apiserver"] and spec.wait_for is None, spec.argv[:2]
    assert flags["etcd-servers"] == "http://127.0.0.1:21001" and flags["secure-port"] == "21003", flags
    assert flags["authorization-mode"] == "Node,RBAC" and flags["endpoint-reconciler-type"] == "none", flags
    assert flags["feature-gates"] == versions.feature_gate_flag(), flags["feature-gates"]
    assert flags["runtime-config"] == versions.runtime_config_flag(), flags["runtime-config"]
    assert flags["audit-log-path"] == str(context.layout.audit_log), flags
    assert "enable-aggregator-routing" not in flags, "aggregated APIs route through an ExternalName to localhost"
    assert KubeApiserver.ready_url(context) == READYZ
    assert KubeApiserver.serving_url(context) == SERVING


@pytest.mark.parametrize(
    ("component", "subcommand", "port", "identity"),
    [
        (KubeControllerManager(), "controller-manager", "21004", "controller-manager"),
        (KubeScheduler(), "scheduler", "21005", "scheduler"),
    ],
)
def test_controller_manager_and_scheduler_wait_for_the_apiserver_and_use_their_own_identity(
    context: ControlPlaneContext,
    component: KubeControllerManager | KubeScheduler,
    subcommand: str,
    port: str,
    identity: str,
) -> None:
    (spec,) = component.command(context)
    flags = _flags(spec.argv)
    kubeconfig = str(context.kubeconfigs[identity])
    # Their identities authorize through the bootstrap roles: they start once the API server wrote them.
    assert spec.argv[:2] == ["/opt/bin/kube", subcommand] and spec.wait_for == READYZ, (spec.argv[:2], spec.wait_for)
    assert spec.awaited == "apiserver_ready", spec
    assert flags["kubeconfig"] == flags["authentication-kubeconfig"] == flags["authorization-kubeconfig"] == kubeconfig
    assert flags["secure-port"] == port and flags["leader-elect"] == "false", flags


def test_controller_manager_signs_with_the_cluster_ca_and_is_not_paced_by_the_default_client_limit(
    context: ControlPlaneContext,
) -> None:
    flags = _flags(KubeControllerManager().command(context)[0].argv)
    pki = context.layout.pki
    assert flags["cluster-signing-cert-file"] == str(pki / "ca.crt"), flags
    assert (flags["kube-api-qps"], flags["kube-api-burst"], flags["controllers"]) == ("100", "200", "*"), flags


def test_scheduler_keeps_its_default_client_limit_unless_a_bench_lifts_it(context: ControlPlaneContext) -> None:
    flags = _flags(KubeScheduler().command(context)[0].argv)
    assert "kube-api-qps" not in flags and "kube-api-burst" not in flags, flags
    lifted = _flags(KubeScheduler().command(dataclasses.replace(context, scheduler_qps=5000))[0].argv)
    assert (lifted["kube-api-qps"], lifted["kube-api-burst"]) == ("5000", "5000"), lifted


def test_kwok_manages_only_annotated_nodes_on_its_port_and_starts_while_the_bootstrap_hooks_run(
    context: ControlPlaneContext,
) -> None:
    (spec,) = Kwok().command(context)
    flags = _flags(spec.argv)
    assert spec.argv[0] == "/opt/bin/kwok" and (spec.wait_for, spec.awaited) == (SERVING, "apiserver_serving"), spec
    assert flags["manage-all-nodes"] == "false", flags
    assert flags["manage-nodes-with-annotation-selector"] == "kwok.x-k8s.io/node=fake", flags
    assert flags["server-address"] == "127.0.0.1:21006" and flags["node-port"] == "21006", flags
    assert flags["kubeconfig"] == str(context.kubeconfigs["kwok"]), flags


def test_render_writes_the_plan_in_start_order_from_the_builders(tmp_path: Path) -> None:
    layout = ClusterLayout(tmp_path / "cluster")
    plan = _render(layout)
    names = [spec.name for spec in plan.processes]
    assert names == ["etcd", "kube-apiserver", "kwok", "kube-controller-manager", "kube-scheduler"], names
    assert plan.processes == [spec for c in control_plane.COMPONENTS for spec in c.command(_context(layout))]
    assert plan.server == "https://127.0.0.1:21003" and plan.details["port.kwok"] == "21006", plan.details
    for written in (layout.kubeconfig, layout.config / "audit-policy.yaml", layout.config / "kwok.yaml"):
        assert written.is_file(), written


def test_render_issues_the_serving_certificates_the_controller_manager_and_scheduler_are_given(tmp_path: Path) -> None:
    layout = ClusterLayout(tmp_path / "cluster")
    _render(layout)
    cluster_ca = x509.load_pem_x509_certificate((layout.pki / "ca.crt").read_bytes())
    for component in (KubeControllerManager(), KubeScheduler()):
        flags = _flags(component.command(_context(layout))[0].argv)
        cert_path, key_path = layout.serving_cert(component.name)
        assert (flags["tls-cert-file"], flags["tls-private-key-file"]) == (str(cert_path), str(key_path)), flags
        assert "cert-dir" not in flags, f"{component.name} would make a self-signed certificate at start: {flags}"
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        cert.verify_directly_issued_by(cluster_ca)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert names.get_values_for_type(x509.DNSName) == ["localhost"], names
        assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"], names
        assert key_path.stat().st_mode & 0o077 == 0, oct(key_path.stat().st_mode)


def test_fake_nodes_get_their_own_loopback_address_and_the_set_aside_ones_come_last() -> None:
    nodes = FakeNodes(("kwok-node-0", "kwok-node-1"))
    assert nodes.all == ("kwok-node-0", "kwok-node-1", *SET_ASIDE_NODES), nodes.all
    addresses = [a["address"] for a in manifest(1, "kwok-node-1")["status"]["addresses"] if a["type"] == "InternalIP"]
    assert addresses == ["127.0.0.11"], addresses


def test_fake_nodes_register_with_what_the_controller_manager_would_otherwise_write_at_its_start() -> None:
    # The beta OS and arch labels a kubelet registers with, and the TTL controller's value for a small cluster:
    # without them, two controllers patch every node at once, and the taint removal a start waits for conflicts.
    node = manifest(0, "kwok-node-0")["metadata"]
    labels = {key: node["labels"].get(key) for key in ("beta.kubernetes.io/os", "beta.kubernetes.io/arch")}
    assert labels == {"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"}, node["labels"]
    assert node["annotations"].get("node.alpha.kubernetes.io/ttl") == "0", node["annotations"]


@pytest.mark.parametrize("kind", ["fake", "metrics-server"])
def test_metrics_adapter_serves_on_its_reserved_port(tmp_path: Path, kind: str) -> None:
    layout = ClusterLayout(tmp_path / "cluster")
    layout.pki.mkdir(parents=True)
    (spec,) = MetricsAdapter(kind, 21007, BINARIES.metrics_server).command(SupervisedCluster(layout, Timeouts()))
    flags = _flags(spec.argv)
    port = flags.get("port") or flags.get("secure-port")
    assert port == "21007" and flags["bind-address"] == "127.0.0.1" and not spec.critical, spec.argv
    if kind == "fake":
        assert flags["control-socket"].startswith(str(drivers.runtime_dir(layout))), flags


def test_every_builder_is_a_component() -> None:
    # Also checked by mypy: each builder fits the common protocol (name, command, ready).
    cluster_parts: tuple[Component[SupervisedCluster, SupervisedCluster], ...] = (
        FakeNodes(()),
        DriverUnderTest(load_profile(paths.reference_driver_profile()), {}, ()),
        MetricsAdapter("fake", 1, BINARIES.metrics_server),
    )
    assert [part.name for part in cluster_parts] == ["fake-nodes", "driver", "metrics"]
    assert [c.name for c in control_plane.COMPONENTS] == [
        "etcd",
        "kube-apiserver",
        "kwok",
        "kube-controller-manager",
        "kube-scheduler",
    ]
