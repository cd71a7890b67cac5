"""Who holds a local cluster: every run attached to it, so that the last one out stops it and no run loses it midway.

The owners file in the state directory lists the live processes (runs) holding the cluster, or says it is kept (a
`cluster up` or a `--keep-cluster` run asked for it to outlive every run). It is read and written only under the
cluster's lock (`ClusterLayout.lock`): by the backend when a run starts or attaches (`joined`) and when it releases
the cluster (`left`), and by the supervisor when a process it watches exits. Whoever finds no live owner left in an
unkept cluster stops it. A dead owner (killed, never released) counts for nothing: each owner is a pid with its
start time, so a pid the kernel gave to another process since is not mistaken for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path


def _start_time(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot), or None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command name (which may hold spaces and parentheses): state is field 3, starttime field 22.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


@dataclass(frozen=True)
class Owner:
    """One process holding the cluster."""

    pid: int
    # Start time of the process: tells a pid reused by a later process apart from this one.
    started: int

    @classmethod
    def of(cls, pid: int) -> Owner | None:
        """The running process `pid` as an owner, or None if it is not running."""
        started = _start_time(pid)
        return None if started is None else cls(pid, started)

    def alive(self) -> bool:
        """Whether this very process still runs."""
        return _start_time(self.pid) == self.started


@dataclass(frozen=True)
class Owners:
    """The processes holding a cluster, and whether it is kept beyond them."""

    owners: tuple[Owner, ...] = ()
    # Someone asked for the cluster to outlive its runs: then no owner leaving stops it.
    kept: bool = False

    @property
    def pids(self) -> tuple[int, ...]:
        """The owners' pids."""
        return tuple(owner.pid for owner in self.owners)

    @property
    def abandoned(self) -> bool:
        """Whether nobody holds the cluster any more (and it is not kept): then it must stop."""
        return not self.kept and not self.owners

    def live(self) -> Owners:
        """These owners without the ones that are gone."""
        return replace(self, owners=tuple(owner for owner in self.owners if owner.alive()))

    def joined(self, pid: int | None) -> Owners:
        """With process `pid` holding the cluster too; None keeps the cluster beyond every run."""
        if pid is None:
            return replace(self, kept=True)
        owner = Owner.of(pid)
        if owner is None or owner in self.owners:
            return self
        return replace(self, owners=(*self.owners, owner))

    def left(self, pid: int) -> Owners:
        """Without process `pid`."""
        return replace(self, owners=tuple(owner for owner in self.owners if owner.pid != pid))

    @classmethod
    def read(cls, path: Path) -> Owners | None:
        """The owners recorded at `path`, or None when there is no record (a cluster started before owners)."""
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return cls(tuple(Owner(int(o["pid"]), int(o["started"])) for o in raw["owners"]), bool(raw["kept"]))

    def write(self, path: Path) -> None:
        """Record these owners at `path` (atomically: the supervisor may read it at any time)."""
        raw = {"owners": [{"pid": o.pid, "started": o.started} for o in self.owners], "kept": self.kept}
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(raw, indent=2))
        partial.replace(path)
