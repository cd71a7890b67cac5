"""Reading nodes: which the cluster lists as Ready, and the UIDs of the nodes a check names."""

from __future__ import annotations

import json
from collections.abc import Iterable

from kubernetes import client
from kubernetes.client.exceptions import ApiException

# A bounded list call: a wait loop around it must not hang on one slow answer.
LIST_REQUEST_TIMEOUT = 10
NOT_FOUND = 404


def node_ready(node: client.V1Node) -> bool:
    """Whether the node has the condition Ready=True."""
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))


def ready_node_names(core: client.CoreV1Api, label_selector: str = "") -> set[str]:
    """Names of the nodes (matching `label_selector`, if given) whose Ready condition is True."""
    listed = core.list_node(label_selector=label_selector, _request_timeout=LIST_REQUEST_TIMEOUT)
    return {node.metadata.name for node in listed.items if node_ready(node)}


# Taints the node lifecycle controller owns: the admission plugin TaintNodesByCondition puts not-ready on every new
# node, and the controller lifts it only once it has seen the node Ready (seconds after the node is, at start-up).
LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def lifecycle_tainted(core: client.CoreV1Api, label_selector: str = "") -> dict[str, list[str]]:
    """Nodes (matching `label_selector`) that still carry a lifecycle taint, with those taints' keys."""
    listed = core.list_node(label_selector=label_selector, _request_timeout=LIST_REQUEST_TIMEOUT)
    found = {
        node.metadata.name: sorted({t.key for t in node.spec.taints or [] if t.key in LIFECYCLE_TAINTS})
        for node in listed.items
    }
    return {name: keys for name, keys in found.items() if keys}


def node_uids(core: client.CoreV1Api, names: Iterable[str]) -> dict[str, str]:
    """The UID of each named Node that exists (a name with no Node is left out), one GET per name.

    Checks that only need the nodes their driver's slices name read those, never the cluster's node list: on a
    cluster of thousands of nodes that list is megabytes per call, and its cost would grow with the cluster.
    """
    found = {}
    for name in sorted(set(names)):
        try:
            answer = core.read_node(name, _preload_content=False, _request_timeout=LIST_REQUEST_TIMEOUT)
        except ApiException as error:
            if error.status == NOT_FOUND:
                continue
            raise
        found[name] = str(json.loads(answer.data)["metadata"]["uid"])
    return found


# Past this many names, one list of every node answers sooner than a GET per name: a check asking for that many
# asks for (nearly) the cluster's every node, as on an existing cluster whose every node is a candidate.
NAMED_READS_MAX = 32


def named_nodes(core: client.CoreV1Api, names: Iterable[str]) -> list[client.V1Node]:
    """The named Nodes that exist, in name order: one GET per name, or one list when asked for many.

    A check that considers only the nodes it knows (the backend's, its driver's) must not read the cluster's node
    list: on a cluster of thousands of nodes that list is megabytes per call.
    """
    wanted = sorted(set(names))
    if len(wanted) > NAMED_READS_MAX:
        listed = core.list_node(_request_timeout=LIST_REQUEST_TIMEOUT).items
        return sorted((n for n in listed if n.metadata.name in set(wanted)), key=lambda n: n.metadata.name)
    found = []
    for name in wanted:
        try:
            found.append(core.read_node(name, _request_timeout=LIST_REQUEST_TIMEOUT))
        except ApiException as error:
            if error.status != NOT_FOUND:
                raise
    return found
