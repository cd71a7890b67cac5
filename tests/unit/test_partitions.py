"""Partitionable devices, pure logic: the reference driver's `gpu-partitions` pools and the counter arithmetic.

The pools are the Go build's (drivers/fake-dra-go/testdata/partitions-*.json, which its own test asserts it
publishes): the engine's counter arithmetic must read each as the partition checks expect.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from dra_conformance import paths
from dra_conformance.driver import counters
from dra_conformance.driver.counters import CounterPool, SearchTooLarge, pools_from_slices

GIB = 2**30
TESTDATA = paths.reference_driver_go_module() / "testdata"
# What the Go build's tests call the node and the driver of every fixture.
NODE, DRIVER = "n1", "d.example.com"
# The names a GPU's devices take: the whole device, two halves, four quarters.
PARTITION_SUFFIXES = ("", "-half-0", "-half-1", "-quarter-0", "-quarter-1", "-quarter-2", "-quarter-3")


def _specs(fixture: str) -> list[dict[str, Any]]:
    manifests = json.loads((TESTDATA / f"partitions-{fixture}.json").read_text())
    return [manifest["spec"] for manifest in manifests]


def _pool(fixture: str) -> CounterPool:
    return pools_from_slices(_specs(fixture))[NODE]


# --- the reference driver's pools ------------------------------------------------------------------------------------


def test_devices_and_counter_sets_are_slices_of_their_own_in_one_pool() -> None:
    specs = _specs("three-devices")
    assert [s["pool"] for s in specs] == [{"name": NODE, "generation": 5, "resourceSliceCount": 2}] * 2, specs
    assert all(s["nodeName"] == NODE and s["driver"] == DRIVER for s in specs)
    # The API allows only one of devices and sharedCounters in a slice; an empty list would count as set.
    assert "sharedCounters" not in specs[0] and "devices" not in specs[1], specs
    names = [d["name"] for d in specs[0]["devices"]]
    assert names == [f"gpu-{i}{suffix}" for i in range(3) for suffix in PARTITION_SUFFIXES], names
    assert specs[1]["sharedCounters"][0] == {
        "name": "gpu-0-counters",
        "counters": {"memory": {"value": "16Gi"}, **{f"slot-{slot}": {"value": "1"} for slot in range(4)}},
    }


def test_the_whole_device_consumes_every_counter_and_each_partition_kind_tiles_the_device() -> None:
    pool = _pool("three-devices")
    (whole,) = pool.consumers["gpu-0"]
    assert whole.counters == pool.counter_sets["gpu-0-counters"], whole
    for kind, count in (("half", 2), ("quarter", 4)):
        parts = [f"gpu-0-{kind}-{index}" for index in range(count)]
        assert pool.overdrawn(parts) == [], f"the {kind}s fit together"
        totals = {
            name: sum(pool.consumers[part][0].counters.get(name, Decimal(0)) for part in parts)
            for name in pool.counter_sets["gpu-0-counters"]
        }
        assert totals == pool.counter_sets["gpu-0-counters"], f"the {kind}s together are the whole device: {totals}"
    assert pool.overdrawn(["gpu-0", "gpu-0-quarter-2"]) != [], "the whole device overlaps every partition"
    assert pool.overdrawn(["gpu-0-half-0", "gpu-0-quarter-1"]) != [], "half 0 sits on quarters 0 and 1"
    assert pool.overdrawn(["gpu-0-half-0", "gpu-0-quarter-2", "gpu-0-quarter-3"]) == []


def test_a_correct_partition_pool_resolves_fits_and_takes_four_quarters_at_most() -> None:
    pool = _pool("three-devices")
    assert pool.complete and pool.unresolved() == [] and pool.duplicate_sets == ()
    assert pool.devices_beyond_their_sets() == []
    assert pool.largest_co_allocation() == tuple(sorted(f"gpu-{i}-quarter-{q}" for i in range(3) for q in range(4)))


def test_large_pools_split_devices_64_to_a_slice_and_counter_sets_8_to_a_slice() -> None:
    specs = _specs("twenty-devices")
    listed = [len(s["devices"]) for s in specs if "devices" in s]
    sets = [len(s["sharedCounters"]) for s in specs if "sharedCounters" in s]
    assert (listed, sets) == ([64, 64, 12], [8, 8, 4])
    assert {s["pool"]["resourceSliceCount"] for s in specs} == {len(specs)}
    pool = pools_from_slices(specs)[NODE]
    assert pool.complete and pool.unresolved() == [] and len(pool.consumers) == 7 * 20


def test_reduced_and_tainted_partition_pools() -> None:
    (empty,) = _specs("no-devices")
    assert not empty.get("devices") and empty["pool"]["resourceSliceCount"] == 1
    pool = _pool("reduced-capacity")
    assert sorted(pool.counter_sets) == ["gpu-0-counters", "gpu-1-counters"] and len(pool.consumers) == 14
    assert pool.tainted == {"gpu-1-quarter-2"}, pool.tainted


def test_the_oversubscribing_mutant_publishes_a_whole_device_beyond_its_set() -> None:
    pool = _pool("oversubscribed")
    assert pool.counter_sets["gpu-0-counters"]["memory"] == 15 * GIB
    assert pool.unresolved() == [], "every reference still resolves: only the amounts are wrong"
    assert pool.devices_beyond_their_sets() == [
        f"device gpu-{i}: counter memory of set gpu-{i}-counters: {16 * GIB} consumed, {15 * GIB} available"
        for i in range(2)
    ]
    assert len(pool.largest_co_allocation()) == 6, "the four quarters of a GPU no longer fit together"


# --- the engine's counter arithmetic ------------------------------------------------------------------------------


def _spec(generation: int = 1, count: int = 2, **content: Any) -> dict[str, Any]:
    return {"pool": {"name": "p", "generation": generation, "resourceSliceCount": count}, "nodeName": "n", **content}


def _device(name: str, *consumed: tuple[str, dict[str, str]], taint: str = "") -> dict[str, Any]:
    device: dict[str, Any] = {"name": name}
    if consumed:
        device["consumesCounters"] = [
            {"counterSet": counter_set, "counters": {k: {"value": v} for k, v in values.items()}}
            for counter_set, values in consumed
        ]
    if taint:
        device["taints"] = [{"key": "k", "effect": taint}]
    return device


def _sets(**sets: dict[str, str]) -> dict[str, Any]:
    return {
        "sharedCounters": [{"name": n, "counters": {k: {"value": v} for k, v in c.items()}} for n, c in sets.items()]
    }


def test_dangling_references_and_duplicate_counter_sets_are_named() -> None:
    specs = [
        _spec(count=3, devices=[_device("a", ("s", {"x": "1", "y": "1"})), _device("b", ("t", {"x": "1"}))]),
        _spec(count=3, **_sets(s={"x": "2"})),
        _spec(count=3, **_sets(s={"x": "5"})),
    ]
    pool = pools_from_slices(specs)["p"]
    assert pool.duplicate_sets == ("s",) and pool.counter_sets["s"] == {"x": Decimal(2)}
    assert pool.unresolved() == ["device a: counter y not found in counter set s", "device b: counter set t not found"]
    assert pool.largest_co_allocation() == (), "a device with a dangling reference is never allocated"


def test_only_the_highest_generation_counts_and_completeness_follows_resource_slice_count() -> None:
    specs = [
        _spec(generation=1, devices=[_device("old", ("s", {"x": "1"}))]),
        _spec(generation=2, devices=[_device("new", ("s", {"x": "1"}))]),
        _spec(generation=1, **_sets(s={"x": "1"})),
    ]
    pool = pools_from_slices(specs)["p"]
    assert (pool.generation, list(pool.consumers), pool.counter_sets) == (2, ["new"], {})
    assert not pool.complete and pool.unresolved() == ["device new: counter set s not found"]


def test_overdraw_adds_up_quantities_exactly() -> None:
    pool = pools_from_slices(
        [
            _spec(devices=[_device(f"d{i}", ("s", {"mem": "1536Mi", "c": "500m"})) for i in range(3)]),
            _spec(**_sets(s={"mem": "4Gi", "c": "1"})),
        ]
    )["p"]
    assert pool.overdrawn(["d0", "d1"]) == []
    assert pool.overdrawn(["d0", "d1", "d2"]) == [
        "counter c of set s: 1.500 consumed, 1 available",
        f"counter mem of set s: {3 * 1536 * 2**20} consumed, {4 * GIB} available",
    ]
    assert len(pool.largest_co_allocation()) == 2


def test_largest_co_allocation_takes_free_devices_leaves_tainted_ones_and_searches_linked_sets() -> None:
    pool = pools_from_slices(
        [
            _spec(
                devices=[
                    _device("free"),
                    _device("tainted-free", taint="NoSchedule"),
                    _device("informational", ("s", {"x": "1"}), taint="None"),
                    _device("big", ("s", {"x": "2"})),
                    # Consumes from both sets: the search must treat s and t as one group.
                    _device("bridge", ("s", {"x": "1"}), ("t", {"y": "1"})),
                    _device("t-only", ("t", {"y": "1"})),
                    _device("too-big", ("t", {"y": "3"})),
                ]
            ),
            _spec(**_sets(s={"x": "2"}, t={"y": "2"})),
        ]
    )["p"]
    assert pool.devices_beyond_their_sets() == ["device too-big: counter y of set t: 3 consumed, 2 available"]
    assert pool.largest_co_allocation() == ("bridge", "free", "informational", "t-only")


def test_a_search_beyond_its_step_budget_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(counters, "SEARCH_STEPS", 10)
    pool = pools_from_slices(
        [_spec(devices=[_device(f"d{i}", ("s", {"x": "1"})) for i in range(12)]), _spec(**_sets(s={"x": "6"}))]
    )["p"]
    with pytest.raises(SearchTooLarge, match="more than 10 steps for 12 devices"):
        pool.largest_co_allocation()
