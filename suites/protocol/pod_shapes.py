"""The pod shapes the pod-shape checks run (kwok nodes: test_pod_shapes.py; real nodes: the kubelet suite's).

Every test pod elsewhere has one container referencing every claim whole; these are the shapes users run: an init
container, a restartable sidecar, containers sharing a claim, references to one request of a claim, a claim no
container references, and two claims. Each request asks for one device of the check's DeviceClass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dra_conformance.kube.builders import ContainerUse


@dataclass(frozen=True)
class Shape:
    """A pod shape: its claims (pod claim name -> request names, one device each) and its containers."""

    id: str
    claims: tuple[tuple[str, tuple[str, ...]], ...]
    containers: tuple[ContainerUse, ...]

    @property
    def devices(self) -> int:
        """How many devices the shape's claims ask for."""
        return sum(len(requests) for _, requests in self.claims)

    def __str__(self) -> str:
        return self.id


def _whole(claim: str) -> tuple[str, str]:
    return (claim, "")


SHAPES = (
    Shape(
        "init-container",
        (("devices", ("req",)),),
        (ContainerUse("setup", (_whole("devices"),), init=True), ContainerUse("app", (_whole("devices"),))),
    ),
    Shape(
        "restartable-sidecar",
        (("devices", ("req",)),),
        (ContainerUse("sidecar", (_whole("devices"),), sidecar=True), ContainerUse("app")),
    ),
    Shape(
        "two-containers-share-a-claim",
        (("devices", ("req",)),),
        (ContainerUse("first", (_whole("devices"),)), ContainerUse("second", (_whole("devices"),))),
    ),
    Shape(
        "per-request-references",
        (("devices", ("first", "second")),),
        (
            ContainerUse("setup", (_whole("devices"),), init=True),
            ContainerUse("first", (("devices", "first"),)),
            ContainerUse("second", (("devices", "second"),)),
        ),
    ),
    Shape(
        "claim-referenced-by-no-container",
        (("used", ("req",)), ("unused", ("req",))),
        (ContainerUse("app", (_whole("used"),)),),
    ),
    Shape(
        "two-claims",
        (("one", ("req",)), ("other", ("req",))),
        (ContainerUse("both", (_whole("one"), _whole("other"))), ContainerUse("other-only", (_whole("other"),))),
    ),
)


def claim_spec(requests: tuple[str, ...], device_class: str) -> dict[str, Any]:
    """A claim's v1 spec: one request per name, each for one device of `device_class`."""
    exactly = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": 1}
    return {"devices": {"requests": [{"name": name, "exactly": dict(exactly)} for name in requests]}}
