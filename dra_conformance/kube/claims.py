"""Reading what drivers report in a ResourceClaim's status.devices (the claim as a dict, as the tracker returns it)."""

from __future__ import annotations

from typing import Any


def device_statuses(claim: dict[str, Any]) -> list[dict[str, Any]]:
    """The claim's status.devices entries (every driver's), empty while no driver has written any."""
    return list((claim.get("status") or {}).get("devices") or [])


def device_condition(entry: dict[str, Any], condition_type: str) -> dict[str, Any] | None:
    """The condition of `condition_type` (e.g. "Ready") in one status.devices entry, or None if it has none."""
    return next((c for c in entry.get("conditions") or [] if c["type"] == condition_type), None)
