"""The driver under test: its profile and where its kubelet-plugin sockets can be reached."""

from __future__ import annotations

from dataclasses import dataclass

from dra_conformance.driver.profile import DriverProfile
from dra_conformance.model.driver import DriverEndpoint


@dataclass(frozen=True)
class DriverUnderTest:
    """The DRA driver being certified: its profile and, where this machine can reach them, its sockets per node."""

    profile: DriverProfile
    endpoints: dict[str, DriverEndpoint]

    @property
    def name(self) -> str:
        """The DRA driver name."""
        return self.profile.driver
