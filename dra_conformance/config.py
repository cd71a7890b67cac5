"""`SuiteConfig`: every user-facing setting of a run, with defaults; built from CLI flags or pytest options."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dra_conformance.timeouts import Timeouts

METRICS_IMPLEMENTATIONS = ("fake", "metrics-server", "none")


@dataclass(frozen=True)
class SuiteConfig:
    """Settings of one conformance run."""

    # Which cluster backend to use: "local" (embedded, default) or "existing" (any kubeconfig).
    backend: str = "local"
    # kubeconfig of an existing cluster (backend "existing"); the local backend writes its own.
    kubeconfig: Path | None = None
    # kubeconfig context to use (backend "existing"); None means the current context.
    context: str | None = None
    # Number of kwok-managed fake nodes of a local cluster.
    nodes: int = 2
    # State directory of the local cluster; None means reports/clusters/local in the checkout.
    state_dir: Path | None = None
    # Build cache of the pinned binaries; None means ~/.cache/dra-conformance.
    cache_dir: Path | None = None
    # Leave a cluster this run started running afterwards (for debugging or reuse).
    keep_cluster: bool = False
    # Metrics API implementation of a local cluster: "fake" (reference adapter), "metrics-server" or "none".
    metrics: str = "fake"
    # kube-apiserver audit log of an existing cluster, if readable here.
    audit_log: Path | None = None
    # Driver profile of the driver under test; None means the reference driver's bundled profile.
    profile: Path | None = None
    # Add a real node (kubelet on containerd and runc, as root on this machine) to a local cluster.
    real_node: bool = False
    # With real_node, how many real nodes: node 0 in this machine's namespaces, each further one in its own.
    real_nodes: int = 2
    # A running local cluster of the state directory with another profile's driver gets this profile's instead.
    replace_driver: bool = False
    timeouts: Timeouts = field(default_factory=Timeouts)
