"""What a started local cluster records beyond its supervisor's state (`cluster.json`), typed and read once.

The supervisor's state says which processes run; this record says what the cluster is: its kwok and real nodes,
the driver under test's endpoints, the metrics adapter it runs, the profile it was started with (and that file's
digest, so a run with another profile is told apart), the reference driver's Go build that private instances run,
and how long each start-up phase took. It is written whole, atomically, at the end of a start or a driver swap.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.model.cluster import endpoint_from_json, endpoint_to_json
from dra_conformance.model.driver import DriverEndpoint

FILE_NAME = "cluster.json"


def record_path(layout: ClusterLayout) -> Path:
    """Where the cluster of `layout` keeps its record."""
    return layout.root / FILE_NAME


@dataclass(frozen=True)
class ClusterRecord:
    """One started local cluster, as `info` reports it beyond the supervisor's state."""

    nodes: tuple[str, ...]
    real_nodes: tuple[str, ...] = ()
    drivers: tuple[DriverEndpoint, ...] = ()
    # The metrics adapter it runs ("fake", "metrics-server"); None: none.
    metrics: str | None = None
    profile: str = ""
    profile_digest: str = ""
    # The reference driver's Go binary, which private instances run whatever the profile's driver; "" if unknown.
    reference_driver_go: str = ""
    # Start-up phase -> seconds since the previous phase.
    startup: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def read(cls, layout: ClusterLayout) -> ClusterRecord | None:
        """The record of the cluster of `layout`; None while none is written (not started, or still starting)."""
        try:
            recorded: dict[str, Any] = json.loads(record_path(layout).read_text())
        except (OSError, ValueError):
            return None
        return cls(
            nodes=tuple(recorded["nodes"]),
            real_nodes=tuple(recorded.get("real_nodes", ())),
            drivers=tuple(endpoint_from_json(entry) for entry in recorded.get("drivers", ())),
            metrics=recorded.get("metrics"),
            profile=str(recorded.get("profile", "")),
            profile_digest=str(recorded.get("profile_digest", "")),
            reference_driver_go=str(recorded.get("reference_driver_go") or ""),
            startup={phase: float(seconds) for phase, seconds in recorded.get("startup", {}).items()},
        )

    def write(self, layout: ClusterLayout) -> None:
        """Replace the record of the cluster of `layout` with this one, atomically."""
        path = record_path(layout)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(self.to_json()))
        partial.replace(path)

    def to_json(self) -> dict[str, Any]:
        """The record as `cluster.json` holds it."""
        return {
            "nodes": list(self.nodes),
            "real_nodes": list(self.real_nodes),
            "drivers": [endpoint_to_json(endpoint) for endpoint in self.drivers],
            "metrics": self.metrics,
            "profile": self.profile,
            "profile_digest": self.profile_digest,
            "reference_driver_go": self.reference_driver_go,
            "startup": dict(self.startup),
        }

    def with_driver(
        self, drivers: tuple[DriverEndpoint, ...], profile: str, profile_digest: str, reference_driver_go: str
    ) -> ClusterRecord:
        """The same cluster with another driver under test (a driver swap): nodes, adapter and timings kept."""
        return dataclasses.replace(
            self,
            drivers=drivers,
            profile=profile,
            profile_digest=profile_digest,
            reference_driver_go=reference_driver_go,
        )
