"""Reading the nodes a check names: the same Nodes whether read one by one or, for many names, from one list."""

from __future__ import annotations

from kubernetes import client

from dra_conformance.kube.nodes import NAMED_READS_MAX, named_nodes
from dra_conformance.model.cluster import ClusterInfo


def test_named_nodes_are_the_existing_ones_in_name_order_read_by_name_or_by_one_list(
    api_client: client.ApiClient, cluster: ClusterInfo
) -> None:
    core = client.CoreV1Api(api_client)
    known = sorted({*cluster.nodes, *cluster.real_nodes})
    missing = [f"no-such-node-{index}" for index in range(NAMED_READS_MAX + 1)]

    by_name = [node.metadata.name for node in named_nodes(core, [*reversed(known), "no-such-node"])]
    by_list = [node.metadata.name for node in named_nodes(core, [*known, *missing])]

    assert known, f"the cluster describes no nodes: {cluster}"
    assert by_name == known, f"read by name: {by_name}; the cluster's nodes: {known}"
    assert by_list == known, f"read from one list ({len(known) + len(missing)} names): {by_list}; expected {known}"
