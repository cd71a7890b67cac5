"""Device profiles and the ResourceSlices a driver publishes for its node's pool."""

from __future__ import annotations

from typing import Any

from fake_dra import fabric, identifiers, shared
from fake_dra.config import PARTITIONS_PROFILE, DriverConfig

Manifest = dict[str, Any]
UNAVAILABLE_TAINT_KEY = "fake-dra.example.com/unavailable"
INFORMATIONAL_TAINT_KEY = "fake-dra.example.com/informational"
# Most devices one ResourceSlice may list, and the lower limit once any of them has taints (the `unavailable`
# fault taints devices): ResourceSliceMaxDevices and ResourceSliceMaxDevicesWithAdvancedFeatures in k8s.io/api
# v0.37.2 resource/v1/types.go:341-348, enforced per slice by the API server (k8s.io/kubernetes v1.37.2
# pkg/apis/resource/validation/validation.go:864-867). A larger pool is split over several slices.
MAX_DEVICES_PER_SLICE = 128
MAX_TAINTED_DEVICES_PER_SLICE = 64


def device_names(config: DriverConfig) -> list[str]:
    """Names of every device this driver has on its node, in index order."""
    if config.profile == PARTITIONS_PROFILE:
        from fake_dra import partitions  # which imports this module

        return partitions.device_names(config)
    return [f"{config.profile}-{index}" for index in range(config.devices)]


def _device(config: DriverConfig, index: int) -> Manifest:
    if config.profile == shared.PROFILE:
        return shared.shared_device(config, index)
    if config.profile == fabric.PROFILE:
        return fabric.device(config, index)
    if config.profile == "gpu":
        return {
            "name": f"gpu-{index}",
            "attributes": {
                "model": {"string": "FakeGPU-9000"},
                "index": {"int": index},
                "uuid": {"string": identifiers.uuid(config.id_format, "gpu", config.node_name, index)},
                "driverVersion": {"version": config.driver_version},
                **({"firmware": {"string": f"fw-{config.major}"}} if config.major >= 2 else {}),
                **_serial_attributes(config, index),
            },
            "capacity": {"memory": {"value": "16Gi"}},
        }
    return {
        "name": f"nic-{index}",
        "attributes": {
            "interfaceName": {"string": interface_name(config, index)},
            "index": {"int": index},
            "mac": {"string": hardware_address(config, index)},
            **_serial_attributes(config, index),
        },
        "capacity": {"bandwidth": {"value": "10G"}},
    }


def _serial_attributes(config: DriverConfig, index: int) -> Manifest:
    """The `words` format's extra identifiers: a serial number (and a UUID for NICs, which have none otherwise)."""
    if config.id_format != identifiers.WORDS:
        return {}
    extra = {"serialNumber": {"string": identifiers.serial(config.node_name, index)}}
    if config.profile == "nic":
        extra["uuid"] = {"string": identifiers.uuid(config.id_format, "nic", config.node_name, index)}
    return extra


def device_data(config: DriverConfig, device: str) -> Manifest:
    """What status.devices[].data says of a prepared device beyond the reference data: its identifiers (`words`).

    As drivers do that quote the attributes of the device they prepared, in the attribute's typed form.
    """
    if config.id_format != identifiers.WORDS or config.profile not in ("gpu", "nic"):
        return {}
    index = int(device.rsplit("-", 1)[1])
    return {
        "uuid": {"string": identifiers.uuid(config.id_format, config.profile, config.node_name, index)},
        "serialNumber": identifiers.serial(config.node_name, index),
    }


def interface_name(config: DriverConfig, index: int) -> str:
    """Interface name of NIC `index`."""
    return identifiers.interface_name(config.id_format, config.node_name, index)


def hardware_address(config: DriverConfig, index: int) -> str:
    """Hardware address of NIC `index` (a locally administered MAC in the reference format)."""
    return identifiers.hardware_address(config.id_format, config.node_name, index)


def ip_cidr(config: DriverConfig, index: int) -> str:
    """The documentation-range address NIC `index` reports, in CIDR form as the API requires."""
    return identifiers.ip_cidr(config.id_format, index)


def resource_slices(
    config: DriverConfig,
    generation: int,
    *,
    unavailable: set[str],
    published: int,
    informational: frozenset[str] | set[str] = frozenset(),
) -> list[Manifest]:
    """The node's pool: the first `published` devices, split into slices.

    `unavailable` devices are tainted NoSchedule, `informational` ones with effect None.

    Every slice carries the same pool name, generation and resourceSliceCount, so the pool is complete once all of
    them are written. A pool without devices is still one (empty) slice.
    """
    if config.profile == PARTITIONS_PROFILE:
        from fake_dra import partitions  # which imports this module

        return partitions.resource_slices(
            config, generation, unavailable=unavailable, published=published, informational=informational
        )
    listed = []
    for index in range(max(0, min(published, config.devices))):
        device = _device(config, index)
        taints = taints_for(device["name"], unavailable, informational)
        if taints:
            device["taints"] = taints
        listed.append(device)
    per_slice = devices_per_slice(tainted=any("taints" in device for device in listed))
    chunks = [listed[start : start + per_slice] for start in range(0, len(listed), per_slice)] or [[]]
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": slice_name(config, index)},
            "spec": {
                "driver": config.driver_name,
                "nodeName": config.node_name,
                "pool": {"name": config.node_name, "generation": generation, "resourceSliceCount": len(chunks)},
                "devices": chunk,
            },
        }
        for index, chunk in enumerate(chunks)
    ]


def taints_for(device: str, unavailable: set[str], informational: frozenset[str] | set[str]) -> list[Manifest]:
    """The taints of `device` in its slice: NoSchedule while unavailable, effect None while informational."""
    taints = []
    if device in unavailable:
        taints.append({"key": UNAVAILABLE_TAINT_KEY, "value": "true", "effect": "NoSchedule"})
    if device in informational:
        taints.append({"key": INFORMATIONAL_TAINT_KEY, "value": "true", "effect": "None"})
    return taints


def resource_slice(
    config: DriverConfig, generation: int, *, unavailable: set[str], published: int, index: int = 0
) -> Manifest:
    """Slice `index` of the node's pool (see resource_slices); a pool that fits one slice is slice 0 alone."""
    return resource_slices(config, generation, unavailable=unavailable, published=published)[index]


def devices_per_slice(*, tainted: bool) -> int:
    """How many devices one slice holds: the API's limit, the lower one when the pool has tainted devices.

    The lower limit applies per slice to a slice with any tainted device; using it for the whole pool keeps the
    split a plain function of the device count.
    """
    return MAX_TAINTED_DEVICES_PER_SLICE if tainted else MAX_DEVICES_PER_SLICE


def slice_name(config: DriverConfig, index: int) -> str:
    """Slice `index` of the (driver, node) pool: `<node>-<driver>-<index>`."""
    return f"{config.node_name}-{config.driver_name}-{index}"
