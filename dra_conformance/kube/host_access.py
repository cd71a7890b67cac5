"""Pods that reach the API server through their node's network, for clusters whose pods have no Service path to it.

The local cluster has no kube-proxy and no pod network: the API server listens on the host's loopback only. A pod on
its real node reaches it with the host's network and the API server's address in the two variables in-cluster
clients read (client-go's `rest.InClusterConfig`, the Python client's `load_incluster_config`). Used for a shipped
driver's pods (`install.transform`) and for Sonobuoy's aggregator and our plugin on the local cluster.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from dra_conformance.errors import BackendError

HOSTNAME_LABEL = "kubernetes.io/hostname"
# What in-cluster clients read instead of the `kubernetes` Service's DNS name.
API_SERVER_ENV = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")


def api_server_env(server: str) -> dict[str, str]:
    """The in-cluster variables that point a client at `server` (a URL such as https://127.0.0.1:6443)."""
    parts = urlsplit(server)
    if parts.hostname is None:
        raise BackendError(f"API server address {server!r} has no host")
    return dict(zip(API_SERVER_ENV, (parts.hostname, str(parts.port or 443)), strict=True))


def reach_api_server_from_host(pod_spec: dict[str, Any], server: str) -> dict[str, str]:
    """Give `pod_spec` the host's network and every container `server` as its API server; returns the variables."""
    variables = api_server_env(server)
    pod_spec["hostNetwork"] = True
    for container in [*pod_spec.get("initContainers", []), *pod_spec.get("containers", [])]:
        kept = [e for e in container.get("env", []) if e.get("name") not in API_SERVER_ENV]
        container["env"] = [*kept, *({"name": k, "value": v} for k, v in variables.items())]
    return variables


def require_nodes(pod_spec: dict[str, Any], nodes: tuple[str, ...], *also: dict[str, Any]) -> None:
    """Add `kubernetes.io/hostname In nodes`, and the requirements `also`, to every required node selector term."""
    expressions = [{"key": HOSTNAME_LABEL, "operator": "In", "values": list(nodes)}, *also]
    required = (
        pod_spec.setdefault("affinity", {})
        .setdefault("nodeAffinity", {})
        .setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    )
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({})
    for term in terms:
        term["matchExpressions"] = [*term.get("matchExpressions", []), *expressions]


def tolerate_scheduling_taints(pod_spec: dict[str, Any]) -> None:
    """Let `pod_spec` be scheduled onto nodes whatever they are tainted with for scheduling (NoSchedule).

    For pods placed on named nodes on purpose (`require_nodes`): the local cluster's real node keeps other pods off
    with a NoSchedule taint. NoExecute taints still apply.
    """
    toleration = {"operator": "Exists", "effect": "NoSchedule"}
    tolerations = pod_spec.setdefault("tolerations", [])
    if toleration not in tolerations:
        tolerations.append(toleration)
