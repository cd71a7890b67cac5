"""Faults the suites switch on at runtime, per node (one process per node), device or claim.

A fault is a dict like {"mode": "slow-prepare", "delay": 2.5, "claim": "<uid>"}; `device` and `claim` narrow it,
absent means every device or claim. Setting the list replaces every fault; an empty list restores normal
behaviour. FAULT_SCHEMA is the vocabulary as JSON Schema: the control socket validates with it, and so does the
scenario catalog, which writes faults down ahead of time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import jsonschema

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
# Faults that change what the slice or the health stream says, so setting them republishes.
SLICE_MODES = {"unavailable", "informational-taint", "reduced-capacity"}
SLOW_MODES = {"slow-prepare", "slow-unprepare"}
CRASH_EXIT_CODE = 3

# One fault entry (JSON Schema 2020-12).
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
            "if": {"required": ["mode"], "properties": {"mode": {"enum": sorted(SLOW_MODES)}}},
            "then": {"required": ["delay"], "properties": {"delay": {"exclusiveMinimum": 0}}},
        },
        {
            "if": {"required": ["mode"], "properties": {"mode": {"const": "reduced-capacity"}}},
            "then": {"required": ["devices"]},
        },
    ],
}
_VALIDATOR = jsonschema.Draft202012Validator(FAULT_SCHEMA)


class FaultError(ValueError):
    """A fault description is invalid; the message names the field."""


@dataclass(frozen=True)
class Fault:
    """One active fault."""

    mode: str
    device: str | None = None
    claim: str | None = None
    delay: float = 0.0
    devices: int | None = None
    message: str = "injected fault"

    @classmethod
    def parse(cls, raw: Any) -> Fault:
        """Validate a JSON fault description against FAULT_SCHEMA; the FaultError names the field."""
        error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(raw))
        if error is not None:
            where = ".".join(str(part) for part in error.absolute_path)
            raise FaultError(f"{where or 'fault'}: {error.message}")
        fields = {**raw, "delay": float(raw.get("delay", 0.0))}
        if "devices" in raw:
            fields["devices"] = int(raw["devices"])
        return cls(**fields)

    def to_json(self) -> dict[str, Any]:
        """The fault as JSON, without unset fields."""
        # `devices: 0` is a real setting (publish none); only a zero delay means "not set".
        return {
            key: value for key, value in asdict(self).items() if value is not None and (key, value) != ("delay", 0.0)
        }

    def applies(self, *, claim: str | None = None, devices: Iterable[str] = ()) -> bool:
        """Whether this fault concerns a claim (UID) and/or any of the given devices."""
        if self.claim is not None and self.claim != claim:
            return False
        return self.device is None or self.device in set(devices)


class FaultSet:
    """The active faults of one driver process; thread-safe, and hangs wake up when faults change."""

    def __init__(self) -> None:
        """Start with no faults."""
        self._faults: list[Fault] = []
        self._changed = threading.Condition()

    def replace(self, faults: list[Fault]) -> None:
        """Make `faults` the active set (an empty list restores normal behaviour)."""
        with self._changed:
            self._faults = list(faults)
            self._changed.notify_all()

    def active(self) -> list[Fault]:
        """A copy of the active faults."""
        with self._changed:
            return list(self._faults)

    def find(self, mode: str, *, claim: str | None = None, devices: Iterable[str] = ()) -> Fault | None:
        """The first active fault of `mode` that applies, if any."""
        names = list(devices)
        return next((f for f in self.active() if f.mode == mode and f.applies(claim=claim, devices=names)), None)

    def wait_cleared(self, mode: str, *, claim: str | None, timeout: float) -> bool:
        """Block while a `mode` fault applies to `claim`; False if it still applies after `timeout` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: self._find_locked(mode, claim) is None, timeout=timeout)

    def _find_locked(self, mode: str, claim: str | None) -> Fault | None:
        return next((f for f in self._faults if f.mode == mode and f.applies(claim=claim)), None)

    def unavailable_devices(self, names: Iterable[str]) -> set[str]:
        """Devices an `unavailable` fault covers."""
        names = list(names)
        return {name for name in names if self.find("unavailable", devices=[name])}

    def informational_devices(self, names: Iterable[str]) -> set[str]:
        """Devices an `informational-taint` fault covers."""
        return {name for name in names if self.find("informational-taint", devices=[name])}

    def published_devices(self, default: int) -> int:
        """How many devices the slice should list."""
        reduced = self.find("reduced-capacity")
        return default if reduced is None or reduced.devices is None else reduced.devices
