"""Which pod is the driver's on a node: the pod of a DaemonSet the backend installed, else the one that looks it.

The pods are `kubernetes.client.V1Pod` objects as the API returns them, listed by a stand-in for CoreV1Api.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path, PurePosixPath

from kubernetes import client

from dra_conformance.kubelet.driver_pod import find_driver_pod
from dra_conformance.model.cluster import ClusterInfo

ROOT = PurePosixPath("/var/lib/kubelet")
NODE = "real-node-0"
DRIVER = "gpu.example.com"
INSTALLED = ("fake-dra/fake-dra-kubelet-plugin",)


def _pod(
    name: str,
    host_paths: tuple[str, ...] = ("/var/lib/kubelet/plugins",),
    *,
    daemonset: str | None = "fake-dra-kubelet-plugin",
    namespace: str = "fake-dra",
    args: tuple[str, ...] = (),
    terminating: bool = False,
) -> client.V1Pod:
    owners = [client.V1OwnerReference(api_version="apps/v1", kind="DaemonSet", name=daemonset, uid="u")]
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name,
            namespace=namespace,
            owner_references=owners if daemonset else None,
            deletion_timestamp=datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC) if terminating else None,
        ),
        spec=client.V1PodSpec(
            node_name=NODE,
            containers=[client.V1Container(name="plugin", args=list(args))],
            volumes=[
                client.V1Volume(name=f"v{i}", host_path=client.V1HostPathVolumeSource(path=path))
                for i, path in enumerate(host_paths)
            ],
        ),
    )


class _Pods:
    """The one CoreV1Api call `find_driver_pod` makes, answered with `pods`."""

    def __init__(self, *pods: client.V1Pod) -> None:
        self.pods = list(pods)

    def list_pod_for_all_namespaces(self, field_selector: str) -> client.V1PodList:
        assert field_selector == f"spec.nodeName={NODE}"
        return client.V1PodList(items=self.pods)


def test_the_pod_of_an_installed_daemonset_is_the_drivers_though_it_names_nothing() -> None:
    plain = _pod("fake-dra-kubelet-plugin-x1")  # mounts /var/lib/kubelet/plugins, names no driver
    found, reason = find_driver_pod(_Pods(plain), NODE, ROOT, DRIVER, INSTALLED)
    assert found is plain and reason == "fake-dra/fake-dra-kubelet-plugin-x1", reason
    found, reason = find_driver_pod(_Pods(plain), NODE, ROOT, DRIVER)
    assert found is None and "mounts /var/lib/kubelet/plugins_registry" in reason, "the heuristic alone misses it"


def test_an_installed_daemonsets_pod_is_preferred_to_one_that_looks_like_the_driver() -> None:
    lookalike = _pod(
        "other-plugin-y1",
        ("/var/lib/kubelet/plugins_registry", f"/var/lib/kubelet/plugins/{DRIVER}"),
        daemonset="other-plugin",
        namespace="kube-system",
    )
    installed = _pod("fake-dra-kubelet-plugin-x1")
    found, reason = find_driver_pod(_Pods(lookalike, installed), NODE, ROOT, DRIVER, INSTALLED)
    assert found is installed, reason


def test_only_live_pods_of_the_named_daemonset_in_its_namespace_count() -> None:
    same_name_elsewhere = _pod("fake-dra-kubelet-plugin-z1", namespace="other")
    leaving = _pod("fake-dra-kubelet-plugin-x0", terminating=True)
    live = _pod("fake-dra-kubelet-plugin-x1")
    found, reason = find_driver_pod(_Pods(same_name_elsewhere, leaving, live), NODE, ROOT, DRIVER, INSTALLED)
    assert found is live, reason
    found, reason = find_driver_pod(_Pods(same_name_elsewhere, leaving), NODE, ROOT, DRIVER, INSTALLED)
    assert found is None, "neither is a live pod of fake-dra/fake-dra-kubelet-plugin"


def test_of_several_installed_daemonsets_the_pod_that_registers_is_taken() -> None:
    installed = ("fake-dra/fake-dra-kubelet-plugin", "fake-dra/fake-dra-node-setup")
    setup = _pod("fake-dra-node-setup-a1", ("/opt/vendor",), daemonset="fake-dra-node-setup")
    plugin = _pod("fake-dra-kubelet-plugin-x1", ("/var/lib/kubelet/plugins_registry",))
    found, reason = find_driver_pod(_Pods(setup, plugin), NODE, ROOT, DRIVER, installed)
    assert found is plugin, reason
    twin = _pod("fake-dra-kubelet-plugin-x2", ("/var/lib/kubelet/plugins_registry",))
    found, reason = find_driver_pod(_Pods(plugin, twin), NODE, ROOT, DRIVER, installed)
    assert found is None and "2 pods of the installed DaemonSets" in reason, reason


def test_without_an_installed_pod_on_the_node_the_heuristic_decides() -> None:
    by_arg = _pod(
        "gpu-plugin-b1",
        ("/var/lib/kubelet/plugins_registry",),
        daemonset="gpu-plugin",
        namespace="drivers",
        args=(f"--driver-name={DRIVER}",),
    )
    found, reason = find_driver_pod(_Pods(by_arg), NODE, ROOT, DRIVER, INSTALLED)
    assert found is by_arg, reason
    found, reason = find_driver_pod(_Pods(by_arg), NODE, ROOT, DRIVER)
    assert found is by_arg, reason


def test_the_installed_daemonsets_reach_the_workers() -> None:
    info = ClusterInfo("local", Path("/state/kubeconfig"), "https://127.0.0.1:6443", driver_daemonsets=INSTALLED)
    assert ClusterInfo.from_json(json.loads(json.dumps(info.to_json()))).driver_daemonsets == INSTALLED
