"""The pod that runs a driver's kubelet plugin on a node, and restarting it.

Where the backend installed the driver itself (a profile's `install`), it knows the DaemonSets it applied
(`ClusterInfo.driver_daemonsets`): the driver's pod is theirs on the node. On a cluster we did not build it is
found by what it mounts and says: an in-cluster DRA driver's kubelet plugin is a DaemonSet pod that mounts the
kubelet's `plugins_registry` (to register) and usually its own directory under `<kubelet root>/plugins`. CSI node
plugins mount the registry too, so a candidate must also name the driver: in a host path, an argument or an
environment value. Restarting it means deleting that pod and letting its DaemonSet make a new one, which must
register again before pods get devices.
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


def _pod_name(pod: client.V1Pod) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"


def _registers(pod: client.V1Pod, kubelet_root: PurePosixPath) -> bool:
    return any(path in (kubelet_root / "plugins_registry", kubelet_root) for path in _host_paths(pod))


def _of_installed(
    on_node: list[client.V1Pod], daemonsets: tuple[str, ...], driver: str, kubelet_root: PurePosixPath
) -> tuple[client.V1Pod | None, list[client.V1Pod]]:
    """The one live pod of `daemonsets` among `on_node`, else None; and all of their live pods.

    Where several are (a chart may install more than one DaemonSet), the one that registers, then names the driver.
    """
    pods = [
        p
        for p in on_node
        if p.metadata.deletion_timestamp is None and f"{p.metadata.namespace}/{daemonset_of(p)}" in daemonsets
    ]
    chosen = pods
    if len(chosen) > 1 and any(_registers(p, kubelet_root) for p in chosen):
        chosen = [p for p in chosen if _registers(p, kubelet_root)]
    if len(chosen) > 1 and any(_names_driver(p, driver, kubelet_root) for p in chosen):
        chosen = [p for p in chosen if _names_driver(p, driver, kubelet_root)]
    return (chosen[0] if len(chosen) == 1 else None), pods


def find_driver_pod(
    core: client.CoreV1Api,
    node: str,
    kubelet_root: PurePosixPath,
    driver: str,
    daemonsets: tuple[str, ...] = (),
) -> tuple[client.V1Pod | None, str]:
    """The DaemonSet pod serving `driver` on `node`, or None and why none qualifies.

    `daemonsets` (`namespace/name`) are those the backend installed for the driver (`ClusterInfo.driver_daemonsets`):
    their pod on the node is the driver's, whatever it mounts or names. Without them, or where none of them has a pod
    on the node, the driver's pod is the DaemonSet pod that mounts the kubelet's registry and names the driver.
    """
    registry = kubelet_root / "plugins_registry"
    on_node = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    if daemonsets:
        installed, pods = _of_installed(on_node, daemonsets, driver, kubelet_root)
        if installed is not None:
            return installed, _pod_name(installed)
        if pods:
            return None, (
                f"{len(pods)} pods of the installed DaemonSets {list(daemonsets)} on {node}, and not one alone "
                f"registers and names {driver}: {[_pod_name(p) for p in pods]}"
            )
    registering = [p for p in on_node if _registers(p, kubelet_root)]
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
