"""A held pod: allocated and bound like any pod, never prepared by a real kubelet (see `PodHold`)."""

from __future__ import annotations

from dra_conformance.kube.builders import Builder, PodHold, pin_to_node

TAINT = {"key": "dra-conformance.io/real-node", "operator": "Exists", "effect": "NoSchedule"}


def test_a_held_pod_mounts_a_configmap_no_test_creates_tolerates_the_nodes_and_stays_on_them() -> None:
    pod = Builder(namespace="ns", driver="drv").pod(claim="claim-1")
    PodHold(("node-a", "node-b"), (TAINT,)).apply(pod)
    spec = pod["spec"]
    (volume,) = spec["volumes"]
    assert volume["configMap"] == {"name": PodHold((), ()).config_map}
    (container,) = spec["containers"]
    # The kubelet waits only for volumes a container mounts before it prepares the pod's claims.
    assert container["volumeMounts"] == [{"name": volume["name"], "mountPath": "/held"}]
    assert spec["tolerations"] == [TAINT]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    # One term per node: the API server takes one value per metadata.name field selector.
    assert terms == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]},
    ], terms
    assert pod["spec"]["resourceClaims"] == [{"name": "devices", "resourceClaimName": "claim-1"}]


def test_a_pod_pinned_to_one_node_keeps_its_pin_and_its_own_tolerations_once_each() -> None:
    own = {"key": "gpu", "operator": "Exists", "effect": "NoExecute"}
    pod = Builder(namespace="ns", driver="drv").pod(claim="claim-1", node="node-b", tolerations=(own, TAINT))
    PodHold(("node-a", "node-b"), (TAINT,)).apply(pod)
    assert pod["spec"]["affinity"] == pin_to_node("node-b")
    assert pod["spec"]["tolerations"] == [own, TAINT]
