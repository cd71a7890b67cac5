"""CDI spec files: one per prepared claim, naming one CDI device per allocated device."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
    write_spec_file(spec_path(cdi_dir, driver, claim_uid), spec)
    return [device_id(driver, profile, claim_uid, device) for device in devices]


def write_spec_file(path: Path, spec: dict[str, Any]) -> None:
    """Write one spec atomically (a partial file renamed into place), creating the CDI directory if it is missing.

    Compact JSON: only json's C encoder serves calls without indent, and a spec is written on every prepare.
    """
    partial = path.with_suffix(".partial")
    body = json.dumps(spec)
    try:
        partial.write_text(body)
    except FileNotFoundError:  # the directory is created on the first write, not looked up on every one
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(body)
    partial.replace(path)


def remove_spec(cdi_dir: Path, driver: str, claim_uid: str) -> None:
    """Delete the claim's spec; a missing file is fine (unprepare is idempotent)."""
    spec_path(cdi_dir, driver, claim_uid).unlink(missing_ok=True)


def remove_driver_specs(cdi_dir: Path, driver: str) -> None:
    """Delete every spec of the driver (by its file prefix): what the UNPREPARE_REMOVES_OTHER_CLAIMS_CDI mutant does."""
    if cdi_dir.is_dir():
        for path in cdi_dir.glob(f"{driver}-*.json"):
            path.unlink(missing_ok=True)
