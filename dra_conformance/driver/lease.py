"""Leases on nodes a check needs to itself, shared by every xdist worker of a run through lock files.

A check that kills the driver under test, or counts its devices exactly, leases one node from a pool (the
backend's set-aside nodes, or on a cluster this suite did not build, the driver's own nodes). A lease is a
non-blocking file lock per node in a directory all workers of the run share; whoever finds every node taken waits,
with a deadline, until one is free.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from dra_conformance.kube import waits


class NodeLeases:
    """Exclusive leases on the nodes of one pool."""

    def __init__(self, lock_dir: Path, pool: str, nodes: tuple[str, ...]) -> None:
        """Lease `nodes` through lock files `<lock_dir>/<pool>-<node>.lock`."""
        self.lock_dir, self.pool, self.nodes = lock_dir, pool, nodes

    def _try_any(self) -> tuple[str, FileLock] | None:
        for node in self.nodes:
            lock = FileLock(str(self.lock_dir / f"{self.pool}-{node}.lock"))
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            return node, lock
        return None

    @contextmanager
    def lease(self, *, timeout: float, holder: str) -> Iterator[str]:
        """Hold one free node of the pool for the `with` block and yield its name."""
        if not self.nodes:
            raise ValueError(f"{holder}: pool {self.pool} has no node to lease")
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        taken = waits.until(
            self._try_any,
            lambda found: found is not None,
            timeout=timeout,
            what=f"{holder}: a free node of {', '.join(self.nodes)} ({self.pool})",
            describe=lambda _found: "every node leased by another test",
        )
        assert taken is not None  # until() returns only what `ready` accepted
        node, lock = taken
        try:
            yield node
        finally:
            lock.release()
