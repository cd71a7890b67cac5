"""The reference driver's fault vocabulary: what its control socket accepts, as JSON Schema.

The Go build (drivers/fake-dra-go/faults.go, parseFault) validates a fault as this schema does; the scenario
catalog checks the faults a scenario writes down against it ahead of time, so a typo fails when the catalog loads
rather than when a scenario switches the fault on. tests/unit/test_reference_driver_vocabulary.py keeps the two
equal.
"""

from __future__ import annotations

from typing import Any

MODES = {
    "unavailable": "device reported UNHEALTHY in the health stream and tainted NoSchedule in the slice",
    "informational-taint": "device tainted with effect None in the slice (informs; changes no allocation)",
    "reduced-capacity": "only `devices` devices are published",
    "slow-prepare": "NodePrepareResources waits `delay` seconds first",
    "slow-unprepare": "NodeUnprepareResources waits `delay` seconds first",
    "prepare-error": "NodePrepareResources returns a per-claim error",
    "unprepare-error": "NodeUnprepareResources returns a per-claim error",
    "hang-prepare": "NodePrepareResources blocks until the fault is cleared",
    "hang-unprepare": "NodeUnprepareResources blocks until the fault is cleared",
    "status-write-failure": "status.devices is not written; prepare reports the failure per claim",
    "cdi-without-edits": "prepare succeeds and reports Ready, but the claim's CDI spec leaves out the device",
    "registration-failure": "Registration/GetInfo fails",
    "crash": "the process exits at once (exit code 3)",
    "attach-failure": "gpu-fabric: the attach controller writes the binding failure condition instead of attaching",
}
SLOW_MODES = ("slow-prepare", "slow-unprepare")

# One fault entry (JSON Schema 2020-12): `device` and `claim` narrow it, absent means every device or claim.
FAULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["mode"],
    "properties": {
        "mode": {"enum": sorted(MODES)},
        "device": {"type": "string"},
        "claim": {"type": "string"},
        "delay": {"type": "number", "minimum": 0},
        "devices": {"type": "integer", "minimum": 0},
        "message": {"type": "string"},
    },
    "allOf": [
        {
            "if": {"required": ["mode"], "properties": {"mode": {"enum": list(SLOW_MODES)}}},
            "then": {"required": ["delay"], "properties": {"delay": {"exclusiveMinimum": 0}}},
        },
        {
            "if": {"required": ["mode"], "properties": {"mode": {"const": "reduced-capacity"}}},
            "then": {"required": ["devices"]},
        },
    ],
}
