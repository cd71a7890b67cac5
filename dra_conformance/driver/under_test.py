"""The driver under test: its profile and where its kubelet-plugin sockets can be reached."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dra_conformance.driver.profile import DriverProfile
from dra_conformance.kube.builders import PodHold
from dra_conformance.model.driver import DriverEndpoint

# Why a check that needs the driver under test on a fake (kwok) node does not run for a `nodes: realOnly` profile.
REAL_NODES_ONLY = "not applicable: the driver runs on real nodes only"


@dataclass(frozen=True)
class DriverUnderTest:
    """The DRA driver being certified: its profile and, where this machine can reach them, its sockets per node."""

    profile: DriverProfile
    endpoints: dict[str, DriverEndpoint]
    # Where the endpoints' nodes have real kubelets: how pods allocating claims for socket checks are held there.
    hold: PodHold | None = None
    # Why no socket of the driver can be reached, where the suite tried and found out ("" where it did not try).
    unreachable: str = ""
    # Brings this machine's view of a node's sockets in step with the node, before a client of the driver opens
    # (relayed sockets: `NodeSockets.resync`); nothing to do where the sockets are used in place.
    resync: Callable[[str], None] = lambda node: None

    @property
    def name(self) -> str:
        """The DRA driver name."""
        return self.profile.driver
