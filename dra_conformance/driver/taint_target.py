"""Where a taint check runs: devices of the driver under test that no other test is allocated or evicted from."""

from __future__ import annotations

from dataclasses import dataclass

from dra_conformance.driver.reference import FakeDriverControl
from dra_conformance.kube.builders import Builder, Manifest


@dataclass(frozen=True)
class TaintTarget:
    """One node of one driver whose devices only one test taints, and a builder of objects for that driver."""

    driver: str
    node: str
    # What pods need to land on the node (the set-aside taint's toleration).
    tolerations: tuple[Manifest, ...]
    build: Builder
    # The reference driver's fault switches (it can taint devices in its own slice); None for any other driver.
    control: FakeDriverControl | None = None
