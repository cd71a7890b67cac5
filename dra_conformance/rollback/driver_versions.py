"""Driver vN -> vN+1 -> vN with claims in flight, on a node leased for it, through the profile's two builds.

The profile's `run` is the newer build (vN+1) and `run.versions.previous` the older (vN). The rehearsal starts vN,
prepares a claim, upgrades, prepares another, downgrades, prepares a third, then unprepares all three. Each switch
must publish a complete pool with no slice of an older generation left, at a newer generation when the pool says
something else than before (a switch that changes nothing may leave the slices as they are); claims allocated before it
must still be known to the driver afterwards (their CDI specs go on unprepare); new claims must allocate devices
nobody holds. A switch is timed from the kill of the old process to the new one's complete pool.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from kubernetes import client

from dra_conformance.driver.pool import node_pools
from dra_conformance.driver.slice_hygiene import pool_content
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API

CURRENT, PREVIOUS = "current", "previous"
# vN -> vN+1 -> vN: the order of builds the rehearsal starts.
SWITCHES = (PREVIOUS, CURRENT, PREVIOUS)


@dataclass
class BuildStep:
    """One switch of the driver's build on the node."""

    build: str
    seconds: float = 0.0
    generation: int | None = None
    # A digest of what the pool says at that generation, the generation left out: a switch that leaves it the same
    # needs no new generation.
    content: str = ""
    # Attribute name -> values seen in the pool at that generation (what vN+1 changed shows here).
    attributes: dict[str, list[str]] = field(default_factory=dict)
    claims_prepared: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class DowngradeRecord:
    """Every switch, and what the final unprepare found."""

    node: str
    driver: str
    steps: list[BuildStep] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def all_problems(self) -> list[str]:
        """Problems of every step, then the final ones."""
        return [f"{s.build} (switch {i + 1}): {p}" for i, s in enumerate(self.steps) for p in s.problems] + list(
            self.problems
        )

    def to_json(self) -> str:
        """The record for reports."""
        return json.dumps(asdict(self) | {"all_problems": self.all_problems}, indent=2)


def pool_slices(api_client: client.ApiClient, driver: str, node: str) -> list[dict[str, Any]]:
    """The driver's ResourceSlices bound to `node`."""
    group, version = RESOURCE_API.split("/")
    listed = client.CustomObjectsApi(api_client).list_cluster_custom_object(
        group, version, "resourceslices", field_selector=f"spec.driver={driver},spec.nodeName={node}"
    )
    return list(listed["items"])


def attribute_values(slices: list[dict[str, Any]], generation: int) -> dict[str, list[str]]:
    """Attribute name -> the distinct values its devices publish at `generation`."""
    values: dict[str, set[str]] = {}
    for item in slices:
        if int(item["spec"]["pool"]["generation"]) != generation:
            continue
        for device in item["spec"].get("devices") or []:
            for name, value in (device.get("attributes") or {}).items():
                values.setdefault(name, set()).add(str(next(iter(value.values()), "")))
    return {name: sorted(found)[:4] for name, found in sorted(values.items())}


def content_digest(slices: list[dict[str, Any]]) -> str:
    """A short digest of what the pools say at their highest generations, the generation left out."""
    return hashlib.sha256("\n".join(pool_content(slices)).encode()).hexdigest()[:16]


def check_pool_after_switch(
    api_client: client.ApiClient,
    driver: str,
    node: str,
    step: BuildStep,
    previous: BuildStep | None,
    timeout: float,
) -> None:
    """A complete pool, newer than `previous`'s unless it says the same, with no older slice left (within `timeout`).

    `previous`: the last switch that found a complete pool (None: this is the first). A pool that says after the
    switch what it said before may keep its generation, its slices untouched (as the kubelet-plugin helper leaves
    them); it may not go back.
    """
    pools = node_pools(api_client, driver, node)
    if not pools or not all(p.complete for p in pools.values()):
        step.problems.append(f"no complete pool on {node} after the switch: {[p.describe() for p in pools.values()]}")
        return
    step.generation = max(p.generation for p in pools.values())
    step.content = content_digest(pool_slices(api_client, driver, node))
    if previous is not None and previous.generation is not None:
        unchanged = step.content == previous.content
        if step.generation < previous.generation or (step.generation == previous.generation and not unchanged):
            step.problems.append(
                f"pool generation {step.generation} is not newer than {previous.generation}"
                + ("" if unchanged else " although what the pool says changed")
            )
    newest = step.generation

    def older_slices() -> list[str]:
        listed = pool_slices(api_client, driver, node)
        return [s["metadata"]["name"] for s in listed if int(s["spec"]["pool"]["generation"]) < newest]

    try:
        older = waits.until(
            older_slices,
            lambda left: not left,
            timeout=timeout,
            what=f"slices of generations older than {newest} on {node} gone",
            describe=str,
        )
    except WaitTimeout:
        older = older_slices()
    if older:
        step.problems.append(f"slices of an older generation are still published: {older}")
    step.attributes = attribute_values(pool_slices(api_client, driver, node), step.generation)


def elapsed(start: float) -> float:
    """Seconds since `start` (monotonic), rounded for records."""
    return round(time.monotonic() - start, 3)
