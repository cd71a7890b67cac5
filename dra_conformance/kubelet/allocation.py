"""Getting a claim allocated by the real scheduler: claim + pod, then wait until the pod is bound."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes import client

from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API, Builder
from dra_conformance.kube.pods import describe_pod
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.client import ClaimRef


@dataclass(frozen=True)
class AllocatedClaim:
    """A claim the scheduler allocated, the pod it is reserved for, and the node both landed on."""

    claim: dict[str, Any]
    pod: dict[str, Any]
    node: str

    @property
    def ref(self) -> ClaimRef:
        """The claim as NodePrepareResources names it."""
        return ClaimRef.of(self.claim)

    @property
    def results(self) -> list[dict[str, Any]]:
        """status.allocation.devices.results."""
        return list(self.claim["status"]["allocation"]["devices"]["results"])


def allocate(
    tracker: ResourceTracker,
    build: Builder,
    api_client: client.ApiClient,
    device_class: str,
    *,
    timeout: float,
    node: str | None = None,
    count: int = 1,
    tolerations: tuple[dict[str, Any], ...] = (),
    device_tolerations: tuple[dict[str, Any], ...] = (),
    spec: dict[str, Any] | None = None,
    compact: bool = False,
) -> AllocatedClaim:
    """Create a claim and a pod using it (pinned to `node` if given); return them once the pod is bound.

    `tolerations` are the pod's (node taints), `device_tolerations` the claim's (device taints). Where the builder
    has a hold (the driver's nodes have real kubelets), the pod is held so that only the check prepares the claim.
    `spec`: the claim's whole v1 spec (several requests, several device classes) instead of `count` devices of
    `device_class`. `compact`: the claim is sent as compact JSON (`ResourceTracker.create`), for one carrying opaque
    config.
    """
    manifest = build.claim(device_class, count=count, tolerations=device_tolerations)
    claim = tracker.create(manifest if spec is None else build.claim_from_spec(spec), compact=compact)
    pod = tracker.create(build.held(build.pod(claim=claim["metadata"]["name"], node=node, tolerations=tolerations)))
    core = client.CoreV1Api(api_client)
    bound = waits.until(
        lambda: core.read_namespaced_pod(pod["metadata"]["name"], build.namespace),
        lambda p: bool(p.spec.node_name),
        timeout=timeout,
        what=f"pod {pod['metadata']['name']} bound to a node",
        describe=describe_pod,
    )
    allocated = tracker.get(RESOURCE_API, "ResourceClaim", claim["metadata"]["name"], build.namespace)
    return AllocatedClaim(allocated, pod, bound.spec.node_name)
