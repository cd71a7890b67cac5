"""The slices suite's judging logic: size limits, duplicates, owners, and pool completeness over watch events."""

from __future__ import annotations

from typing import Any

import pytest

from dra_conformance.driver.slice_history import SliceVersion, replay
from dra_conformance.driver.slice_hygiene import (
    duplicate_attribute_names,
    duplicate_device_names,
    incomplete_moments,
    limit_violations,
    owner_problems,
    pool_content,
    pool_views,
    settled,
    single_node_selector,
    writes_between,
    written_behind_older_slices,
)

DRIVER = "gpu.example.com"


def _slice(
    name: str, generation: int = 1, count: int = 1, devices: list[dict[str, Any]] | None = None, pool: str = "node-a"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": "node-a",
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            "devices": devices if devices is not None else [{"name": f"{name}-dev"}],
        },
    }


def _devices(count: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"name": f"d{i}", **extra} for i in range(count)]


@pytest.mark.parametrize(
    ("devices", "broken"),
    [
        (_devices(128), False),
        (_devices(129), True),
        (_devices(64, taints=[{"key": "k", "effect": "NoSchedule"}]), False),
        (_devices(65, taints=[{"key": "k", "effect": "NoSchedule"}]), True),
        ([*_devices(64), {"name": "x", "consumesCounters": [{"counterSet": "a"}]}], True),
        ([*_devices(64), {"name": "x", "attributes": {"ids": {"ints": [1, 2]}}}], True),
        ([*_devices(100), {"name": "x", "attributes": {"id": {"int": 1}}}], False),
    ],
    ids=["128-plain", "129-plain", "64-tainted", "65-tainted", "65-counters", "65-list-attribute", "101-scalar"],
)
def test_device_limit_is_128_or_64_with_taints_counters_or_list_attributes(
    devices: list[dict[str, Any]], broken: bool
) -> None:
    problems = limit_violations(_slice("s", devices=devices))
    assert bool(problems) == broken, problems


def test_counter_limits_name_the_upstream_constant() -> None:
    item = _slice("s", devices=[{"name": "x", "consumesCounters": [{"counterSet": c} for c in "abc"]}])
    item["spec"]["sharedCounters"] = [
        {"name": f"set{i}", "counters": {f"c{j}": {} for j in range(33)}} for i in range(9)
    ]
    problems = " ".join(limit_violations(item))
    for name in (
        "ResourceSliceMaxCounterSets",
        "ResourceSliceMaxCountersPerCounterSet",
        "ResourceSliceMaxDeviceCounterConsumptionsPerDevice",
    ):
        assert name in problems, problems


def test_duplicate_device_names_count_only_the_current_generation() -> None:
    old = _slice("a", generation=1, count=2, devices=[{"name": "gpu-0"}])
    new = [_slice("b", 2, 2, [{"name": "gpu-0"}]), _slice("c", 2, 2, [{"name": "gpu-1"}])]
    assert duplicate_device_names([old, *new]) == []
    repeated = _slice("c", 2, 2, [{"name": "gpu-0"}])
    assert duplicate_device_names([old, new[0], repeated]) == ["pool node-a: device gpu-0 in slices ['b', 'c']"]


def test_pool_view_is_complete_when_its_highest_generation_has_every_slice() -> None:
    views = pool_views([_slice("a", 2, 2), _slice("b", 2, 2), _slice("c", 1, 1)])
    assert views["node-a"].complete and views["node-a"].stale == ("c",)
    assert not settled(views), "an older generation left is not settled"
    assert not pool_views([_slice("a", 3, 2), _slice("b", 2, 2)])["node-a"].complete
    assert not pool_views([_slice("a", 2, 2), _slice("b", 2, 3)])["node-a"].complete, "counts disagree"
    assert settled(pool_views([_slice("a", 2, 2), _slice("b", 2, 2)]))


def test_qualified_and_bare_attribute_names_are_duplicates_in_the_drivers_domain() -> None:
    device = {
        "name": "gpu-0",
        "attributes": {"model": {}, f"{DRIVER}/model": {}, "other.example.com/model": {}, "index": {}},
    }
    assert duplicate_attribute_names(device, DRIVER) == [
        f"device gpu-0: attributes ['gpu.example.com/model', 'model'] all name {DRIVER}/model"
    ]
    assert duplicate_attribute_names({"name": "x", "attributes": {"model": {}}}, DRIVER) == []


def test_a_node_bound_slice_needs_its_node_with_the_current_uid_as_owner() -> None:
    item = _slice("s")
    assert owner_problems(item, "uid-1") and "no Node owner" in owner_problems(item, "uid-1")[0]
    item["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "uid-1"}]
    assert owner_problems(item, "uid-1") == []
    assert owner_problems(item, "uid-2"), "an owner with an old UID (Node recreated) is wrong"
    unbound = {"metadata": {"name": "n"}, "spec": {"allNodes": True}}
    assert owner_problems(unbound, None) == []


def test_a_node_selector_on_one_node_name_is_a_node_local_pool() -> None:
    item: dict[str, Any] = {"metadata": {"name": "s"}, "spec": {}}
    one = {"key": "metadata.name", "operator": "In", "values": ["node-a"]}
    item["spec"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [one]}]}
    assert single_node_selector(item) == "node-a"
    item["spec"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [{**one, "values": ["a", "b"]}]}]}
    assert single_node_selector(item) is None


def test_an_in_place_republish_of_one_slice_is_complete_at_every_event() -> None:
    versions: list[SliceVersion] = [
        ("LISTED", _slice("s", 1)),
        ("MODIFIED", _slice("s", 2)),
        ("MODIFIED", _slice("s", 3)),
    ]
    assert incomplete_moments(versions) == []


def test_deleting_before_writing_leaves_a_window_without_the_pool() -> None:
    versions: list[SliceVersion] = [("LISTED", _slice("s", 1)), ("DELETED", _slice("s", 1)), ("ADDED", _slice("s", 2))]
    assert incomplete_moments(versions) == ["after DELETED s: pool node-a has no slice"]


def test_writing_a_multi_slice_generation_one_by_one_is_incomplete_in_between() -> None:
    versions: list[SliceVersion] = [
        ("LISTED", _slice("a", 1, 2)),
        ("LISTED", _slice("b", 1, 2)),
        ("MODIFIED", _slice("a", 2, 2)),
        ("MODIFIED", _slice("b", 2, 2)),
    ]
    moments = incomplete_moments(versions)
    assert len(moments) == 1 and moments[0].startswith("after MODIFIED a: pool node-a generation 2: 1 slices"), moments
    assert replay(versions)["a"]["spec"]["pool"]["generation"] == 2


def test_a_pool_first_seen_incomplete_is_judged_from_its_first_complete_state() -> None:
    versions: list[SliceVersion] = [("ADDED", _slice("a", 1, 2)), ("ADDED", _slice("b", 1, 2))]
    assert incomplete_moments(versions) == []


def _version(name: str, generation: int, resource_version: str) -> dict[str, Any]:
    item = _slice(name, generation)
    item["metadata"]["resourceVersion"] = resource_version
    return item


def test_a_restart_writing_generation_one_beside_a_higher_older_slice_is_behind_it() -> None:
    versions: list[SliceVersion] = [
        ("LISTED", _version("s-g3", 3, "10")),
        ("ADDED", _version("s-g1", 1, "11")),
        ("DELETED", _version("s-g3", 3, "12")),
    ]
    assert written_behind_older_slices(versions, 1) == [
        "ADDED s-g1 at generation 1 while s-g3 (generation 3, unchanged since before) was still published"
    ]


def test_a_reset_in_place_or_after_deleting_the_old_slices_is_not_behind_any() -> None:
    in_place: list[SliceVersion] = [("LISTED", _version("s", 3, "10")), ("MODIFIED", _version("s", 1, "11"))]
    deleted_first: list[SliceVersion] = [
        ("LISTED", _version("s", 3, "10")),
        ("DELETED", _version("s", 3, "11")),
        ("ADDED", _version("s", 1, "12")),
    ]
    assert written_behind_older_slices(in_place, 1) == []
    assert written_behind_older_slices(deleted_first, 1) == []


def _stored(name: str, generation: int, resource_version: str, taint_time: str | None = None) -> dict[str, Any]:
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"} | ({"timeAdded": taint_time} if taint_time else {})
    item = _slice(name, generation, devices=[{"name": f"{name}-dev", "taints": [taint]}])
    item["metadata"]["resourceVersion"] = resource_version
    return item


def test_a_pool_rewritten_at_a_new_generation_says_the_same_and_its_writes_are_named() -> None:
    before = [_stored("s", 3, "10", "2026-12-05T22:00:00Z"), _stored("old", 2, "9")]
    rewritten = [_stored("s", 4, "15")]
    assert pool_content(rewritten) == pool_content(before)
    assert writes_between(before, rewritten) == ["s rewritten (resourceVersion 10 -> 15)"]
    assert writes_between(before, [before[0]]) == [], "an older generation's slice may go"
    assert writes_between(before, [*before, _stored("t", 3, "16")]) == ["t added"]
    assert writes_between(before, []) == ["s deleted"]


def test_a_pool_whose_devices_changed_says_something_else() -> None:
    before = [_stored("s", 3, "10")]
    untainted = [_slice("s", 4, devices=[{"name": "s-dev"}])]
    assert pool_content(untainted) != pool_content(before)
