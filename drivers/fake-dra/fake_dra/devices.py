"""Device profiles and the ResourceSlice a driver publishes for its node."""

from __future__ import annotations

from typing import Any

from fake_dra.config import DriverConfig

Manifest = dict[str, Any]
UNAVAILABLE_TAINT_KEY = "fake-dra.example.com/unavailable"


def device_names(config: DriverConfig) -> list[str]:
    """Names of every device this driver has on its node, in index order."""
    return [f"{config.profile}-{index}" for index in range(config.devices)]


def _device(config: DriverConfig, index: int) -> Manifest:
    if config.profile == "gpu":
        return {
            "name": f"gpu-{index}",
            "attributes": {
                "model": {"string": "FakeGPU-9000"},
                "index": {"int": index},
                "uuid": {"string": f"gpu-{config.node_name}-{index}"},
                "driverVersion": {"version": "1.0.0"},
            },
            "capacity": {"memory": {"value": "16Gi"}},
        }
    return {
        "name": f"nic-{index}",
        "attributes": {
            "interfaceName": {"string": interface_name(index)},
            "index": {"int": index},
            "mac": {"string": mac_address(config.node_name, index)},
        },
        "capacity": {"bandwidth": {"value": "10G"}},
    }


def interface_name(index: int) -> str:
    """Interface name of NIC `index`."""
    return f"fake{index}"


def mac_address(node: str, index: int) -> str:
    """A locally administered MAC, stable per node and index."""
    node_byte = sum(node.encode()) % 256
    return f"02:fa:00:00:{node_byte:02x}:{index:02x}"


def ip_cidr(index: int) -> str:
    """The documentation-range address (RFC 5737) NIC `index` reports, in CIDR form as the API requires."""
    return f"192.0.2.{10 + index}/24"


def resource_slice(config: DriverConfig, generation: int, *, unavailable: set[str], published: int) -> Manifest:
    """The node's pool: the first `published` devices, with `unavailable` ones tainted NoSchedule."""
    devices = []
    for index in range(min(published, config.devices)):
        device = _device(config, index)
        if device["name"] in unavailable:
            device["taints"] = [{"key": UNAVAILABLE_TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
        devices.append(device)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(config)},
        "spec": {
            "driver": config.driver_name,
            "nodeName": config.node_name,
            "pool": {"name": config.node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def slice_name(config: DriverConfig) -> str:
    """One slice per (driver, node)."""
    return f"{config.node_name}-{config.driver_name}"
