"""Masking observed state at the source: what a check records or prints, masked by position before it becomes text.

The sensitive infrastructure metadata a driver reports (`status.devices` carries interface names, IP addresses,
MACs and device IDs) is masked where it sits in the structure, never by what the value looks like, so a driver
whose values have a shape nobody foresaw is masked all the same:

- everything under the `data` of a `status.devices[]` entry (any mapping naming a `device` beside its `data`);
- everything under `networkData`, and the network fields wherever they appear (interfaceName, hardwareAddress,
  ips, macAddress, ipAddress);
- serial-like device attributes (uuid, serial*, deviceId, pci*, mac*), by attribute name, qualified or not
  (`gpu.example.com/uuid`), whether the value is typed (`{"string": ...}`) or bare.

Each masked value becomes its stable token (`token`), the same one `dra_conformance.report.masking` writes when it
rewrites a run's files at the end, so records still correlate. Keys, names and the shape of the structure stay.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

# The fields of networkData (and the names drivers give them as attributes): masked wherever they appear.
NETWORK_FIELDS = re.compile(r"^(interfaceName|hardwareAddress|ips|macAddress|ipAddress)$", re.IGNORECASE)
# Device attributes with serial-like values (the name after the domain of a qualified attribute name).
SERIAL_ATTRIBUTES = re.compile(r"^(uuid|serial\w*|deviceId|device_id|pci\w*|mac\w*)$", re.IGNORECASE)
# The key of an observed mapping whose whole value is masked: networkData.
NETWORK_DATA = "networkData"
# A status.devices[] entry names its device; its `data` is opaque to everyone but the driver, and masked whole.
DEVICE_KEY = "device"
DATA_KEY = "data"


def token(kind: str, value: str) -> str:
    """The stable mask of `value`: kind and a short hash, e.g. `ip-3f2a9c`."""
    return f"{kind}-{hashlib.sha256(value.encode()).hexdigest()[:6]}"


def is_ip(text: str) -> bool:
    """Whether `text` is an IP address, with or without a prefix length."""
    try:
        ipaddress.ip_interface(text)
    except ValueError:
        return False
    return True


def mask_value(value: str) -> str:
    """The token of one sensitive value: `ip-…` for an address, `masked-…` for anything else."""
    return token("ip" if is_ip(value) else "masked", value)


def _sensitive_key(key: object) -> bool:
    name = str(key).rsplit("/", 1)[-1]  # a qualified attribute name: its name after the domain
    return key == NETWORK_DATA or bool(NETWORK_FIELDS.match(name) or SERIAL_ATTRIBUTES.match(name))


def _masked_whole(value: Any) -> Any:
    """Every scalar under `value` replaced by its token; keys, lists, null and booleans kept."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return mask_value(value)
    if isinstance(value, int | float):
        return mask_value(str(value))
    if isinstance(value, Mapping):
        return {key: _masked_whole(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_masked_whole(item) for item in value]
    return mask_value(str(value))


def _walk(value: Any) -> Any:
    if isinstance(value, Mapping):
        device_status = DEVICE_KEY in value and DATA_KEY in value
        return {
            key: _masked_whole(item) if _sensitive_key(key) or (device_status and key == DATA_KEY) else _walk(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        items = [_walk(item) for item in value]
        return items if isinstance(value, list) else tuple(items)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _walk(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    return value


def mask_observed(observed: T) -> T:
    """A copy of `observed` with every sensitive position masked (see the module); `observed` is not changed.

    Mappings, lists, tuples and dataclasses are walked; text is left as it is (a value already quoted inside a
    sentence has no position): pass the structure, and let it become text afterwards.
    """
    masked: T = _walk(observed)
    return masked


@dataclass(frozen=True)
class ObservedMask:
    """The run's choice: mask observed state at the source (the default), or keep it as it is (`--dra-no-mask`)."""

    enabled: bool = True

    def __call__(self, observed: T) -> T:
        """`observed` masked, or as it is when masking is off."""
        return mask_observed(observed) if self.enabled else observed
