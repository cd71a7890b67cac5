"""What a driver publishes for a node: its ResourceSlices grouped into pools, and whether each pool is complete.

A pool is complete when, at its highest generation, the number of slices equals `resourceSliceCount`: the
scheduler ignores an incomplete pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from dra_conformance.kube.builders import RESOURCE_API

# One LIST the API server answers from its watch cache.
LIST_TIMEOUT = 10.0


@dataclass(frozen=True)
class PoolState:
    """One pool of a driver at its highest generation."""

    name: str
    generation: int
    slices: int
    expected_slices: int
    devices: tuple[str, ...]
    # Effects of the taints each device carries in its slice, for devices with any.
    taint_effects: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Each device of the current generation as its slice lists it (attributes, capacity, taints).
    device_specs: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Every slice of the highest generation is there."""
        return self.slices == self.expected_slices

    def describe(self) -> str:
        """One phrase for wait and failure messages."""
        return f"pool {self.name} generation {self.generation}: {self.slices}/{self.expected_slices} slices, " + (
            f"{len(self.devices)} devices"
        )


def node_slices(api: client.ApiClient, driver: str, node: str) -> list[dict[str, Any]]:
    """The ResourceSlices `driver` publishes bound to `node` (spec.nodeName), as the API serves them."""
    group, version = RESOURCE_API.split("/")
    listed: dict[str, Any] = client.CustomObjectsApi(api).list_cluster_custom_object(
        group,
        version,
        "resourceslices",
        field_selector=f"spec.driver={driver},spec.nodeName={node}",
        _request_timeout=LIST_TIMEOUT,
    )
    items: list[dict[str, Any]] = listed["items"]
    return items


def node_pools(api: client.ApiClient, driver: str, node: str) -> dict[str, PoolState]:
    """The pools `driver` publishes in slices bound to `node` (spec.nodeName), by pool name."""
    by_pool: dict[str, list[dict[str, Any]]] = {}
    for item in node_slices(api, driver, node):
        by_pool.setdefault(item["spec"]["pool"]["name"], []).append(item["spec"])
    pools = {}
    for name, specs in by_pool.items():
        generation = max(int(spec["pool"]["generation"]) for spec in specs)
        current = [spec for spec in specs if int(spec["pool"]["generation"]) == generation]
        pools[name] = PoolState(
            name=name,
            generation=generation,
            slices=len(current),
            expected_slices=int(current[0]["pool"]["resourceSliceCount"]),
            devices=tuple(sorted(d["name"] for spec in current for d in spec.get("devices") or [])),
            taint_effects={
                d["name"]: tuple(t["effect"] for t in d["taints"])
                for spec in current
                for d in spec.get("devices") or []
                if d.get("taints")
            },
            device_specs={d["name"]: d for spec in current for d in spec.get("devices") or []},
        )
    return pools
