"""NodeMetrics and PodMetrics for the nodes and pods that exist, shaped by the active faults."""

from __future__ import annotations

import datetime
import threading
import zlib
from dataclasses import dataclass, field
from typing import Any

GROUP = "metrics.k8s.io"
VERSIONS = ("v1", "v1beta1")
# The collection interval the adapter claims; samples are refreshed on this grid. metrics-server's shortest allowed
# --metric-resolution (it refuses less than 10s; its manifests use 15s, which tests/metrics certifies): a check that
# awaits the next sample waits 5 s on average instead of 7.5 s.
WINDOW_SECONDS = 10


@dataclass
class Faults:
    """Switchable misbehaviour; the defaults are a healthy adapter."""

    # Seconds the sample timestamps lag behind now (a stale pipeline).
    stale_seconds: float = 0.0
    # Pods (by "namespace/name" prefix) that get no sample at all.
    missing_pods: list[str] = field(default_factory=list)
    # Versions served; a version not listed answers 404 (only-one-version fault).
    served: list[str] = field(default_factory=lambda: list(VERSIONS))
    # Multiplier applied to v1 usage only (the versions disagree when it is not 1).
    v1_usage_factor: float = 1.0
    # Discovery answers 503, so the aggregator marks the APIServices Available=False.
    unavailable: bool = False

    @classmethod
    def parse(cls, raw: Any) -> Faults:
        """Validate a JSON fault document; unknown keys and bad values raise ValueError naming the key."""
        if not isinstance(raw, dict):
            raise ValueError(f"faults must be an object, got {type(raw).__name__}")
        known = {"staleSeconds", "missingPods", "served", "v1UsageFactor", "unavailable"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown fault key {unknown[0]!r}; known: {', '.join(sorted(known))}")
        served = raw.get("served", list(VERSIONS))
        if not isinstance(served, list) or not set(served) <= set(VERSIONS):
            raise ValueError(f"served must list versions out of {VERSIONS}, got {served!r}")
        stale = raw.get("staleSeconds", 0.0)
        factor = raw.get("v1UsageFactor", 1.0)
        if not isinstance(stale, int | float) or stale < 0:
            raise ValueError(f"staleSeconds must be a non-negative number, got {stale!r}")
        if not isinstance(factor, int | float) or factor <= 0:
            raise ValueError(f"v1UsageFactor must be a positive number, got {factor!r}")
        return cls(float(stale), list(raw.get("missingPods", [])), served, float(factor), bool(raw.get("unavailable")))

    def to_json(self) -> dict[str, Any]:
        """The faults as JSON."""
        return {
            "staleSeconds": self.stale_seconds,
            "missingPods": self.missing_pods,
            "served": self.served,
            "v1UsageFactor": self.v1_usage_factor,
            "unavailable": self.unavailable,
        }


class FaultBox:
    """Thread-safe holder of the active faults."""

    def __init__(self) -> None:
        """Start healthy."""
        self._faults = Faults()
        self._lock = threading.Lock()

    def get(self) -> Faults:
        """The active faults."""
        with self._lock:
            return self._faults

    def set(self, faults: Faults) -> None:
        """Replace the active faults."""
        with self._lock:
            self._faults = faults


def _stable(text: str, low: int, high: int) -> int:
    return low + zlib.crc32(text.encode()) % (high - low)


def timestamp(faults: Faults) -> str:
    """The sample time: the latest collection tick, minus the stale lag."""
    now = datetime.datetime.now(datetime.UTC)
    tick = now.replace(microsecond=0) - datetime.timedelta(seconds=now.second % WINDOW_SECONDS)
    return (tick - datetime.timedelta(seconds=faults.stale_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _usage(key: str, version: str, faults: Faults) -> dict[str, str]:
    factor = faults.v1_usage_factor if version == "v1" else 1.0
    cpu = int(_stable(key + "cpu", 5, 500) * factor)
    memory = int(_stable(key + "mem", 16, 512) * factor)
    return {"cpu": f"{cpu}m", "memory": f"{memory}Mi"}


def node_metrics(name: str, version: str, faults: Faults) -> dict[str, Any]:
    """One NodeMetrics object."""
    return {
        "kind": "NodeMetrics",
        "apiVersion": f"{GROUP}/{version}",
        "metadata": {"name": name, "labels": {}},
        "timestamp": timestamp(faults),
        "window": f"{WINDOW_SECONDS}s",
        "usage": _usage(f"node/{name}", version, faults),
    }


def pod_metrics(pod: dict[str, Any], version: str, faults: Faults) -> dict[str, Any] | None:
    """One PodMetrics object, or None when the missing-samples fault covers the pod."""
    meta = pod["metadata"]
    key = f"{meta['namespace']}/{meta['name']}"
    if any(key.startswith(prefix) for prefix in faults.missing_pods):
        return None
    containers = [
        {"name": c["name"], "usage": _usage(f"{key}/{c['name']}", version, faults)} for c in pod["spec"]["containers"]
    ]
    return {
        "kind": "PodMetrics",
        "apiVersion": f"{GROUP}/{version}",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": meta.get("labels") or {}},
        "timestamp": timestamp(faults),
        "window": f"{WINDOW_SECONDS}s",
        "containers": containers,
    }
