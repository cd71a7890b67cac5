"""What a started cluster looks like to the suites, what its backend can offer, and the driver processes it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Any, Protocol, runtime_checkable

from dra_conformance.model.driver import DriverEndpoint


class BackendCapability(StrEnum):
    """What a backend can offer beyond a kubeconfig; checks that need one are not applicable without it."""

    # The backend holds the cluster CA and can mint `system:node:<name>` client certificates.
    NODE_CLIENT_CERTS = "node-client-certs"
    # The kube-apiserver audit log is readable from this machine.
    AUDIT_LOG = "audit-log"
    # Nodes are kwok's fake nodes: no kubelet, the test plays the kubelet's role.
    KWOK_NODES = "kwok-nodes"
    # The cluster's processes run on this machine, under a state directory (`details["state_dir"]`).
    LOCAL_PROCESSES = "local-processes"
    # The reference DRA driver runs on every node and the backend can start private instances of it.
    REFERENCE_DRIVER = "reference-driver"
    # The reference Metrics API adapter serves metrics.k8s.io, with switchable faults.
    REFERENCE_METRICS_ADAPTER = "reference-metrics-adapter"
    # Nodes set aside for checks that need a node of the driver under test to themselves: disrupting the driver
    # (kill, restart) or counting its devices exactly. Other tests never land there, because they carry
    # SET_ASIDE_TAINT (`ClusterInfo.set_aside_nodes`); a check leases one (see `driver.lease`).
    SET_ASIDE_NODES = "set-aside-nodes"
    # A real kubelet (on containerd and runc) serves `ClusterInfo.real_nodes`: it prepares claims itself, and
    # containers get what the driver's CDI specs inject.
    REAL_KUBELET = "real-kubelet"


# Keeps every pod that does not tolerate it off the set-aside nodes, so a driver restart or an exact device count
# there is disturbed by no other test running in parallel.
SET_ASIDE_TAINT = {"key": "dra-conformance.io/set-aside", "value": "true", "effect": "NoSchedule"}
SET_ASIDE_TOLERATION = {"key": SET_ASIDE_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
# Keeps every pod but those of kubelet-mode checks off a real node, where a real kubelet would run it.
REAL_NODE_TAINT = {"key": "dra-conformance.io/real-node", "value": "true", "effect": "NoSchedule"}


@dataclass(frozen=True)
class ClusterInfo:
    """What the suites know about a running cluster.

    `capabilities` are the optional powers of the backend (see `BackendCapability`).
    """

    backend: str
    kubeconfig: Path
    server: str
    nodes: tuple[str, ...] = ()
    capabilities: frozenset[BackendCapability] = frozenset()
    pki_dir: Path | None = None
    audit_log: Path | None = None
    log_dir: Path | None = None
    # DRA drivers whose kubelet-plugin sockets this machine can reach (the local backend's fake driver).
    drivers: tuple[DriverEndpoint, ...] = ()
    # Nodes of the driver under test that carry SET_ASIDE_TAINT (none on clusters this suite did not build).
    set_aside_nodes: tuple[str, ...] = ()
    # Nodes a real kubelet serves, tainted with REAL_NODE_TAINT (kubelet-mode checks only).
    real_nodes: tuple[str, ...] = ()
    # `namespace/name` of the DaemonSets the backend installed for the driver under test (a profile's `install`):
    # their pods are the driver's. Empty on clusters this suite did not build.
    driver_daemonsets: tuple[str, ...] = ()
    # The changes the backend made to the driver's manifests (a profile's `install.transform`), one line each as
    # printed at start; the run's summary lists them. Empty where nothing was installed or changed.
    install_transforms: tuple[str, ...] = ()
    # The DaemonSets of the driver's previous release (a profile's `install.previous`), transformed as the install's
    # manifests were and not applied: what the upgrade check rolls to and back from. Empty where none was named.
    previous_release: tuple[dict[str, Any], ...] = ()
    details: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe form, handed from the controller to xdist workers so they need not attach again."""
        return {
            "backend": self.backend,
            "kubeconfig": str(self.kubeconfig),
            "server": self.server,
            "nodes": list(self.nodes),
            "capabilities": sorted(capability.value for capability in self.capabilities),
            "pki_dir": _optional_str(self.pki_dir),
            "audit_log": _optional_str(self.audit_log),
            "log_dir": _optional_str(self.log_dir),
            "drivers": [endpoint_to_json(e) for e in self.drivers],
            "set_aside_nodes": list(self.set_aside_nodes),
            "real_nodes": list(self.real_nodes),
            "driver_daemonsets": list(self.driver_daemonsets),
            "install_transforms": list(self.install_transforms),
            "previous_release": list(self.previous_release),
            "details": dict(self.details),
        }

    def disruption_real_node(self, driver: str) -> str | None:
        """The real node set aside for checks that stop and start `driver`, where it runs on real nodes only.

        A driver the backend runs on real nodes only (none of its endpoints on a fake node) is stopped on the last
        of two or more real nodes; socket checks and the driver's answer watch leave that node out, as they leave
        out the set-aside fake nodes. None with one real node, or where the driver runs on fake nodes.
        """
        own = [e.node for e in self.drivers if e.driver == driver]
        if len(self.real_nodes) < 2 or not own or any(node in self.nodes for node in own):
            return None
        return self.real_nodes[-1] if self.real_nodes[-1] in own else None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterInfo:
        """The inverse of `to_json`."""
        return cls(
            backend=data["backend"],
            kubeconfig=Path(data["kubeconfig"]),
            server=data["server"],
            nodes=tuple(data["nodes"]),
            capabilities=frozenset(BackendCapability(name) for name in data["capabilities"]),
            pki_dir=_optional_path(data["pki_dir"]),
            audit_log=_optional_path(data["audit_log"]),
            log_dir=_optional_path(data["log_dir"]),
            drivers=tuple(endpoint_from_json(entry) for entry in data["drivers"]),
            set_aside_nodes=tuple(data.get("set_aside_nodes", ())),
            real_nodes=tuple(data.get("real_nodes", ())),
            driver_daemonsets=tuple(data.get("driver_daemonsets", ())),
            install_transforms=tuple(data.get("install_transforms", ())),
            previous_release=tuple(data.get("previous_release", ())),
            details=dict(data["details"]),
        )


def _optional_str(path: Path | PurePosixPath | None) -> str | None:
    return None if path is None else str(path)


def _optional_path(text: str | None) -> Path | None:
    return None if text is None else Path(text)


@dataclass(frozen=True)
class DriverExit:
    """One exit of the driver under test during a run."""

    node: str
    # The exit code, or -N for signal N (as subprocess reports it).
    code: int
    # When it exited (epoch seconds).
    at: float
    # Whether the suite killed it on purpose (a disruption check); anything else is the driver's own doing.
    caused_by_suite: bool
    # The last lines of its log, for the finding.
    log_tail: str = ""

    def describe(self) -> str:
        """'kwok-node-0: killed by signal 9' or 'kwok-node-0: exit code 2'."""
        how = f"killed by signal {-self.code}" if self.code < 0 else f"exit code {self.code}"
        return f"{self.node}: {how}"


@runtime_checkable
class KubeletRestarts(Protocol):
    """A backend that runs a node's kubelet itself and can restart it, as `systemctl restart kubelet` would."""

    def restart_kubelet(self, node: str) -> None:
        """SIGTERM the kubelet of `node`, start it again, and return once the supervisor runs the new one."""
        ...


@runtime_checkable
class DriverTermination(Protocol):
    """A backend that can stop the driver under test gracefully, as the kubelet stops its pod (SIGTERM)."""

    def terminate_driver(self, node: str) -> int:
        """SIGTERM the driver on `node` (SIGKILL once it outlived process_stop); return its exit status."""
        ...


@runtime_checkable
class DriverProcesses(Protocol):
    """A backend that runs the driver under test's processes itself and can disrupt them."""

    def kill_driver(self, node: str) -> int:
        """SIGKILL the driver on `node`; return its exit status once the supervisor has seen it exit."""
        ...

    def start_driver(self, node: str, build: str | None = None) -> None:
        """Start the driver on `node` again (its profile's `build`, default its own) and wait for a complete pool."""
        ...

    def driver_kubeconfig(self, node: str) -> Path:
        """The kubeconfig the driver on `node` reads at start (its identity and the API server it talks to)."""
        ...

    def driver_exits(self, since: float) -> list[DriverExit]:
        """Every exit of the driver under test since `since` (epoch seconds), the suite's own kills marked."""
        ...


def endpoint_to_json(endpoint: DriverEndpoint) -> dict[str, Any]:
    """A driver endpoint as JSON (cluster.json, the controller's hand-over to xdist workers)."""
    return {
        "driver": endpoint.driver,
        "node": endpoint.node,
        "kubelet_root": str(endpoint.kubelet_root),
        "cdi_dir": _optional_str(endpoint.cdi_dir),
        "node_kubelet_root": _optional_str(endpoint.node_kubelet_root),
        "bound": endpoint.bound,
    }


def endpoint_from_json(entry: dict[str, Any]) -> DriverEndpoint:
    """The inverse of `endpoint_to_json`."""
    node_root = entry.get("node_kubelet_root")
    return DriverEndpoint(
        entry["driver"],
        entry["node"],
        Path(entry["kubelet_root"]),
        _optional_path(entry.get("cdi_dir")),
        PurePosixPath(node_root) if node_root else None,
        bool(entry.get("bound", False)),
    )
