"""Consumable capacity as the scheduler computes it: consumption per share, shares per device, the checks' plan."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from dra_conformance.driver.shared_capacity import (
    consumed,
    device_selector,
    parse_quantity,
    plan_shares,
    same_amount,
    shareable,
    shares_that_fit,
)

GI = Decimal(1024**3)
MEMORY = {
    "value": "16Gi",
    "requestPolicy": {"default": "4Gi", "validRange": {"min": "1Gi", "max": "8Gi", "step": "1Gi"}},
}
COMPUTE = {"value": "100", "requestPolicy": {"default": "25", "validValues": ["25", "50", "100"]}}


def _device(**capacity: dict[str, Any]) -> dict[str, Any]:
    return {"allowMultipleAllocations": True, "capacity": capacity}


@pytest.mark.parametrize(
    ("capacity", "requested", "expected"),
    [
        (MEMORY, None, 4 * GI),  # not requested: the policy's default
        (MEMORY, Decimal(1), 1 * GI),  # below min: rounded up to min
        (MEMORY, Decimal("2.5") * GI, 3 * GI),  # between steps: rounded up to the next step
        (MEMORY, 9 * GI, None),  # beyond max: violates the policy
        (COMPUTE, Decimal(30), Decimal(50)),  # the next valid value
        (COMPUTE, Decimal(101), None),  # beyond every valid value
        ({"value": "10"}, None, Decimal(10)),  # no policy, not requested: the whole capacity
        ({"value": "10"}, Decimal(3), Decimal(3)),  # no policy: as requested
    ],
)
def test_a_share_consumes_the_request_rounded_up_by_the_policy(
    capacity: dict[str, Any], requested: Decimal | None, expected: Decimal | None
) -> None:
    assert consumed(capacity, requested) == expected


def test_shares_that_fit_are_limited_by_the_scarcest_capacity() -> None:
    device = _device(memory=MEMORY, compute=COMPUTE)
    assert shares_that_fit(device, {"compute": Decimal(50)}) == 2  # compute 2 x 50, memory 4 x 4Gi
    assert shares_that_fit(device, {"memory": GI}) == 4  # compute's default of 25 limits to 4
    assert shares_that_fit(device, {"memory": 9 * GI}) == 0, "a request beyond the policy fits nowhere"
    assert shares_that_fit(device, {"bandwidth": Decimal(1)}) == 0, "a capacity the device lacks"


def test_plan_shares_the_device_between_two_claims_and_leaves_no_room_for_a_third() -> None:
    plan = plan_shares("gpu-0", _device(memory=MEMORY, compute=COMPUTE))
    assert plan is not None
    assert (plan.fits, plan.claim_capacity()) == (2, {"compute": "50"})
    assert plan.consumed == {"compute": Decimal(50), "memory": 4 * GI}


def test_plan_requests_capacities_without_a_policy_so_they_do_not_take_the_whole_device() -> None:
    plan = plan_shares("nic-0", _device(bandwidth={"value": "10G"}, queues={"value": "8"}))
    assert plan is not None
    assert plan.fits == 2, plan
    assert plan.claim_capacity() == {"bandwidth": "5000000000", "queues": "2"}


def test_no_plan_for_a_device_that_takes_one_share_at_a_time() -> None:
    whole = {"value": "1", "requestPolicy": {"default": "1", "validValues": ["1"]}}
    assert plan_shares("gpu-0", _device(slots=whole)) is None


def test_shareable_needs_multiple_allocations_and_capacity() -> None:
    assert shareable(_device(memory=MEMORY))
    assert not shareable({"capacity": {"memory": MEMORY}})
    assert not shareable({"allowMultipleAllocations": True})


def test_device_selector_uses_an_attribute_value_only_that_device_has() -> None:
    devices = {
        "gpu-0": {"attributes": {"model": {"string": "X"}, "index": {"int": 0}}},
        "gpu-1": {"attributes": {"model": {"string": "X"}, "index": {"int": 1}}},
    }
    assert device_selector("gpu.example.com", "gpu-1", devices) == 'device.attributes["gpu.example.com"]["index"] == 1'
    qualified: dict[str, dict[str, Any]] = {"a": {"attributes": {"vendor.io/uuid": {"string": "u-1"}}}, "b": {}}
    assert device_selector("d.example.com", "a", qualified) == 'device.attributes["vendor.io"]["uuid"] == "u-1"'
    alike = {"a": {"attributes": {"model": {"string": "X"}}}, "b": {"attributes": {"model": {"string": "X"}}}}
    assert device_selector("d.example.com", "a", alike) is None


def test_same_amount_compares_quantities_by_value() -> None:
    assert same_amount("8Gi", 8 * GI)
    assert not same_amount("8G", 8 * GI)
    assert parse_quantity("250m") == Decimal("0.25")
