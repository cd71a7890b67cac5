"""Consumable capacity of a shared device: how much a claim consumes, and how many claims one device can take.

A device with `allowMultipleAllocations: true` is allocated once per claim request, each allocation a share that
consumes part of every capacity the device publishes. The scheduler's rules (k8s.io/api@v0.37.2 resource/v1
types.go:692-790, CapacityRequestPolicy; k8s.io/dynamic-resource-allocation@v0.37.2
structured/internal/experimental/consumable_capacity.go, calculateConsumedCapacity and violatesPolicy):

- a capacity the claim does not request consumes the policy's default, or the whole capacity without a policy;
- a requested amount is rounded up to the next valid value (validValues) or step of the range (validRange), and a
  request beyond the largest valid value or the range's max violates the policy: the device is not eligible;
- the shares' consumption of each capacity must not add up to more than its value.

Only integer arithmetic on plain values is modelled (as the scheduler does unless DRAFractionalCapacityRange is on
and a bound is fractional); a device whose policy needs more is reported as not plannable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity as _parse_quantity


def parse_quantity(quantity: Any) -> Decimal:
    """A Kubernetes quantity (e.g. `16Gi`, `250m`, 4) as a Decimal."""
    return Decimal(_parse_quantity(quantity))


# Most claims a check shares one device with: each is a claim and a pod, so a device that takes more than this at
# the planned request is not worth the API round trips (the check picks the largest request that needs fewest).
MOST_SHARES = 4


def shareable(device: dict[str, Any]) -> bool:
    """Whether the device (as its slice lists it) allows multiple allocations and publishes capacity."""
    return bool(device.get("allowMultipleAllocations")) and bool(device.get("capacity"))


def consumed(capacity: dict[str, Any], requested: Decimal | None) -> Decimal | None:
    """What one share consumes of `capacity` for a request of `requested` (None: not requested).

    None when the request violates the capacity's policy (the device cannot be allocated for it).
    """
    value = parse_quantity(capacity["value"])
    policy = capacity.get("requestPolicy")
    if policy is None:
        return value if requested is None else requested
    default = parse_quantity(policy["default"]) if policy.get("default") is not None else None
    if requested is None:
        return default if default is not None else value
    valid_range = policy.get("validRange")
    valid_values = policy.get("validValues")
    if valid_range is not None and valid_range.get("min") is not None:
        low = parse_quantity(valid_range["min"])
        high = parse_quantity(valid_range["max"]) if valid_range.get("max") is not None else None
        step = parse_quantity(valid_range["step"]) if valid_range.get("step") is not None else None
        amount = max(requested, low)
        if step is not None and (amount - low) % step:
            amount = low + ((amount - low) // step + 1) * step
        if amount == default:
            return amount
        return None if high is not None and amount > high else amount
    if valid_values:
        for candidate in sorted(parse_quantity(v) for v in valid_values):
            if requested <= candidate:
                return candidate
        return None
    return requested


def consumption(device: dict[str, Any], requests: dict[str, Decimal]) -> dict[str, Decimal] | None:
    """What one share with `requests` consumes of each capacity of `device`; None if a request violates a policy."""
    capacities: dict[str, dict[str, Any]] = device.get("capacity") or {}
    if any(name not in capacities for name in requests):
        return None
    result = {}
    for name, capacity in capacities.items():
        amount = consumed(capacity, requests.get(name))
        if amount is None:
            return None
        result[name] = amount
    return result


def shares_that_fit(device: dict[str, Any], requests: dict[str, Decimal]) -> int:
    """How many shares with `requests` the device takes at once (0 if a request violates a policy)."""
    each = consumption(device, requests)
    if each is None:
        return 0
    limits = [
        int(parse_quantity(device["capacity"][name]["value"]) // amount) for name, amount in each.items() if amount > 0
    ]
    return min(limits) if limits else MOST_SHARES + 1


def _largest_valid_at_most(capacity: dict[str, Any], ceiling: Decimal) -> Decimal | None:
    """The largest amount a share may request of `capacity` that consumes no more than `ceiling`."""
    policy = capacity.get("requestPolicy")
    if policy is None:
        return ceiling if ceiling > 0 else None
    valid_range = policy.get("validRange")
    if valid_range is not None and valid_range.get("min") is not None:
        low = parse_quantity(valid_range["min"])
        high = min(ceiling, parse_quantity(valid_range["max"])) if valid_range.get("max") is not None else ceiling
        if high < low:
            return None
        step = parse_quantity(valid_range["step"]) if valid_range.get("step") is not None else None
        return high if step is None else low + ((high - low) // step) * step
    values = [parse_quantity(v) for v in policy.get("validValues") or []]
    fitting = [v for v in values if v <= ceiling]
    return max(fitting) if fitting else (ceiling if not values and ceiling > 0 else None)


@dataclass(frozen=True)
class SharePlan:
    """Requests that let `fits` claims share one device and leave no room for one more."""

    device: str
    requests: dict[str, Decimal]
    consumed: dict[str, Decimal]
    fits: int

    def claim_capacity(self) -> dict[str, str]:
        """The requests as a claim's `capacity.requests` (plain quantities)."""
        return {name: _quantity(amount) for name, amount in sorted(self.requests.items())}


def plan_shares(name: str, device: dict[str, Any]) -> SharePlan | None:
    """Requests with which 2..MOST_SHARES claims share `device` and one more does not fit; None if there are none.

    Each capacity in turn is requested at the largest valid amount of at most half its value (so that two shares fit
    and, where the rounding allows, a third does not); capacities without a policy are requested at a quarter, as
    unrequested they would consume the whole device.
    """
    capacities: dict[str, dict[str, Any]] = device.get("capacity") or {}
    for chosen in sorted(capacities):
        requests: dict[str, Decimal] = {}
        for other, capacity in capacities.items():
            if other != chosen and capacity.get("requestPolicy") is None:
                requests[other] = parse_quantity(capacity["value"]) / 4
        amount = _largest_valid_at_most(capacities[chosen], parse_quantity(capacities[chosen]["value"]) / 2)
        if amount is None:
            continue
        requests[chosen] = amount
        fits = shares_that_fit(device, requests)
        each = consumption(device, requests)
        if each is not None and 2 <= fits <= MOST_SHARES:
            return SharePlan(name, requests, each, fits)
    return None


def device_selector(driver: str, name: str, devices: dict[str, dict[str, Any]]) -> str | None:
    """A CEL selector that matches device `name` and no other of `devices` (by a string, int or bool attribute).

    An unqualified attribute name is in the driver's own domain. None when no such attribute tells it apart.
    """
    attributes: dict[str, dict[str, Any]] = devices[name].get("attributes") or {}
    for key, value in sorted(attributes.items()):
        literal = _cel_literal(value)
        if literal is None:
            continue
        same = [other for other, spec in devices.items() if (spec.get("attributes") or {}).get(key) == value]
        if same == [name]:
            domain, _, attribute = key.rpartition("/")
            return f"device.attributes[{json.dumps(domain or driver)}][{json.dumps(attribute)}] == {literal}"
    return None


def _cel_literal(value: dict[str, Any]) -> str | None:
    if "string" in value:
        return json.dumps(value["string"])
    if "int" in value:
        return str(int(value["int"]))
    if "bool" in value:
        return "true" if value["bool"] else "false"
    return None


def _quantity(amount: Decimal) -> str:
    """A plain quantity string for `amount` (an integer, or a decimal with at most three places as milli-units)."""
    if amount == amount.to_integral_value():
        return str(int(amount))
    return f"{int(amount * 1000)}m"


def same_amount(reported: Any, expected: Decimal) -> bool:
    """Whether a quantity as the API server wrote it (e.g. `8Gi`) is `expected`."""
    try:
        return bool(parse_quantity(reported) == expected)
    except ValueError:
        return False
