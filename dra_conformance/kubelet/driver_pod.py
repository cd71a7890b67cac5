"""The pod that runs a driver's kubelet plugin on a node of a cluster we did not build, and restarting it.

An in-cluster DRA driver's kubelet plugin is a DaemonSet pod that mounts the kubelet's `plugins_registry` (to
register) and usually its own directory under `<kubelet root>/plugins`. CSI node plugins mount the registry too,
so a candidate must also name the driver: in a host path, an argument or an environment value. Restarting it means
deleting that pod and letting its DaemonSet make a new one, which must register again before pods get devices.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from kubernetes import client

from dra_conformance.kube import waits
from dra_conformance.kube.pods import describe_pod, pod_ready


def _host_paths(pod: client.V1Pod) -> list[PurePosixPath]:
    return [PurePosixPath(v.host_path.path) for v in pod.spec.volumes or [] if v.host_path is not None]


def _names_driver(pod: client.V1Pod, driver: str, kubelet_root: PurePosixPath) -> bool:
    if kubelet_root / "plugins" / driver in _host_paths(pod):
        return True
    words = [arg for c in pod.spec.containers for arg in (c.command or []) + (c.args or [])]
    words += [e.value or "" for c in pod.spec.containers for e in c.env or []]
    return any(driver in word for word in words)


def daemonset_of(pod: client.V1Pod) -> str | None:
    """The name of the DaemonSet that owns `pod`, if one does."""
    owners = pod.metadata.owner_references or []
    return next((o.name for o in owners if o.kind == "DaemonSet"), None)


def find_driver_pod(
    core: client.CoreV1Api, node: str, kubelet_root: PurePosixPath, driver: str
) -> tuple[client.V1Pod | None, str]:
    """The DaemonSet pod serving `driver` on `node`, or None and why none qualifies."""
    registry = kubelet_root / "plugins_registry"
    on_node = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    registering = [p for p in on_node if any(path in (registry, kubelet_root) for path in _host_paths(p))]
    if not registering:
        return None, f"no pod on {node} mounts {registry}: the driver runs outside the cluster's pods there"
    named = [p for p in registering if _names_driver(p, driver, kubelet_root)]
    owned = [p for p in named if daemonset_of(p)]
    if len(owned) != 1:
        seen = [f"{p.metadata.namespace}/{p.metadata.name}" for p in registering]
        return None, f"{len(owned)} DaemonSet pods on {node} mount {registry} and name {driver} (registering: {seen})"
    return owned[0], f"{owned[0].metadata.namespace}/{owned[0].metadata.name}"


def restart_driver_pod(core: client.CoreV1Api, pod: client.V1Pod, timeout: float) -> client.V1Pod:
    """Delete the driver's pod and wait for its DaemonSet's replacement on the same node to be Ready."""
    namespace, node, daemonset = pod.metadata.namespace, pod.spec.node_name, daemonset_of(pod)
    core.delete_namespaced_pod(pod.metadata.name, namespace)

    def replacement() -> client.V1Pod | None:
        candidates = core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node}").items
        fresh = [p for p in candidates if daemonset_of(p) == daemonset and p.metadata.uid != pod.metadata.uid]
        return fresh[0] if fresh else None

    found: client.V1Pod = waits.until(
        replacement,
        lambda p: p is not None and pod_ready(p),
        timeout=timeout,
        what=f"DaemonSet {namespace}/{daemonset} has a Ready replacement of {pod.metadata.name} on {node}",
        describe=lambda p: describe_pod(p) if p is not None else "no replacement yet",
    )
    return found
