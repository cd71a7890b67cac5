"""`dra-conformance slices check` (driver.slice_check): reading slices, the plans, and judging the allocator's answers.

The pure logic runs against a stand-in allocator; the tests marked needs_go build the real one (the pinned
structured allocator, clusters/local/slice-allocator) and run it on the reference driver's partitionable pools.
Listing a cluster's slices (`--kubeconfig`) is tested against the real API server, in
tests/cluster/test_slices_check_live.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from dra_conformance.backends.registry import build_slice_allocator
from dra_conformance.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from dra_conformance.config import SuiteConfig
from dra_conformance.driver import slice_check
from dra_conformance.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
# The reference driver's gpu-partitions pools, as both its builds publish them (partitions_test.go holds the Go
# build to these files): two GPUs, and two GPUs under partitions-oversubscribe-counters.
TESTDATA = ROOT / "drivers" / "fake-dra-go" / "testdata"
GOOD_POOL = TESTDATA / "partitions-release-1-words.json"
BROKEN_POOL = TESTDATA / "partitions-oversubscribed.json"


def _slice(
    devices: list[dict[str, Any]],
    counter_sets: list[dict[str, Any]] | None = None,
    *,
    pool: str = "p",
    count: int = 1,
    name: str = "s-0",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": "d.example.com",
        "nodeName": "n1",
        "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
    }
    if counter_sets is not None:
        spec["sharedCounters"] = counter_sets
    else:
        spec["devices"] = devices
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def _device(name: str, memory: str | None = None, counter_set: str = "cs") -> dict[str, Any]:
    device: dict[str, Any] = {"name": name}
    if memory is not None:
        device["consumesCounters"] = [{"counterSet": counter_set, "counters": {"memory": {"value": memory}}}]
    return device


def _pool(devices: list[dict[str, Any]], memory: str = "4Gi", sets: tuple[str, ...] = ("cs",)) -> list[dict[str, Any]]:
    counter_sets = [{"name": s, "counters": {"memory": {"value": memory}}} for s in sets]
    return [_slice(devices, count=2), _slice([], counter_sets, count=2, name="s-1")]


class StandIn:
    """An allocator that answers each plan as told: by plan id prefix, else "unallocatable"; records documents."""

    def __init__(self, answers: Mapping[str, dict[str, Any]] | None = None) -> None:
        self.answers = dict(answers or {})
        self.documents: list[dict[str, Any]] = []

    def __call__(self, document: dict[str, Any]) -> dict[str, Any]:
        self.documents.append(document)
        outcomes = []
        for plan in document["plans"]:
            answer = next((a for key, a in self.answers.items() if plan["id"].startswith(key)), None)
            outcomes.append({"id": plan["id"], "status": "unallocatable", "seconds": 0.0, **(answer or {})})
        return {"outcomes": outcomes, "seconds": 0.01}


def _allocated(*devices: str) -> dict[str, Any]:
    return {
        "status": "allocated",
        "claims": [[{"request": "r0", "driver": "d", "pool": "p", "device": d}] for d in devices],
    }


# --- reading ------------------------------------------------------------------------------------------------------


def test_slices_load_from_a_json_list_a_list_object_and_yaml_documents(tmp_path: Path) -> None:
    pool = _pool([_device("a", "1Gi")])
    as_list = tmp_path / "list.json"
    as_list.write_text(json.dumps(pool))
    as_object = tmp_path / "object.json"
    as_object.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": pool}))
    as_documents = tmp_path / "docs.yaml"
    as_documents.write_text("".join(f"---\n{json.dumps(item)}\n" for item in pool))
    for path in (as_list, as_object, as_documents):
        assert slice_check.load_slices(path) == pool, path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "no ResourceSlices in it"),
        ("{a: [", "neither YAML nor JSON"),
        ("[1]", "item 0: a ResourceSlice is a mapping, got int"),
        ('{"kind": "DeviceClass"}', "item 0: kind DeviceClass, not ResourceSlice"),
        ('{"spec": {"driver": "d"}}', "item 0: spec.driver and spec.pool are required"),
        ('{"spec": {"driver": "d", "pool": {"name": "p", "generation": 1}}}', "spec.pool.resourceSliceCount"),
        (
            '{"spec": {"driver": "d", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}, '
            '"devices": [{}]}}',
            "every device has a name",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "slices.yaml"
    path.write_text(content)
    with pytest.raises(UsageError) as raised:
        slice_check.load_slices(path)
    assert str(raised.value).startswith(f"slices file {path}" if "YAML" in message else str(path)), raised.value
    assert message in str(raised.value) and "\n" not in str(raised.value), raised.value


def test_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"[Nn]o such file"):
        slice_check.load_slices(tmp_path / "absent.json")


# --- shapes and plans -----------------------------------------------------------------------------------------------


def test_partitions_fall_into_three_shapes_by_counters_whatever_the_gpu() -> None:
    (pool,) = slice_check.pools_of(slice_check.load_slices(GOOD_POOL))
    shapes = slice_check.shapes_of(pool)
    assert sorted(len(devices) for devices in shapes.values()) == [2, 4, 8], shapes
    by_partition = slice_check.shapes_of(pool, "partition")
    assert {key: len(devices) for key, devices in by_partition.items()} == {
        "partition=half": 4,
        "partition=quarter": 8,
        "partition=whole": 2,
    }, by_partition


@pytest.mark.parametrize(("shapes", "most"), [(1, 1), (1, 5), (3, 1), (3, 8), (4, 6)])
def test_every_multiset_up_to_the_bound_is_tried_once(shapes: int, most: int) -> None:
    names = [f"s{i}" for i in range(shapes)]
    tried = list(slice_check.multisets(names, most))
    assert len(tried) == len(set(tried)) == slice_check.count_multisets(shapes, most), len(tried)
    assert {sum(n for _, n in combination) for combination in tried} == set(range(1, most + 1))
    assert slice_check.count_multisets(3, 8) == 164


def test_each_combination_is_asked_as_one_claim_one_pod_and_pods_one_after_another() -> None:
    plans = slice_check.plans_for({"a": ("x",), "b": ("y", "z")}, 2)
    singles = [plan.single for plan in plans if plan.single]
    assert singles == ["x", "y", "z"], singles
    two_b = [plan for plan in plans if plan.id.endswith(":2xb")]
    assert [(plan.id.split(":")[0], plan.mode, len(plan.claims)) for plan in two_b] == [
        ("claim", "joint", 1),
        ("pod", "joint", 2),
        ("pods", "sequential", 2),
    ]
    assert two_b[0].claims[0] == ((slice_check._selector("shape", "b"), 2),)


def test_the_allocator_gets_the_pool_on_every_node_with_names_and_shapes_it_can_select() -> None:
    (pool,) = slice_check.pools_of(_pool([_device("a", "1Gi")]))
    prepared = slice_check.allocator_slices(pool, {"one": ("a",)})
    device_slice = prepared[0]["spec"]
    assert device_slice["allNodes"] is True and "nodeName" not in device_slice, device_slice
    attributes = device_slice["devices"][0]["attributes"]
    assert attributes[f"{slice_check.CHECK_DOMAIN}/name"] == {"string": "a"}
    assert attributes[f"{slice_check.CHECK_DOMAIN}/shape"] == {"string": "one"}
    assert "nodeName" in pool.slices[0]["spec"], "the pool as published is left as it is"


# --- findings ---------------------------------------------------------------------------------------------------------


def _obligations(report: slice_check.CheckReport) -> list[str]:
    return sorted(finding.obligation for finding in report.findings)


def test_a_consistent_pool_the_allocator_handles_right_has_no_findings() -> None:
    allocator = StandIn({"alone:": _allocated("a"), "claim:2x": _allocated("a", "b")})
    slices = _pool([_device("a", "2Gi"), _device("b", "2Gi")])
    report = slice_check.check(slices, allocator, source="t")
    assert report.findings == [], report.findings
    assert report.combinations == 2 and report.allocations == 2 + 3 * 2, report.lines()
    assert report.lines()[-1].startswith("no findings: 2 combinations, 8 allocations"), report.lines()


def test_a_device_beyond_its_counter_set_is_found_with_the_allocators_refusal_as_evidence() -> None:
    slices = _pool([_device("big", "8Gi"), _device("small", "2Gi")])
    report = slice_check.check(slices, StandIn({"alone:small": _allocated("small")}), source="t")
    assert _obligations(report) == ["partitions.device-consumption-within-its-counter-set"], report.findings
    assert "device big:" in report.findings[0].message
    assert report.findings[0].message.endswith("(the allocator refuses it alone: unallocatable)"), report.findings


def test_an_allocation_beyond_the_counters_is_the_allocator_bug_class() -> None:
    allocator = StandIn({"alone:": _allocated("a"), "pods:2x": _allocated("a", "b")})
    report = slice_check.check(_pool([_device("a", "3Gi"), _device("b", "3Gi")]), allocator, source="t")
    assert _obligations(report) == ["partitions.co-allocated-within-counters"], report.findings
    assert "pods:2x" in report.findings[0].message and "memory of set cs" in report.findings[0].message


def test_a_device_beyond_its_set_that_the_allocator_allocates_alone_is_the_allocator_bug_class() -> None:
    report = slice_check.check(_pool([_device("big", "8Gi")]), StandIn({"": _allocated("big")}), source="t")
    assert _obligations(report) == [
        "partitions.co-allocated-within-counters",
        "partitions.co-allocated-within-counters",
        "partitions.co-allocated-within-counters",
        "partitions.co-allocated-within-counters",
        "partitions.device-consumption-within-its-counter-set",
    ], report.findings
    assert report.findings[1].message.startswith("alone:big: the allocator allocated big: counter memory"), (
        report.findings
    )


def test_a_device_allocated_twice_is_found_unless_it_allows_multiple_allocations() -> None:
    twice = StandIn({"alone:": _allocated("a"), "claim:2x": _allocated("a", "a")})
    report = slice_check.check(_pool([_device("a", "1Gi"), _device("b", "1Gi")]), twice, source="t")
    assert _obligations(report) == ["taints.device-allocated-once"], report.findings
    shared = _device("a", "1Gi") | {"allowMultipleAllocations": True}
    report = slice_check.check(_pool([shared, _device("b", "1Gi")]), twice, source="t")
    assert report.findings == [], report.findings


def test_a_device_refused_alone_in_a_valid_pool_is_found() -> None:
    allocator = StandIn({"alone:a": _allocated("a")})
    report = slice_check.check(_pool([_device("a", "1Gi"), _device("b")]), allocator, source="t")
    assert _obligations(report) == ["slices.every-device-allocatable-alone"], report.findings
    assert report.findings[0].message.startswith("device b:"), report.findings


def test_an_invalid_pool_is_found_from_the_slices_and_its_refusals_are_not_counted_again() -> None:
    slices = _pool([_device("c", "1Gi", counter_set="missing"), _device("a", "1Gi"), _device("a", "1Gi")])
    slices.append(_slice([], [{"name": "cs", "counters": {"memory": {"value": "4Gi"}}}], name="s-2"))
    for piece in slices:
        piece["spec"]["pool"]["resourceSliceCount"] = 3
    allocator = StandIn({"": {"status": "error", "error": "invalid resource pools were encountered"}})
    report = slice_check.check(slices, allocator, source="t")
    assert _obligations(report) == [
        "partitions.counter-references-resolve",
        "partitions.counter-set-names-unique-in-pool",
        "slices.device-names-unique-in-pool",
    ], report.findings
    assert "the allocator says: invalid resource pools were encountered" in report.lines()[1], report.lines()


def test_an_incomplete_pool_is_found_and_not_handed_to_the_allocator() -> None:
    allocator = StandIn()
    report = slice_check.check(_pool([_device("a", "1Gi")])[:1], allocator, source="t")
    assert _obligations(report) == ["slices.slice-count-matches-current-generation"], report.findings
    assert allocator.documents == [] and "allocator not asked" in report.lines()[1], report.lines()


def test_a_bound_beyond_the_allocation_budget_is_refused_in_one_line() -> None:
    slices = slice_check.load_slices(GOOD_POOL)
    with pytest.raises(UsageError, match=r"--max-devices 14 asks \d+ allocations .* more than --max-allocations 100"):
        slice_check.check(slices, StandIn(), source="t", max_devices=14, max_allocations=100)


def test_cli_refuses_bad_input_in_one_line_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1]")
    assert main(["slices", "check", str(bad)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err == f"dra-conformance: {bad}: item 0: a ResourceSlice is a mapping, got int\n", err
    assert main(["slices", "check"]) == EXIT_USAGE
    assert "needs ResourceSlices" in capsys.readouterr().err


# --- the real allocator -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def allocator() -> slice_check.Allocator:
    return slice_check.program_allocator(build_slice_allocator(SuiteConfig()))


@pytest.mark.needs_go
def test_the_pinned_allocator_finds_nothing_wrong_with_the_reference_partitions(
    allocator: slice_check.Allocator,
) -> None:
    report = slice_check.check(slice_check.load_slices(GOOD_POOL), allocator, source=str(GOOD_POOL))
    assert report.findings == [], "\n".join(report.lines())
    (pool,) = report.pools
    assert report.combinations == 164 and pool.outcomes["error"] == pool.outcomes["timeout"] == 0, report.lines()
    assert pool.largest_allocated == pool.counters_allow == 8, report.lines()


@pytest.mark.needs_go
def test_the_pinned_allocator_confirms_partitions_oversubscribe_counters(allocator: slice_check.Allocator) -> None:
    report = slice_check.check(slice_check.load_slices(BROKEN_POOL), allocator, source=str(BROKEN_POOL))
    found = [(f.obligation, f.message.split(":")[0]) for f in report.findings]
    assert found == [
        ("partitions.device-consumption-within-its-counter-set", "device gpu-0"),
        ("partitions.device-consumption-within-its-counter-set", "device gpu-1"),
    ], report.lines()
    assert all("the allocator refuses it alone: unallocatable" in f.message for f in report.findings), report.lines()


@pytest.mark.needs_go
def test_cli_exit_code_is_1_on_findings_and_0_without(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["slices", "check", str(GOOD_POOL)]) == EXIT_OK
    assert capsys.readouterr().out.splitlines()[-1].startswith("no findings: 164 combinations")
    assert main(["slices", "check", str(BROKEN_POOL)]) == EXIT_FAILED
    assert capsys.readouterr().out.splitlines()[-1].startswith("2 findings: 164 combinations")
