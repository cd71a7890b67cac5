"""Reading what drivers report in a ResourceClaim's status.devices (the claim as a dict, as the tracker returns it)."""

from __future__ import annotations

from typing import Any


def device_statuses(claim: dict[str, Any]) -> list[dict[str, Any]]:
    """The claim's status.devices entries (every driver's), empty while no driver has written any."""
    return list((claim.get("status") or {}).get("devices") or [])


def device_condition(entry: dict[str, Any], condition_type: str) -> dict[str, Any] | None:
    """The condition of `condition_type` (e.g. "Ready") in one status.devices entry, or None if it has none."""
    return next((c for c in entry.get("conditions") or [] if c["type"] == condition_type), None)


def ready_device_status(driver: str, pool: str, device: str, *, reason: str, message: str) -> dict[str, Any]:
    """A status.devices entry for one allocated device with condition Ready=True, as a driver writes it."""
    return {
        "driver": driver,
        "pool": pool,
        "device": device,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": reason,
                "message": message,
                # Any valid time: the API server stores what the writer says.
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }
