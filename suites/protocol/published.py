"""The devices a driver publishes for a node, with their attributes: what node-local evidence is compared with."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kubernetes import client

from dra_conformance.driver.pool import node_pools


def published_devices(api: client.ApiClient, driver: str, node: str) -> dict[str, dict[str, dict[str, Any]]]:
    """Pool -> device name -> device (as the slice lists it), of the highest generation of each pool on `node`."""
    return {name: pool.device_specs for name, pool in node_pools(api, driver, node).items()}


def string_attributes(device: dict[str, Any]) -> dict[str, str]:
    """The device's string attributes, by name without its domain (`<domain>/<name>` -> `<name>`)."""
    return {
        name.rsplit("/", 1)[-1]: str(value["string"])
        for name, value in (device.get("attributes") or {}).items()
        if isinstance(value, dict) and "string" in value
    }


def identifiers(devices: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """Per device of one pool, what names it alone: its name and the string attribute values no other device has."""
    counts = Counter(value for device in devices.values() for value in set(string_attributes(device).values()))
    return {
        name: {name} | {value for value in string_attributes(device).values() if counts[value] == 1}
        for name, device in devices.items()
    }
