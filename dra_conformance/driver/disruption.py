"""Disrupting the driver under test on the node set aside for it: kill its process, start it again."""

from __future__ import annotations

from dataclasses import dataclass

from dra_conformance.backends.base import DISRUPTION_TOLERATION, DriverProcesses
from dra_conformance.driver.endpoint import DriverEndpoint


@dataclass
class Disruption:
    """The driver under test on the disruption node, which no other test's pod lands on."""

    node: str
    endpoint: DriverEndpoint
    processes: DriverProcesses
    killed: bool = False

    # Pods of a disruption check must tolerate the node's taint to land there.
    toleration = DISRUPTION_TOLERATION

    def kill(self) -> int:
        """SIGKILL the driver's process on the node; returns its exit status."""
        self.killed = True
        return self.processes.kill_driver(self.node)

    def start(self) -> None:
        """Start the driver again and wait until it registered with a complete pool."""
        self.processes.start_driver(self.node)
        self.killed = False
