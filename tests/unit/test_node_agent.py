"""What the node agent reads from a node's process list and configs, and which pod it takes for a driver's."""

from __future__ import annotations

from pathlib import PurePosixPath

from kubernetes import client

from dra_conformance.kube.builders import pin_to_node
from dra_conformance.kubelet.driver_pod import find_driver_pod
from dra_conformance.kubelet.node_agent import (
    DEFAULT_CDI_DIRS,
    agent_pod,
    cdi_dirs_of,
    grpc_address_of,
    parse_processes,
    runtime_endpoint_of,
)

LISTING = (
    "412 /usr/bin/containerd\x1f--config\x1f/run/x/containerd.toml\x1f\n"
    "413 /opt/bin/kubelet\x1f--config=/run/x/kubelet.yaml\x1f--root-dir=/run/x/kubelet\x1f\n"
    "9 sh\x1f-c\x1fgrep kubelet\x1f\n"
    "garbage line\n"
)


def test_processes_parse_with_their_flags_in_both_spellings() -> None:
    processes = parse_processes(LISTING)
    assert [p.pid for p in processes] == [412, 413, 9]
    containerd, kubelet, shell = processes
    assert containerd.named("containerd") and not containerd.named("kubelet")
    assert containerd.flag("--config", "-c") == "/run/x/containerd.toml"
    assert kubelet.named("kubelet") and kubelet.flag("--root-dir") == "/run/x/kubelet"
    assert not shell.named("kubelet"), "a shell whose arguments mention kubelet is not the kubelet"


def test_cdi_dirs_come_from_containerd_v3_and_v2_configs_else_the_defaults() -> None:
    v3 = '[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = true\n  cdi_spec_dirs = ["/run/x/cdi"]\n'
    v2 = '[plugins."io.containerd.grpc.v1.cri"]\n  cdi_spec_dirs = ["/etc/cdi", "/opt/cdi"]\n'
    assert cdi_dirs_of(v3) == (PurePosixPath("/run/x/cdi"),)
    assert cdi_dirs_of(v2) == (PurePosixPath("/etc/cdi"), PurePosixPath("/opt/cdi"))
    assert cdi_dirs_of(None) == DEFAULT_CDI_DIRS
    assert cdi_dirs_of("not = [toml") == DEFAULT_CDI_DIRS


def test_the_runtime_socket_matches_between_kubelet_and_containerd() -> None:
    kubelet = parse_processes(LISTING)[1]
    config = "kind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///run/x/containerd.sock\n"
    assert runtime_endpoint_of(kubelet, config) == "/run/x/containerd.sock"
    assert grpc_address_of('[grpc]\n  address = "/run/x/containerd.sock"\n') == "/run/x/containerd.sock"
    assert grpc_address_of(None) == "/run/containerd/containerd.sock"


def test_agent_pod_mounts_the_host_read_only_and_is_pinned_by_node_name() -> None:
    pod = agent_pod("agent-1", "ns", "node-a", "busybox:1.36", ({"key": "k", "operator": "Exists"},))
    spec = pod["spec"]
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert spec["hostPID"] is True and mounts["host"]["readOnly"] is True
    assert "securityContext" not in spec["containers"][0], "the agent needs no privilege to read"
    assert spec["affinity"] == pin_to_node("node-a")


def _pod(
    name: str, host_paths: list[str], *, owner: str | None = "DaemonSet", args: tuple[str, ...] = ()
) -> client.V1Pod:
    owners = [client.V1OwnerReference(api_version="apps/v1", kind=owner, name="ds", uid="u")] if owner else None
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, namespace="drivers", owner_references=owners),
        spec=client.V1PodSpec(
            node_name="node-a",
            containers=[client.V1Container(name="c", args=list(args))],
            volumes=[
                client.V1Volume(name=f"v{i}", host_path=client.V1HostPathVolumeSource(path=p))
                for i, p in enumerate(host_paths)
            ],
        ),
    )


class _Pods:
    def __init__(self, pods: list[client.V1Pod]) -> None:
        self.pods = pods

    def list_pod_for_all_namespaces(self, field_selector: str) -> client.V1PodList:
        assert field_selector == "spec.nodeName=node-a"
        return client.V1PodList(items=self.pods)


ROOT = PurePosixPath("/var/lib/kubelet")


def test_driver_pod_is_the_daemonset_pod_that_registers_and_names_the_driver() -> None:
    csi = _pod("csi-node", ["/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins/csi.example.com"])
    dra = _pod("gpu-plugin", ["/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins/gpu.example.com"])
    found, reason = find_driver_pod(_Pods([csi, dra]), "node-a", ROOT, "gpu.example.com")
    assert found is dra, reason
    by_arg = _pod("gpu-plugin", ["/var/lib/kubelet/plugins_registry"], args=("--driver-name=gpu.example.com",))
    found, reason = find_driver_pod(_Pods([by_arg]), "node-a", ROOT, "gpu.example.com")
    assert found is by_arg, reason


def test_no_driver_pod_is_taken_without_a_daemonset_or_a_registration_mount() -> None:
    bare = _pod("bare", ["/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins/gpu.example.com"], owner=None)
    found, reason = find_driver_pod(_Pods([bare]), "node-a", ROOT, "gpu.example.com")
    assert found is None and "0 DaemonSet pods" in reason
    found, reason = find_driver_pod(_Pods([]), "node-a", ROOT, "gpu.example.com")
    assert found is None and "outside the cluster's pods" in reason
