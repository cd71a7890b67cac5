"""The DaemonSet that runs the driver under test on nodes, as a vendor installs a DRA driver's kubelet plugin.

One shape for every backend that deploys the driver as pods (kind, and the local backend's real node); what runs in
the pod is the backend's.
"""

from __future__ import annotations

from dra_conformance.kube.builders import Manifest


def daemon_set(
    name: str, namespace: str, labels: dict[str, str], pod_spec: Manifest, *, selector: dict[str, str] | None = None
) -> Manifest:
    """A DaemonSet `name` whose pods carry `labels` and run `pod_spec`, selected by `selector` (default: `labels`)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": dict(selector if selector is not None else labels)},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


def host_path_volume(name: str, path: str, path_type: str = "DirectoryOrCreate") -> Manifest:
    """A volume of the node's directory `path` (created where missing, by default), as a driver's pod mounts it."""
    return {"name": name, "hostPath": {"path": path, "type": path_type}}
