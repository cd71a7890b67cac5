"""Claims several protocol checks allocate together on one node (the `claims_on_one_node` fixture's answer)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.kubelet.allocation import AllocatedClaim
from dra_conformance.model.driver import DriverEndpoint


@dataclass(frozen=True)
class ClaimsOnOneNode:
    """Claims allocated by the scheduler to one node of the driver under test, and that node's endpoint."""

    node: str
    endpoint: DriverEndpoint
    claims: list[AllocatedClaim]


def claims_that_fit(driver: DriverUnderTest, wanted: int, what: str, *, minimum: int = 1, devices: int = 1) -> int:
    """How many of `wanted` claims of `devices` devices one node holds while half its devices stay free.

    Half stays free so that the checks of the other xdist worker still find devices; fewer than `minimum` is not
    applicable, with the reason (`what` names what would not fit).
    """
    per_node = driver.profile.devices.per_node
    count = min(wanted, per_node // (2 * devices))
    if count < minimum:
        pytest.skip(f"not applicable: {per_node} device(s) per node leave no room for {what}")
    return count
