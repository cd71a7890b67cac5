"""The interface every cluster backend implements, and what a started cluster looks like to the suites."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from dra_conformance.driver.endpoint import DriverEndpoint


@dataclass(frozen=True)
class ClusterInfo:
    """What the suites know about a running cluster.

    `capabilities` names optional powers the suites may skip on, e.g. `node-client-certs` (the backend holds
    the cluster CA and can mint `system:node:<name>` certificates) or `audit-log`.
    """

    backend: str
    kubeconfig: Path
    server: str
    nodes: tuple[str, ...] = ()
    capabilities: frozenset[str] = frozenset()
    pki_dir: Path | None = None
    audit_log: Path | None = None
    log_dir: Path | None = None
    # DRA drivers whose kubelet-plugin sockets this machine can reach (the local backend's fake driver).
    drivers: tuple[DriverEndpoint, ...] = ()
    details: dict[str, str] = field(default_factory=dict)


class ClusterBackend(Protocol):
    """A way to obtain a cluster; implementations live beside this module and are picked by name."""

    name: str

    def start(self) -> ClusterInfo:
        """Bring the cluster up (or attach to a running one) and return how to reach it."""
        ...

    def info(self) -> ClusterInfo | None:
        """Describe the running cluster, or return None when it is not running."""
        ...

    def stop(self) -> None:
        """Stop what this backend started; a no-op for clusters it does not own."""
        ...

    def release(self, owner_pid: int) -> None:
        """Stop the cluster if the process `owner_pid` started it; leave clusters started by others running."""
        ...
