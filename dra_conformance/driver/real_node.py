"""A node a real kubelet serves, as a kubelet-mode check sees it: where to pin pods and what it can reach there."""

from __future__ import annotations

from dataclasses import dataclass

from dra_conformance.driver.endpoint import DriverEndpoint
from dra_conformance.kube.builders import Manifest

# The workload image where the cluster names none: a busybox any registry mirror has.
DEFAULT_WORKLOAD_IMAGE = "busybox:1.36"


@dataclass(frozen=True)
class RealNodeTarget:
    """A node a real kubelet serves, leased by one test."""

    name: str
    # The driver under test's sockets and CDI dir there, where this machine can reach them (local backend).
    endpoint: DriverEndpoint | None
    # What a pod needs to land there: tolerations of the node's own taints.
    tolerations: tuple[Manifest, ...]
    # An image with a shell (busybox) the node has or can pull.
    image: str


def tolerations_of(taints: list[Manifest]) -> tuple[Manifest, ...]:
    """Tolerations of a node's NoSchedule and NoExecute taints (`taints` as the API returns them)."""
    return tuple(
        {"key": taint["key"], "operator": "Exists", "effect": taint["effect"]}
        for taint in taints
        if taint.get("effect") in ("NoSchedule", "NoExecute")
    )
