"""The `gpu-partitions` device profile: physical GPUs published as partitions that share counters.

Each physical device `gpu-<i>` of the node's pool has one counter set, `gpu-<i>-counters`, published in a slice of
the same pool that lists shared counters only (the API allows one of `devices` and `sharedCounters` per slice):

- `memory`: the device's 16Gi;
- `slot-0` .. `slot-3`: one per quarter of the device's compute, so that partitions that sit on the same part of
  the device never fit together (the way partitioning drivers model placement, not only amounts).

Its devices consume from that set: the whole-device entry `gpu-<i>` consumes every counter; `gpu-<i>-half-<j>`
(j = 0, 1) consumes 8Gi and slots 2j, 2j+1; `gpu-<i>-quarter-<k>` (k = 0..3) consumes 4Gi and slot k. Seven devices
per GPU, of which at most four (the quarters) can be allocated at once; the scheduler enforces it from the counters.

A three-level shape (whole, halves, quarters) is the smallest in which partitions of different sizes overlap, as
MIG-style profiles do, while a claim can still ask for more than one device's worth of them.
"""

from __future__ import annotations

from typing import Any

from fake_dra import devices
from fake_dra.broken import BrokenMode
from fake_dra.config import DriverConfig

Manifest = dict[str, Any]
# The memory of one physical device, in GiB, and the parts its compute splits into (quarters).
DEVICE_MEMORY_GIB = 16
SLOTS = 4
# (kind, slots per partition): each kind covers the device's slots in equal consecutive runs.
PARTITION_KINDS = (("half", 2), ("quarter", 1))
# The PARTITIONS_OVERSUBSCRIBE_COUNTERS mutant publishes the memory left after a reservation of its own as the
# counter set, while its partitions consume their nominal sizes.
RESERVED_MEMORY_GIB = 1
# Most counter sets one ResourceSlice may list: ResourceSliceMaxCounterSets, k8s.io/api v0.37.2
# resource/v1/types.go:356. A larger pool spreads its counter sets over several slices.
MAX_COUNTER_SETS_PER_SLICE = 8


def counter_set_name(index: int) -> str:
    """The counter set of physical device `index`."""
    return f"gpu-{index}-counters"


def slot_counter(slot: int) -> str:
    """The counter that stands for one quarter of a device's compute."""
    return f"slot-{slot}"


def _consumption(memory_gib: int, slots: range) -> dict[str, dict[str, str]]:
    return {"memory": {"value": f"{memory_gib}Gi"}, **{slot_counter(s): {"value": "1"} for s in slots}}


def counter_set(config: DriverConfig, index: int) -> Manifest:
    """The counters physical device `index` has: its memory and one counter per slot."""
    memory = DEVICE_MEMORY_GIB
    if config.is_broken(BrokenMode.PARTITIONS_OVERSUBSCRIBE_COUNTERS):
        memory -= RESERVED_MEMORY_GIB  # the bug: the set holds less than its partitions consume
    return {"name": counter_set_name(index), "counters": _consumption(memory, range(SLOTS))}


def _entry(config: DriverConfig, index: int, name: str, kind: str, slots: range) -> Manifest:
    memory = DEVICE_MEMORY_GIB * len(slots) // SLOTS
    return {
        "name": name,
        "attributes": {
            "model": {"string": "FakeGPU-9000"},
            "index": {"int": index},
            "uuid": {"string": f"{config.node_name}-{name}"},
            "partition": {"string": kind},
            "driverVersion": {"version": config.driver_version},
            **({"firmware": {"string": f"fw-{config.major}"}} if config.major >= 2 else {}),
        },
        "capacity": {"memory": {"value": f"{memory}Gi"}},
        "consumesCounters": [{"counterSet": counter_set_name(index), "counters": _consumption(memory, slots)}],
    }


def physical_device(config: DriverConfig, index: int) -> list[Manifest]:
    """Every device entry of physical device `index`: the whole device first, then its halves and quarters."""
    entries = [_entry(config, index, f"gpu-{index}", "whole", range(SLOTS))]
    for kind, width in PARTITION_KINDS:
        entries += [
            _entry(config, index, f"gpu-{index}-{kind}-{part}", kind, range(part * width, (part + 1) * width))
            for part in range(SLOTS // width)
        ]
    return entries


def device_names(config: DriverConfig) -> list[str]:
    """Every device this driver publishes on its node (whole devices and partitions), in publishing order."""
    return [entry["name"] for index in range(config.devices) for entry in physical_device(config, index)]


def _chunks(items: list[Manifest], size: int) -> list[list[Manifest]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


def resource_slices(
    config: DriverConfig,
    generation: int,
    *,
    unavailable: set[str],
    published: int,
    informational: frozenset[str] | set[str] = frozenset(),
) -> list[Manifest]:
    """The node's pool with the first `published` physical devices: device slices, then counter slices.

    Devices that consume counters lower the per-slice limit to 64 (ResourceSliceMaxDevicesWithAdvancedFeatures);
    counter sets go 8 to a slice. Every slice carries the pool's name, generation and resourceSliceCount, which
    counts both kinds. A pool without devices is one empty device slice, as for the plain profiles.
    """
    count = max(0, min(published, config.devices))
    listed = [entry for index in range(count) for entry in physical_device(config, index)]
    for device in listed:
        taints = devices.taints_for(device["name"], unavailable, informational)
        if taints:
            device["taints"] = taints
    bodies: list[Manifest] = [
        {"devices": chunk} for chunk in _chunks(listed, devices.MAX_TAINTED_DEVICES_PER_SLICE)
    ] or [{"devices": []}]
    counter_sets = [counter_set(config, index) for index in range(count)]
    bodies += [{"sharedCounters": chunk} for chunk in _chunks(counter_sets, MAX_COUNTER_SETS_PER_SLICE)]
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": devices.slice_name(config, index)},
            "spec": {
                "driver": config.driver_name,
                "nodeName": config.node_name,
                "pool": {"name": config.node_name, "generation": generation, "resourceSliceCount": len(bodies)},
                **body,
            },
        }
        for index, body in enumerate(bodies)
    ]
