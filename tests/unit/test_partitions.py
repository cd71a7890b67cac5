"""Partitionable devices, pure logic: the reference driver's `gpu-partitions` slices and the counter arithmetic."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from dra_conformance.driver import counters
from dra_conformance.driver.counters import CounterPool, SearchTooLarge, pools_from_slices
from fake_dra import devices, partitions
from fake_dra.broken import BrokenMode
from fake_dra.config import PARTITIONS_PROFILE, DriverConfig

GIB = 2**30


def _config(tmp_path: Path, **overrides: object) -> DriverConfig:
    base: dict[str, object] = dict(
        driver_name="gpu.example.com",
        node_name="node-a",
        kubelet_root=tmp_path / "k",
        cdi_dir=tmp_path / "cdi",
        state_dir=tmp_path / "s",
        profile=PARTITIONS_PROFILE,
        devices=1,
    )
    return DriverConfig(**{**base, **overrides})  # type: ignore[arg-type]


def _slices(config: DriverConfig, published: int | None = None, **options: Any) -> list[dict[str, Any]]:
    count = config.devices if published is None else published
    return devices.resource_slices(config, 3, unavailable=options.pop("unavailable", set()), published=count, **options)


def _pool(config: DriverConfig) -> CounterPool:
    return pools_from_slices(m["spec"] for m in _slices(config))["node-a"]


# --- the reference driver's slices ------------------------------------------------------------------------------


def test_one_gpu_is_a_device_slice_and_a_counter_slice_of_one_pool_counted_by_both(tmp_path: Path) -> None:
    manifests = _slices(_config(tmp_path))
    specs = [m["spec"] for m in manifests]
    assert [m["metadata"]["name"] for m in manifests] == ["node-a-gpu.example.com-0", "node-a-gpu.example.com-1"]
    assert [s["pool"] for s in specs] == [{"name": "node-a", "generation": 3, "resourceSliceCount": 2}] * 2, specs
    assert all(s["nodeName"] == "node-a" and s["driver"] == "gpu.example.com" for s in specs)
    # The API allows only one of devices and sharedCounters in a slice; an empty list would count as set.
    assert "sharedCounters" not in specs[0] and "devices" not in specs[1], specs
    assert [d["name"] for d in specs[0]["devices"]] == [
        "gpu-0",
        "gpu-0-half-0",
        "gpu-0-half-1",
        "gpu-0-quarter-0",
        "gpu-0-quarter-1",
        "gpu-0-quarter-2",
        "gpu-0-quarter-3",
    ]
    assert specs[1]["sharedCounters"] == [
        {
            "name": "gpu-0-counters",
            "counters": {
                "memory": {"value": "16Gi"},
                **{f"slot-{slot}": {"value": "1"} for slot in range(4)},
            },
        }
    ]


def test_the_whole_device_consumes_every_counter_and_each_partition_kind_tiles_the_device(tmp_path: Path) -> None:
    pool = _pool(_config(tmp_path))
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


def test_a_correct_partition_pool_resolves_fits_and_takes_four_quarters_at_most(tmp_path: Path) -> None:
    pool = _pool(_config(tmp_path, devices=2))
    assert pool.complete and pool.unresolved() == [] and pool.duplicate_sets == ()
    assert pool.devices_beyond_their_sets() == []
    assert pool.largest_co_allocation() == tuple(sorted(f"gpu-{i}-quarter-{q}" for i in range(2) for q in range(4)))


@pytest.mark.parametrize(("gpus", "device_slices", "counter_slices"), [(9, 1, 2), (10, 2, 2), (20, 3, 3)])
def test_large_pools_split_devices_64_to_a_slice_and_counter_sets_8_to_a_slice(
    tmp_path: Path, gpus: int, device_slices: int, counter_slices: int
) -> None:
    config = _config(tmp_path, devices=gpus)
    specs = [m["spec"] for m in _slices(config)]
    listed = [len(s["devices"]) for s in specs if "devices" in s]
    sets = [len(s["sharedCounters"]) for s in specs if "sharedCounters" in s]
    assert (len(listed), len(sets)) == (device_slices, counter_slices), (listed, sets)
    assert max(listed) <= devices.MAX_TAINTED_DEVICES_PER_SLICE and max(sets) <= partitions.MAX_COUNTER_SETS_PER_SLICE
    assert {s["pool"]["resourceSliceCount"] for s in specs} == {len(specs)}
    names = [d["name"] for s in specs for d in s.get("devices", [])]
    assert names == devices.device_names(config) and len(names) == 7 * gpus


def test_reduced_and_tainted_partition_pools(tmp_path: Path) -> None:
    config = _config(tmp_path, devices=3)
    (empty,) = _slices(config, published=0)
    assert empty["spec"]["devices"] == [] and empty["spec"]["pool"]["resourceSliceCount"] == 1
    reduced = _slices(config, published=1, unavailable={"gpu-0-half-1"})
    pool = pools_from_slices(m["spec"] for m in reduced)["node-a"]
    assert sorted(pool.counter_sets) == ["gpu-0-counters"] and len(pool.consumers) == 7
    assert pool.tainted == {"gpu-0-half-1"}, pool.tainted


def test_the_oversubscribing_mutant_publishes_a_whole_device_beyond_its_set(tmp_path: Path) -> None:
    pool = _pool(_config(tmp_path, broken=frozenset({BrokenMode.PARTITIONS_OVERSUBSCRIBE_COUNTERS})))
    assert pool.counter_sets["gpu-0-counters"]["memory"] == 15 * GIB
    assert pool.unresolved() == [], "every reference still resolves: only the amounts are wrong"
    assert pool.devices_beyond_their_sets() == [
        f"device gpu-0: counter memory of set gpu-0-counters: {16 * GIB} consumed, {15 * GIB} available"
    ]
    assert len(pool.largest_co_allocation()) == 3, "the four quarters no longer fit together"


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
