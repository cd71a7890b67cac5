"""The `gpu-shared` device profile: GPUs that several claims share, each claim consuming part of their capacity.

Each device allows multiple allocations and publishes two consumable capacities, one with each form of request
policy (`validRange` and `validValues`), so the scheduler rounds and sums both. Every allocation of such a device is
a share with an ID of its own (`shareID` in the allocation result): the driver sets up one CDI device per share, in a
spec file of its own named after the share, and answers the share ID with it. Unpreparing one claim removes the specs
of its own shares and nothing else, so the other claims on the same device stay prepared.

The PREPARE_IGNORES_SHARE_ID mutant keys the spec by device instead: a second share overwrites the first's spec, and
unpreparing either share removes the spec the other still uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fake_dra import cdi
from fake_dra.config import DriverConfig

PROFILE = "gpu-shared"
# What each device has, and how a request consumes it: memory in whole GiB between 1 and 16 (4 GiB unless the claim
# asks), compute in quarters, halves or all of the device (a quarter unless the claim asks).
MEMORY = "16Gi"
MEMORY_POLICY = {"default": "4Gi", "validRange": {"min": "1Gi", "max": "16Gi", "step": "1Gi"}}
COMPUTE = "100"
COMPUTE_POLICY = {"default": "25", "validValues": ["25", "50", "100"]}


def shared_device(config: DriverConfig, index: int) -> dict[str, Any]:
    """Device `index` of the node: shareable, with consumable memory and compute."""
    return {
        "name": f"{PROFILE}-{index}",
        "allowMultipleAllocations": True,
        "attributes": {
            "model": {"string": "FakeGPU-9000-shared"},
            "index": {"int": index},
            "uuid": {"string": f"gpu-shared-{config.node_name}-{index}"},
            "driverVersion": {"version": config.driver_version},
        },
        "capacity": {
            "memory": {"value": MEMORY, "requestPolicy": MEMORY_POLICY},
            "compute": {"value": COMPUTE, "requestPolicy": COMPUTE_POLICY},
        },
    }


def share_of(result: dict[str, Any], *, ignore_share_id: bool = False) -> str:
    """The name of the share an allocation result is: `<device>-<shareID>`, the device alone when it has no share.

    The PREPARE_IGNORES_SHARE_ID mutant passes `ignore_share_id` and names every share of a device alike.
    """
    share_id = result.get("shareID")
    return str(result["device"]) if ignore_share_id or not share_id else f"{result['device']}-{share_id}"


def spec_path(cdi_dir: Path, driver: str, share: str) -> Path:
    """Where the spec of one share lives."""
    return cdi_dir / f"{driver}-share-{share}.json"


def write_share_specs(
    config: DriverConfig, claim_uid: str, results: list[dict[str, Any]], *, ignore_share_id: bool = False
) -> list[str]:
    """Write one spec per share of the claim's results (atomically); return the CDI device ID of each, in order.

    The edits tell the workload which device, which share and how much of the device it got.
    """
    kind = cdi.kind(config.driver_name, PROFILE)
    ids = []
    for result in results:
        share = share_of(result, ignore_share_id=ignore_share_id)
        consumed = result.get("consumedCapacity") or {}
        env = [
            f"FAKE_DRA_DEVICE={result['device']}",
            f"FAKE_DRA_CLAIM={claim_uid}",
            *([] if ignore_share_id else [f"FAKE_DRA_SHARE={result.get('shareID', '')}"]),
            *(f"FAKE_DRA_{name.upper()}={value}" for name, value in sorted(consumed.items())),
        ]
        spec = {
            "cdiVersion": cdi.CDI_VERSION,
            "kind": kind,
            "devices": [{"name": share, "containerEdits": {"env": env}}],
            "containerEdits": {},
        }
        cdi.write_spec_file(spec_path(config.cdi_dir, config.driver_name, share), spec)
        ids.append(f"{kind}={share}")
    return ids


def remove_share_specs(config: DriverConfig, prepared_devices: list[dict[str, Any]]) -> None:
    """Delete the specs of the shares a claim was prepared with (as its prepared record lists them)."""
    for device in prepared_devices:
        for cdi_id in device["cdiDeviceIDs"]:
            spec_path(config.cdi_dir, config.driver_name, cdi_id.split("=", 1)[1]).unlink(missing_ok=True)
