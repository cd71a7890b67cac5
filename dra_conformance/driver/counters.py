"""Shared counters of a driver's pools (partitionable devices): what each device consumes, and what fits together.

A pool publishes counter sets (`spec.sharedCounters`, in slices of their own) and devices that consume from them
(`spec.devices[].consumesCounters`). The scheduler allocates a device only while the counters its consumption
names are still available, and treats a pool whose devices name a counter set or counter it does not publish as
invalid: it allocates nothing from it. This module reads the pools at their highest generation and answers the
questions the partition checks ask: does every reference resolve, does any device consume more than its set holds,
is a set of devices within the counters, and how many devices can be allocated together at most.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes import client
from kubernetes.utils.quantity import parse_quantity

from dra_conformance.kube.builders import RESOURCE_API

# One LIST the API server answers from its watch cache.
LIST_TIMEOUT = 10.0
# Steps the search for the largest co-allocation may take per group of devices sharing counters; a pool beyond it
# is too large for that search (a limit of the suite, not of the driver).
SEARCH_STEPS = 200_000
# Taint effects that keep the scheduler from allocating a device to a claim without a toleration.
BLOCKING_TAINT_EFFECTS = ("NoSchedule", "NoExecute")

Counters = dict[str, Decimal]


class SearchTooLarge(Exception):
    """The largest co-allocation of a pool could not be found within SEARCH_STEPS steps."""


@dataclass(frozen=True)
class Consumption:
    """What one device consumes from one counter set."""

    counter_set: str
    counters: Counters


@dataclass(frozen=True)
class CounterPool:
    """One pool of a driver at its highest generation: its counter sets and what each device consumes."""

    name: str
    generation: int
    slices: int
    expected_slices: int
    # Counter set name -> counter -> value. A name listed twice keeps its first listing (see `duplicate_sets`).
    counter_sets: dict[str, Counters]
    # Device name -> its consumptions (empty for a device that consumes no counters).
    consumers: dict[str, tuple[Consumption, ...]]
    # Counter set names the pool lists more than once.
    duplicate_sets: tuple[str, ...] = ()
    # Devices the scheduler does not allocate without a toleration (a NoSchedule or NoExecute taint).
    tainted: frozenset[str] = field(default_factory=frozenset)

    @property
    def complete(self) -> bool:
        """Every slice of the highest generation is there."""
        return self.slices == self.expected_slices

    @property
    def partitioned(self) -> tuple[str, ...]:
        """Devices that consume counters, sorted."""
        return tuple(sorted(name for name, consumed in self.consumers.items() if consumed))

    def describe(self) -> str:
        """One phrase for messages."""
        return (
            f"pool {self.name} generation {self.generation}: {self.slices}/{self.expected_slices} slices, "
            f"{len(self.consumers)} devices ({len(self.partitioned)} consuming counters), "
            f"counter sets {sorted(self.counter_sets)}"
        )

    def unresolved(self) -> list[str]:
        """Each consumption that names a counter set or a counter the pool does not publish."""
        problems = []
        for device, consumed in sorted(self.consumers.items()):
            for consumption in consumed:
                counters = self.counter_sets.get(consumption.counter_set)
                if counters is None:
                    problems.append(f"device {device}: counter set {consumption.counter_set} not found")
                    continue
                problems += [
                    f"device {device}: counter {name} not found in counter set {consumption.counter_set}"
                    for name in sorted(set(consumption.counters) - set(counters))
                ]
        return problems

    def overdrawn(self, devices: Iterable[str]) -> list[str]:
        """Each counter that `devices` together consume more of than its set holds (resolvable references only)."""
        totals: dict[tuple[str, str], Decimal] = {}
        for device in devices:
            for consumption in self.consumers.get(device, ()):
                for name, value in consumption.counters.items():
                    key = (consumption.counter_set, name)
                    totals[key] = totals.get(key, Decimal(0)) + value
        problems = []
        for (counter_set, name), total in sorted(totals.items()):
            available = self.counter_sets.get(counter_set, {}).get(name)
            if available is not None and total > available:
                problems.append(f"counter {name} of set {counter_set}: {total} consumed, {available} available")
        return problems

    def devices_beyond_their_sets(self) -> list[str]:
        """Each device that alone consumes more of a counter than its set holds (the scheduler never allocates it)."""
        return [
            f"device {device}: {problem}" for device in sorted(self.consumers) for problem in self.overdrawn([device])
        ]

    def largest_co_allocation(self) -> tuple[str, ...]:
        """A largest set of this pool's devices the scheduler can allocate at once, sorted.

        Counter-free devices all fit. Devices that consume counters are searched per group of counter sets they
        link; untolerated (tainted) devices, devices with unresolved references and devices that alone exceed
        their set are left out, as the scheduler leaves them out. Raises SearchTooLarge beyond SEARCH_STEPS.
        """
        candidates = [
            device
            for device in sorted(self.consumers)
            if device not in self.tainted and not self._unresolvable(device) and not self.overdrawn([device])
        ]
        chosen = [device for device in candidates if not self.consumers[device]]
        for group in self._groups([device for device in candidates if self.consumers[device]]):
            chosen += self._largest_fitting(group)
        return tuple(sorted(chosen))

    def _unresolvable(self, device: str) -> bool:
        return any(
            consumption.counter_set not in self.counter_sets
            or not set(consumption.counters) <= set(self.counter_sets[consumption.counter_set])
            for consumption in self.consumers[device]
        )

    def _groups(self, devices: list[str]) -> list[list[str]]:
        """Devices grouped so that no two groups share a counter set (a device may consume from two sets)."""
        parent: dict[str, str] = {}

        def root(name: str) -> str:
            while parent.setdefault(name, name) != name:
                name = parent[name]
            return name

        for device in devices:
            sets = [consumption.counter_set for consumption in self.consumers[device]]
            for other in sets[1:]:
                parent[root(other)] = root(sets[0])
        groups: dict[str, list[str]] = {}
        for device in devices:
            groups.setdefault(root(self.consumers[device][0].counter_set), []).append(device)
        return list(groups.values())

    def _largest_fitting(self, devices: list[str]) -> list[str]:
        """Branch and bound over `devices` (smallest consumption first): the most that fit their sets together."""
        ordered = sorted(devices, key=self._share)
        best: list[str] = []
        steps = itertools.count()

        def search(position: int, taken: list[str]) -> None:
            nonlocal best
            if next(steps) > SEARCH_STEPS:
                raise SearchTooLarge(f"{self.describe()}: more than {SEARCH_STEPS} steps for {len(devices)} devices")
            if len(taken) > len(best):
                best = list(taken)
            if position == len(ordered) or len(taken) + len(ordered) - position <= len(best):
                return
            device = ordered[position]
            if not self.overdrawn([*taken, device]):
                search(position + 1, [*taken, device])
            search(position + 1, taken)

        search(0, [])
        return best

    def _share(self, device: str) -> Decimal:
        """How much of its counter sets a device takes, summed over counters as fractions (for ordering only)."""
        return sum(
            (
                value / self.counter_sets[consumption.counter_set][name]
                for consumption in self.consumers[device]
                for name, value in consumption.counters.items()
                if self.counter_sets[consumption.counter_set][name] > 0
            ),
            Decimal(0),
        )


def _counters(raw: Mapping[str, Any] | None) -> Counters:
    return {name: Decimal(parse_quantity(counter["value"])) for name, counter in (raw or {}).items()}


def pools_from_slices(specs: Iterable[Mapping[str, Any]]) -> dict[str, CounterPool]:
    """The pools in these ResourceSlice specs (one driver's), each at its highest generation, by pool name."""
    by_pool: dict[str, list[Mapping[str, Any]]] = {}
    for spec in specs:
        by_pool.setdefault(spec["pool"]["name"], []).append(spec)
    pools = {}
    for name, listed in by_pool.items():
        generation = max(int(spec["pool"]["generation"]) for spec in listed)
        current = [spec for spec in listed if int(spec["pool"]["generation"]) == generation]
        counter_sets: dict[str, Counters] = {}
        duplicates = []
        for counter_set in (s for spec in current for s in spec.get("sharedCounters") or []):
            if counter_set["name"] in counter_sets:
                duplicates.append(counter_set["name"])
                continue
            counter_sets[counter_set["name"]] = _counters(counter_set.get("counters"))
        devices = [device for spec in current for device in spec.get("devices") or []]
        pools[name] = CounterPool(
            name=name,
            generation=generation,
            slices=len(current),
            expected_slices=int(current[0]["pool"]["resourceSliceCount"]),
            counter_sets=counter_sets,
            consumers={
                device["name"]: tuple(
                    Consumption(c["counterSet"], _counters(c.get("counters")))
                    for c in device.get("consumesCounters") or []
                )
                for device in devices
            },
            duplicate_sets=tuple(sorted(duplicates)),
            tainted=frozenset(
                device["name"]
                for device in devices
                if any(t.get("effect") in BLOCKING_TAINT_EFFECTS for t in device.get("taints") or [])
            ),
        )
    return pools


def node_counter_pools(api: client.ApiClient, driver: str, node: str) -> dict[str, CounterPool]:
    """The pools of `driver` with slices bound to `node`, with every slice of those pools (counter slices too).

    A pool's counter slices need not select nodes as its device slices do, so every slice of the driver is read and
    the pools that have a slice on `node` are kept.
    """
    group, version = RESOURCE_API.split("/")
    listed: dict[str, Any] = client.CustomObjectsApi(api).list_cluster_custom_object(
        group, version, "resourceslices", field_selector=f"spec.driver={driver}", _request_timeout=LIST_TIMEOUT
    )
    specs = [item["spec"] for item in listed["items"]]
    on_node = {spec["pool"]["name"] for spec in specs if spec.get("nodeName") == node}
    return {name: pool for name, pool in pools_from_slices(specs).items() if name in on_node}
