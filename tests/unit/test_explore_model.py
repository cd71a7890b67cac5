"""The explorer's model and claim shapes (pure logic, no cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dra_conformance.explore.cdi import defined_ids, read_spec_files
from dra_conformance.explore.machine import claim_shapes
from dra_conformance.explore.model import (
    MAX_DEVICES_PER_REQUEST,
    MAX_REQUESTS,
    AllocatedDevice,
    ClaimConfig,
    ClaimShape,
    Model,
    RequestShape,
    allocated_devices,
    answered_devices,
)
from dra_conformance.kubelet.client import ClaimRef

SHAPE = ClaimShape((RequestShape(2), RequestShape(1, admin=True)))


def test_a_shape_names_its_requests_and_spells_the_claim_spec() -> None:
    assert SHAPE.names == ("req-0", "req-1")
    assert (SHAPE.devices(), SHAPE.held_devices(), SHAPE.label()) == (3, 2, "2+1a")
    assert SHAPE.describe() == "req-0: 2 devices, req-1: 1 device (admin access)"
    assert SHAPE.spec("gpu") == {
        "devices": {
            "requests": [
                {"name": "req-0", "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2}},
                {
                    "name": "req-1",
                    "exactly": {
                        "deviceClassName": "gpu",
                        "allocationMode": "ExactCount",
                        "count": 1,
                        "adminAccess": True,
                    },
                },
            ]
        }
    }


@settings(max_examples=200, database=None)
@given(st.data(), st.integers(0, 8), st.integers(1, 8), st.booleans())
def test_drawn_shapes_fit_the_free_devices_and_the_node(
    data: st.DataObject, free: int, capacity: int, admin: bool
) -> None:
    free = min(free, capacity)
    if free == 0 and not admin:
        return  # the machine does not create a claim then
    shape = data.draw(claim_shapes(free, capacity, admin))
    assert 1 <= len(shape.requests) <= MAX_REQUESTS
    assert all(1 <= r.count <= MAX_DEVICES_PER_REQUEST for r in shape.requests)
    assert shape.held_devices() <= free and shape.devices() <= capacity
    assert admin or not any(r.admin for r in shape.requests)


def test_allocation_results_of_the_driver_are_read_with_base_request_names() -> None:
    results: list[dict[str, Any]] = [
        {"request": "req-1", "driver": "gpu.x", "pool": "n", "device": "gpu-3", "adminAccess": True},
        {"request": "req-0/fast", "driver": "gpu.x", "pool": "n", "device": "gpu-1"},
        {"request": "req-0", "driver": "other.x", "pool": "n", "device": "nic-0"},
    ]
    assert allocated_devices(results, "gpu.x") == (
        AllocatedDevice("req-0", "n", "gpu-1"),
        AllocatedDevice("req-1", "n", "gpu-3", admin=True),
    )


def test_answers_keep_their_order_and_every_field() -> None:
    devices: list[dict[str, Any]] = [
        {"requestNames": ["req-0"], "poolName": "n", "deviceName": "gpu-1", "cdiDeviceIDs": ["v/c=a"], "shareID": "s"},
        {"poolName": "n", "deviceName": "gpu-0"},
    ]
    first, second = answered_devices(devices)
    assert (first.request_names, first.key, first.cdi_ids, first.share_id) == (
        ("req-0",),
        ("n", "gpu-1"),
        ("v/c=a",),
        "s",
    )
    assert (second.request_names, second.cdi_ids, second.share_id) == ((), (), None)
    assert second.describe() == "n/gpu-0 [all requests]"


def _model() -> Model:
    return Model("node-a", "gpu.x", capacity=6)


def test_free_devices_count_only_live_claims_held_devices() -> None:
    model = _model()
    one = model.add(ClaimRef("ns", "u1", "claim-1"), SHAPE, ())
    model.add(ClaimRef("ns", "u2", "claim-2"), ClaimShape((RequestShape(2, admin=True),)), ())
    assert model.free_devices() == 4
    model.deleted(one)
    assert model.free_devices() == 6
    assert [c.label for c in model.live()] == ["c2"]


def test_a_first_prepare_expects_cdi_specs_a_wipe_forgets_them_and_a_repeat_does_not_bring_them_back() -> None:
    model = _model()
    claim = model.add(ClaimRef("ns", "u1", "claim-1"), SHAPE, ())
    model.prepared_ok(claim, ())
    assert claim.prepared and claim.cdi_expected
    model.wiped()
    assert not claim.cdi_expected
    model.prepared_ok(claim, ())  # a repeated prepare need not write the specs again
    assert not claim.cdi_expected
    model.unprepared_ok(claim, at=5.0)
    model.prepared_ok(claim, ())  # prepared anew: its specs are due again
    assert claim.cdi_expected and claim.unprepared_at == 5.0


def test_a_restart_marks_prepared_claims_until_they_are_prepared_again() -> None:
    model = _model()
    claim = model.add(ClaimRef("ns", "u1", "claim-1"), SHAPE, ())
    model.prepared_ok(claim, ())
    model.restarted()
    assert claim.restarted_since_prepare and model.restarts == 1
    model.prepared_ok(claim, ())
    assert not claim.restarted_since_prepare


def test_unprepare_candidates_are_prepared_claims_first_deleted_ones_included() -> None:
    model = _model()
    first, second, third = (model.add(ClaimRef("ns", f"u{i}", f"claim-{i}"), SHAPE, ()) for i in range(3))
    model.prepared_ok(third, ())
    model.deleted(third)
    assert [c.label for c in model.unpreparable()] == [third.label, first.label, second.label]
    model.unprepared_ok(first, at=1.0)
    assert first.unprepared_at is None  # never prepared: nothing to judge after it


def test_cdi_ids_are_read_from_json_and_yaml_spec_files(tmp_path: Path) -> None:
    files = {
        "a.json": '{"cdiVersion": "0.6.0", "kind": "example.com/gpu", "devices": [{"name": "u1-gpu-0"}]}',
        "b.yaml": "kind: example.com/gpu\ndevices:\n- name: u2-gpu-1\n",
        "c.json": "not json",
        "d.yaml": "devices: []\n",
    }
    for name, text in [*files.items(), ("notes.txt", "kind: x/y")]:
        (tmp_path / name).write_text(text)
    assert read_spec_files(tmp_path) == files
    assert defined_ids(files) == {"example.com/gpu=u1-gpu-0": "a.json", "example.com/gpu=u2-gpu-1": "b.yaml"}
    assert read_spec_files(None) == {} and read_spec_files(tmp_path / "absent") == {}


def test_a_failed_device_no_claim_holds_is_not_free_and_a_restart_makes_its_health_unknown() -> None:
    model = _model()
    claim = model.add(ClaimRef("ns", "u1", "c"), ClaimShape((RequestShape(1),)), (AllocatedDevice("req-0", "p", "d0"),))
    free = model.free_devices()
    model.made_unhealthy(("p", "d0"))  # held by the claim: counted once
    model.made_unhealthy(("p", "d1"))
    assert model.free_devices() == free - 1 and model.usable_capacity() == model.capacity - 2
    model.deleted(claim)
    assert model.free_devices() == model.capacity - 2
    model.restarted()
    assert not model.failed and model.health_unknown == {("p", "d0"), ("p", "d1")}
    model.made_healthy(("p", "d0"))
    assert model.unavailable() == {("p", "d1")} and model.health_hooked


def test_a_claims_own_config_applies_over_its_class_and_the_last_entry_wins() -> None:
    shape = ClaimShape(
        (RequestShape(1, class_config=0), RequestShape(1, class_config=0), RequestShape(1)),
        (ClaimConfig(1, ("req-1",)), ClaimConfig(0, ("req-1",))),
    )
    assert [shape.applied_config(name) for name in shape.names] == [0, 0, None]
    assert ClaimShape((RequestShape(1, class_config=0),), (ClaimConfig(1),)).applied_config("req-0") == 1
    spec = shape.spec(
        "plain", config_classes=("with-0", "with-1"), opaque=({"driver": "d", "parameters": {"a": 0}},) * 2
    )
    assert [r["exactly"]["deviceClassName"] for r in spec["devices"]["requests"]] == ["with-0", "with-0", "plain"]
    assert spec["devices"]["config"][0] == {"opaque": {"driver": "d", "parameters": {"a": 0}}, "requests": ["req-1"]}
    assert shape.label() == "1k0+1k0+1 c1@req-1 c0@req-1"
