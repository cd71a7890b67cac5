"""Claims several protocol checks allocate together on one node (the `claims_on_one_node` fixture's answer)."""

from __future__ import annotations

from dataclasses import dataclass

from dra_conformance.kubelet.allocation import AllocatedClaim
from dra_conformance.model.driver import DriverEndpoint


@dataclass(frozen=True)
class ClaimsOnOneNode:
    """Claims allocated by the scheduler to one node of the driver under test, and that node's endpoint."""

    node: str
    endpoint: DriverEndpoint
    claims: list[AllocatedClaim]
