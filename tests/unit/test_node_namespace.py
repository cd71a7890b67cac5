"""A further real node's namespaces as names and paths: apart from every other node's, and seen from this machine."""

from __future__ import annotations

import ipaddress
from pathlib import Path, PurePosixPath

import pytest

from dra_conformance.backends.local import real_node_host
from dra_conformance.backends.local.layout import STANDARD_CDI_DIR, STANDARD_KUBELET_ROOT, ClusterLayout
from dra_conformance.backends.local.node_namespace import NODE_LINKS, NodeNamespace
from dra_conformance.model.cluster import ClusterInfo, endpoint_from_json, endpoint_to_json
from dra_conformance.model.driver import DriverEndpoint

# Unix socket paths are limited to 107 bytes; the longest socket name a driver's chart makes below the kubelet root
# is a rolling update's per-pod registration socket, `plugins_registry/<driver>-<pod uid>-reg.sock`.
SOCKET_PATH_LIMIT = 107
LONGEST_SOCKET_BELOW_ROOT = "plugins_registry/gpu.fake-dra.example.com-6217555f-4038-41ab-a281-0c0ef91c1450-reg.sock"


def _nodes(tmp_path: Path, count: int) -> list[NodeNamespace]:
    layout = ClusterLayout(tmp_path / "cluster")
    return [NodeNamespace.of(layout, real_node_host.node_name(i), i) for i in range(1, count)]


def test_node_zero_has_no_namespace_of_its_own(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="host's namespaces"):
        NodeNamespace.of(ClusterLayout(tmp_path), real_node_host.REAL_NODE, 0)


def test_each_further_node_has_its_own_link_names_cgroup_root_and_directories(tmp_path: Path) -> None:
    nodes = _nodes(tmp_path, 4)
    for attribute in ("netns", "host_link", "address", "host_address", "cgroup_root", "kubelet_root", "files"):
        values = [getattr(node, attribute) for node in nodes]
        assert len(set(values)) == len(values), f"{attribute} shared between nodes: {values}"
    for node in nodes:
        assert len(node.host_link) <= 15, f"interface name {node.host_link!r} longer than IFNAMSIZ allows"
        link = {node.address, node.host_address}
        assert all(ipaddress.ip_address(a) in NODE_LINKS for a in link), link


def test_the_node_sees_standard_paths_that_this_machine_sees_in_the_nodes_own_directories(tmp_path: Path) -> None:
    (node,) = _nodes(tmp_path, 2)
    assert node.host_view(STANDARD_KUBELET_ROOT) == node.kubelet_root
    cdi = node.host_view(STANDARD_CDI_DIR)
    assert cdi.is_relative_to(node.files) and cdi != node.host_view(Path("/etc/cdi")), cdi
    # The socket a chart names below /var/lib/kubelet still fits the limit where this machine reaches it.
    longest = node.kubelet_root / LONGEST_SOCKET_BELOW_ROOT
    assert len(str(longest)) <= SOCKET_PATH_LIMIT, f"{longest} is {len(str(longest))} bytes"


def test_a_command_runs_in_both_of_the_nodes_namespaces(tmp_path: Path) -> None:
    (node,) = _nodes(tmp_path, 2)
    wrapped = node.wrap(["kubelet", "--v=2"])
    assert wrapped[-3:] == ["--", "kubelet", "--v=2"], wrapped
    assert f"--mount={node.mount_ns}" in wrapped and f"--net={node.netns_path}" in wrapped, wrapped


def test_a_further_nodes_endpoint_maps_the_nodes_paths_below_its_root_and_keeps_the_others(tmp_path: Path) -> None:
    layout = ClusterLayout(tmp_path / "cluster")
    endpoint = real_node_host.standard_endpoint(layout, "gpu.example.com", "real-node-1")
    assert endpoint.bound and endpoint.root_on_node == PurePosixPath(STANDARD_KUBELET_ROOT), endpoint
    named = "/var/lib/kubelet/plugins/gpu.example.com/dra.sock"
    assert endpoint.reachable(named) == str(endpoint.kubelet_root / "plugins/gpu.example.com/dra.sock")
    # A socket elsewhere (GetInfo may name any path) is the same file on this machine: no relay is in between.
    assert endpoint.reachable("/run/vendor/dra.sock") == "/run/vendor/dra.sock"
    assert endpoint.relay_errors() == []
    node_zero = real_node_host.standard_endpoint(layout, "gpu.example.com", real_node_host.REAL_NODE)
    assert node_zero == DriverEndpoint(
        "gpu.example.com", real_node_host.REAL_NODE, STANDARD_KUBELET_ROOT, STANDARD_CDI_DIR
    )


def test_an_endpoint_survives_the_hand_over_to_workers(tmp_path: Path) -> None:
    endpoint = real_node_host.standard_endpoint(ClusterLayout(tmp_path), "gpu.example.com", "real-node-2")
    assert endpoint_from_json(endpoint_to_json(endpoint)) == endpoint
    plain = DriverEndpoint("d", "kwok-node-0", tmp_path / "kubelet")
    assert endpoint_from_json(endpoint_to_json(plain)) == plain


def test_process_names_keep_node_zero_as_it_was_and_name_the_others() -> None:
    assert real_node_host.process_name("kubelet", real_node_host.REAL_NODE) == "kubelet"
    assert real_node_host.process_name("kubelet", "real-node-1") == "kubelet-real-node-1"
    assert [real_node_host.node_index(n) for n in ("real-node-0", "real-node-12", "kwok-node-1")] == [0, 12, None]


def _cluster(real_nodes: tuple[str, ...], driver_nodes: tuple[str, ...]) -> ClusterInfo:
    endpoints = tuple(DriverEndpoint("gpu.example.com", node, Path("/k") / node) for node in driver_nodes)
    return ClusterInfo(
        backend="local",
        kubeconfig=Path("/kc"),
        server="https://127.0.0.1:1",
        nodes=("kwok-node-0",),
        capabilities=frozenset(),
        drivers=endpoints,
        real_nodes=real_nodes,
    )


def test_a_driver_on_real_nodes_only_gets_the_last_of_two_real_nodes_for_its_disruption_checks() -> None:
    two = ("real-node-0", "real-node-1")
    assert _cluster(two, two).disruption_real_node("gpu.example.com") == "real-node-1"
    # One real node: the socket checks need it; on fake nodes too: the set-aside fake nodes serve.
    assert _cluster(two[:1], two[:1]).disruption_real_node("gpu.example.com") is None
    assert _cluster(two, ("kwok-node-0", *two)).disruption_real_node("gpu.example.com") is None
    assert _cluster(two, two).disruption_real_node("other.example.com") is None
