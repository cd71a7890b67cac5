"""Where the driver under test can be reached: its kubelet-plugin sockets, per node."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DriverEndpoint:
    """Where one driver instance on one node can be reached."""

    driver: str
    node: str
    kubelet_root: Path

    @property
    def registration_socket(self) -> Path:
        """`<kubelet root>/plugins_registry/<driver>-reg.sock`."""
        return self.kubelet_root / "plugins_registry" / f"{self.driver}-reg.sock"

    @property
    def control_socket(self) -> Path:
        """The fake driver's control socket (absent for other drivers)."""
        return self.kubelet_root / "plugins" / self.driver / "control.sock"


@dataclass(frozen=True)
class DriverUnderTest:
    """The DRA driver being certified and where its kubelet-plugin sockets are, per node."""

    name: str
    endpoints: dict[str, DriverEndpoint]
