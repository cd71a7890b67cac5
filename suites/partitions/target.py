"""Where the partition checks run (the `partition_target` fixture's answer)."""

from __future__ import annotations

from dataclasses import dataclass

from dra_conformance.kube.builders import Builder, Manifest
from dra_conformance.model.driver import DriverEndpoint


@dataclass(frozen=True)
class PartitionTarget:
    """One node of one driver whose partitions only one test allocates, and a builder of objects for that driver."""

    driver: str
    node: str
    build: Builder
    # What pods need to land on the node (the set-aside taint's toleration).
    tolerations: tuple[Manifest, ...] = ()
    # The driver's kubelet-plugin sockets on the node, where this machine can reach them.
    endpoint: DriverEndpoint | None = None
