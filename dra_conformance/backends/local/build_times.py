"""How long each component's build takes here: this machine's earlier builds, else a table of typical times.

The builder records every build's duration in `<cache>/build-times.json` (component name -> seconds of its latest
build) and estimates the time left of a build from it: "component 3 of 5, about 9 min left".
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

TIMES_FILE = "build-times.json"
# Cold builds (empty Go build cache, modules downloaded) on 2 shared cores, in seconds, rounded down: once six local
# components in 17 min 35 s (metrics_server 109 s of it); later the default run's four in 17 min 7 s at load about 5
# (etcd 118 s, kwok 181 s, kube 658 s, reference_driver_go 70 s). Only for components this machine never built.
TYPICAL_SECONDS: dict[str, float] = {
    "etcd": 90.0,
    "kwok": 120.0,
    "kube": 600.0,
    "metrics_server": 110.0,
    "dra_test_driver": 30.0,
    "reference_driver_go": 60.0,
    "kubelet": 120.0,
    "containerd": 150.0,
    "containerd_shim_runc_v2": 20.0,
    "ctr": 30.0,
    "runc": 45.0,
    "pause": 5.0,
    "sonobuoy": 180.0,
}
# A component in neither record nor table.
UNKNOWN_SECONDS = 60.0
MACHINE = "this machine's earlier builds"
TYPICAL = "typical times on 2 cores"


@dataclass(frozen=True)
class Estimate:
    """Seconds a set of builds should take, and where the figures come from."""

    seconds: float
    source: str


class BuildTimes:
    """The durations of this machine's builds, kept beside the cached binaries."""

    def __init__(self, cache_dir: Path) -> None:
        """Read and write `<cache_dir>/build-times.json`."""
        self.path = cache_dir / TIMES_FILE

    def recorded(self) -> dict[str, float]:
        """Component name -> seconds of its latest build here (empty where none was recorded or the file is bad)."""
        try:
            document = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(document, dict):
            return {}
        return {str(name): float(seconds) for name, seconds in document.items() if isinstance(seconds, int | float)}

    def record(self, component: str, seconds: float) -> None:
        """Keep `seconds` as the latest build time of `component` (builders of other checkouts may write too)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.path) + ".lock"):
            times = self.recorded() | {component: round(seconds, 1)}
            partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.partial")
            partial.write_text(json.dumps(dict(sorted(times.items())), indent=2) + "\n")
            partial.replace(self.path)

    def estimate(self, components: Sequence[str]) -> Estimate:
        """How long building `components` should take, from this machine's record, else the typical table."""
        recorded = self.recorded()
        seconds = sum(recorded.get(name, TYPICAL_SECONDS.get(name, UNKNOWN_SECONDS)) for name in components)
        known = [name in recorded for name in components]
        source = MACHINE if all(known) else TYPICAL if not any(known) else f"{MACHINE} and {TYPICAL}"
        return Estimate(seconds, source)


def spell_seconds(seconds: float) -> str:
    """`1055` -> "17 min 35 s"; under a minute, "40 s"."""
    whole = max(0, round(seconds))
    minutes, rest = divmod(whole, 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"
