"""The interface every cluster backend implements; what a started cluster looks like is `model.cluster`."""

from __future__ import annotations

from typing import Protocol

from dra_conformance.model.cluster import ClusterInfo


class ClusterBackend(Protocol):
    """A way to obtain a cluster; implementations live beside this module and are picked by name."""

    name: str

    def start(self) -> ClusterInfo:
        """Bring the cluster up (or attach to a running one) and return how to reach it.

        A cluster this returns has passed the preflight (`kube.preflight`); an unusable one raises a one-line
        `BackendError`.
        """
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

    def ends_with(self, owner_pid: int) -> bool:
        """Whether `release(owner_pid)`, if it came now, would stop the cluster (nobody else holds or keeps it)."""
        ...
