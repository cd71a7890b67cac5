"""CDI spec files: one per prepared claim, naming one CDI device per allocated device."""

from __future__ import annotations

import json
from pathlib import Path

CDI_VERSION = "0.8.0"


def kind(driver: str, profile: str) -> str:
    """CDI kind `<vendor>/<class>`: the driver name is the vendor, the profile the class."""
    return f"{driver}/{profile}"


def spec_path(cdi_dir: Path, driver: str, claim_uid: str) -> Path:
    """Where the spec of one claim lives."""
    return cdi_dir / f"{driver}-{claim_uid}.json"


def device_id(driver: str, profile: str, claim_uid: str, device: str) -> str:
    """The fully qualified CDI device name the runtime would inject."""
    return f"{kind(driver, profile)}={claim_uid}-{device}"


def write_spec(
    cdi_dir: Path,
    driver: str,
    profile: str,
    claim_uid: str,
    devices: list[str],
    *,
    edits: bool = True,
    set_up: list[str] | None = None,
) -> list[str]:
    """Write the claim's spec (atomically) and return its CDI device IDs.

    `edits=False` leaves out what identifies the device (the spec stays valid: a CDI device needs some edit).
    `set_up` names the device each CDI device's edits set up (default: the device itself, one per device).
    """
    cdi_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "cdiVersion": CDI_VERSION,
        "kind": kind(driver, profile),
        "devices": [
            {
                "name": f"{claim_uid}-{device}",
                "containerEdits": {
                    "env": [f"FAKE_DRA_DEVICE={edited}", f"FAKE_DRA_CLAIM={claim_uid}"]
                    if edits
                    else [f"FAKE_DRA_CLAIM={claim_uid}"]
                },
            }
            for device, edited in zip(devices, set_up or devices, strict=True)
        ],
        "containerEdits": {},
    }
    path = spec_path(cdi_dir, driver, claim_uid)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(spec, indent=2))
    partial.replace(path)
    return [device_id(driver, profile, claim_uid, device) for device in devices]


def remove_spec(cdi_dir: Path, driver: str, claim_uid: str) -> None:
    """Delete the claim's spec; a missing file is fine (unprepare is idempotent)."""
    spec_path(cdi_dir, driver, claim_uid).unlink(missing_ok=True)


def remove_driver_specs(cdi_dir: Path, driver: str) -> None:
    """Delete every spec of the driver (by its file prefix): what the UNPREPARE_REMOVES_OTHER_CLAIMS_CDI mutant does."""
    if cdi_dir.is_dir():
        for path in cdi_dir.glob(f"{driver}-*.json"):
            path.unlink(missing_ok=True)
