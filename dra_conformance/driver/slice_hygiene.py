"""What makes a driver's ResourceSlices well formed, judged on the slices as the API returns them (JSON dicts).

Pure functions, no API calls: the slices suite lists or watches the slices and asks these what is wrong.

- size limits of one slice (k8s.io/api v0.37.2 resource/v1/types.go:341-365, names kept as upstream spells them);
- pools as a consumer sees them: the slices of a pool's highest generation, complete when there are as many as
  their resourceSliceCount says (types.go:330-333), and the slices of older generations left behind;
- device names unique within a pool across its slices, attribute names unique once qualified by the driver's domain;
- the owner of a slice bound to a node;
- what a pool says apart from its generation, and the writes between two lists of its slices (a restart that
  changes nothing writes none).
"""

from __future__ import annotations

import copy
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dra_conformance.driver.slice_history import SliceVersion, replay

Slice = dict[str, Any]

# k8s.io/api v0.37.2 resource/v1/types.go:341-365; the API server validates the same limits on every write
# (k8s.io/kubernetes v1.37.2 pkg/apis/resource/validation/validation.go:864-881, 1040, 1096).
RESOURCE_SLICE_MAX_DEVICES = 128  # ResourceSliceMaxDevices
RESOURCE_SLICE_MAX_DEVICES_WITH_ADVANCED_FEATURES = 64  # ResourceSliceMaxDevicesWithAdvancedFeatures
RESOURCE_SLICE_MAX_COUNTER_SETS = 8  # ResourceSliceMaxCounterSets
RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_SET = 32  # ResourceSliceMaxCountersPerCounterSet
RESOURCE_SLICE_MAX_DEVICE_COUNTER_CONSUMPTIONS_PER_DEVICE = 2  # ResourceSliceMaxDeviceCounterConsumptionsPerDevice
# The list-valued fields of a DeviceAttribute (DRAListTypeAttributes): a device using one counts as advanced.
LIST_ATTRIBUTE_FIELDS = ("ints", "bools", "strings", "versions")


def name_of(item: Slice) -> str:
    """The slice's name."""
    return str(item["metadata"]["name"])


def generation_of(item: Slice) -> int:
    """The pool generation the slice carries."""
    return int(item["spec"]["pool"]["generation"])


def pool_of(item: Slice) -> str:
    """The name of the pool the slice belongs to."""
    return str(item["spec"]["pool"]["name"])


def uses_advanced_features(device: dict[str, Any]) -> bool:
    """The device has taints, consumes counters or has a list-type attribute: its slice holds at most 64 devices."""
    lists = any(
        any(field in value for field in LIST_ATTRIBUTE_FIELDS) for value in (device.get("attributes") or {}).values()
    )
    return bool(device.get("taints")) or bool(device.get("consumesCounters")) or lists


def limit_violations(item: Slice) -> list[str]:
    """Each size limit the slice exceeds, named as upstream names it, with the count found."""
    spec = item["spec"]
    devices = spec.get("devices") or []
    problems = []
    advanced = [d["name"] for d in devices if uses_advanced_features(d)]
    if advanced and len(devices) > RESOURCE_SLICE_MAX_DEVICES_WITH_ADVANCED_FEATURES:
        problems.append(
            f"{len(devices)} devices, some with taints, counters or list attributes ({advanced[:3]}...): "
            f"ResourceSliceMaxDevicesWithAdvancedFeatures is {RESOURCE_SLICE_MAX_DEVICES_WITH_ADVANCED_FEATURES}"
        )
    elif len(devices) > RESOURCE_SLICE_MAX_DEVICES:
        problems.append(f"{len(devices)} devices: ResourceSliceMaxDevices is {RESOURCE_SLICE_MAX_DEVICES}")
    counter_sets = spec.get("sharedCounters") or []
    if len(counter_sets) > RESOURCE_SLICE_MAX_COUNTER_SETS:
        problems.append(
            f"{len(counter_sets)} counter sets: ResourceSliceMaxCounterSets is {RESOURCE_SLICE_MAX_COUNTER_SETS}"
        )
    for counter_set in counter_sets:
        counters = counter_set.get("counters") or {}
        if len(counters) > RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_SET:
            problems.append(
                f"counter set {counter_set.get('name')} has {len(counters)} counters: "
                f"ResourceSliceMaxCountersPerCounterSet is {RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_SET}"
            )
    for device in devices:
        consumptions = device.get("consumesCounters") or []
        if len(consumptions) > RESOURCE_SLICE_MAX_DEVICE_COUNTER_CONSUMPTIONS_PER_DEVICE:
            problems.append(
                f"device {device['name']} consumes from {len(consumptions)} counter sets: "
                "ResourceSliceMaxDeviceCounterConsumptionsPerDevice is "
                f"{RESOURCE_SLICE_MAX_DEVICE_COUNTER_CONSUMPTIONS_PER_DEVICE}"
            )
    return [f"slice {name_of(item)}: {problem}" for problem in problems]


@dataclass(frozen=True)
class PoolView:
    """One pool as a consumer sees it: the slices of its highest generation, and those of older ones."""

    name: str
    generation: int
    # Names of the slices at the highest generation, and the resourceSliceCount values they carry.
    current: tuple[str, ...]
    expected: tuple[int, ...]
    # Names of slices at a lower generation, which consumers ignore.
    stale: tuple[str, ...]

    @property
    def complete(self) -> bool:
        """As many slices at the highest generation as each of them says the pool has."""
        return set(self.expected) == {len(self.current)}

    def describe(self) -> str:
        """One phrase for messages."""
        counts = "/".join(str(count) for count in sorted(set(self.expected)))
        stale = f", older generations: {sorted(self.stale)}" if self.stale else ""
        return f"pool {self.name} generation {self.generation}: {len(self.current)} slices of {counts}{stale}"


def pool_views(items: Iterable[Slice]) -> dict[str, PoolView]:
    """The pools of one driver's slices, by pool name."""
    by_pool: dict[str, list[Slice]] = defaultdict(list)
    for item in items:
        by_pool[pool_of(item)].append(item)
    views = {}
    for name, members in by_pool.items():
        generation = max(generation_of(item) for item in members)
        current = [item for item in members if generation_of(item) == generation]
        views[name] = PoolView(
            name=name,
            generation=generation,
            current=tuple(sorted(name_of(item) for item in current)),
            expected=tuple(int(item["spec"]["pool"]["resourceSliceCount"]) for item in current),
            stale=tuple(sorted(name_of(item) for item in members if generation_of(item) < generation)),
        )
    return views


def settled(views: dict[str, PoolView]) -> bool:
    """Every pool complete at its highest generation, with no slice of an older one left."""
    return all(view.complete and not view.stale for view in views.values())


def current_slices(items: Iterable[Slice]) -> dict[str, list[Slice]]:
    """The slices of each pool's highest generation, by pool name."""
    listed = list(items)
    views = pool_views(listed)
    by_pool: dict[str, list[Slice]] = defaultdict(list)
    for item in listed:
        if generation_of(item) == views[pool_of(item)].generation:
            by_pool[pool_of(item)].append(item)
    return dict(by_pool)


def duplicate_device_names(items: Iterable[Slice]) -> list[str]:
    """Each device name listed more than once in a pool at its highest generation, with the slices listing it."""
    problems = []
    for pool, members in sorted(current_slices(items).items()):
        where: dict[str, list[str]] = defaultdict(list)
        for item in members:
            for device in item["spec"].get("devices") or []:
                where[device["name"]].append(name_of(item))
        problems += [
            f"pool {pool}: device {device} in slices {slices}"
            for device, slices in sorted(where.items())
            if len(slices) > 1
        ]
    return problems


def qualified(name: str, driver: str) -> str:
    """An attribute or capacity name with its domain: a name without one is in the driver's domain."""
    return name if "/" in name else f"{driver}/{name}"


def duplicate_attribute_names(device: dict[str, Any], driver: str) -> list[str]:
    """Names of the device's attributes (and of its capacities) that denote the same qualified name twice."""
    problems = []
    for field in ("attributes", "capacity"):
        names = list(device.get(field) or {})
        counts = Counter(qualified(name, driver) for name in names)
        for full, count in sorted(counts.items()):
            if count > 1:
                spelled = sorted(name for name in names if qualified(name, driver) == full)
                problems.append(f"device {device['name']}: {field} {spelled} all name {full}")
    return problems


def owner_problems(item: Slice, node_uid: str | None) -> list[str]:
    """What is wrong with the owner of a slice bound to a node (`node_uid` None: that Node does not exist)."""
    node = item["spec"].get("nodeName")
    if not node:
        return []
    owners = item["metadata"].get("ownerReferences") or []
    nodes = [o for o in owners if o.get("kind") == "Node" and o.get("apiVersion") == "v1"]
    name = name_of(item)
    if not nodes:
        return [f"slice {name} (nodeName {node}) has no Node owner; owners {owners}"]
    if node_uid is None:
        return [f"slice {name}: nodeName {node} names no existing Node"]
    if not any(o.get("name") == node and o.get("uid") == node_uid for o in nodes):
        return [f"slice {name}: Node owners {nodes} are not node {node} (uid {node_uid})"]
    return []


def single_node_selector(item: Slice) -> str | None:
    """The node a slice's nodeSelector pins by name alone (a node-local pool that should set nodeName), if any."""
    selector = item["spec"].get("nodeSelector") or {}
    terms = selector.get("nodeSelectorTerms") or []
    if len(terms) != 1 or terms[0].get("matchExpressions"):
        return None
    fields = terms[0].get("matchFields") or []
    if len(fields) == 1 and fields[0].get("key") == "metadata.name" and fields[0].get("operator") == "In":
        values = fields[0].get("values") or []
        return str(values[0]) if len(values) == 1 else None
    return None


def incomplete_moments(versions: list[SliceVersion]) -> list[str]:
    """Each point of a watched history at which a pool seen before was incomplete or gone, as a consumer sees it.

    The versions are replayed in order (LISTED first, then the watch's events); after every event each pool seen so
    far is judged at its highest generation. A pool is judged from its first complete state on, so a history that
    starts while the pool is still being written says nothing about a republish.
    """
    existing: dict[str, Slice] = {}
    watched: set[str] = set()
    moments = []
    listed = [item for kind, item in versions if kind == "LISTED"]
    events = [(kind, item) for kind, item in versions if kind != "LISTED"]
    for first in listed:
        existing[name_of(first)] = first
    steps: list[tuple[str, Slice | None]] = [("LISTED", None), *events]
    for kind, item in steps:
        if item is not None:
            if kind == "DELETED":
                existing.pop(name_of(item), None)
            else:
                existing[name_of(item)] = item
        views = pool_views(existing.values())
        watched |= {name for name, view in views.items() if view.complete}
        event = "after the initial list" if item is None else f"after {kind} {name_of(item)}"
        for pool in sorted(watched):
            view = views.get(pool)
            if view is None:
                moments.append(f"{event}: pool {pool} has no slice")
            elif not view.complete:
                moments.append(f"{event}: {view.describe()}")
    return moments


def written_behind_older_slices(versions: list[SliceVersion], at: int) -> list[str]:
    """Each slice written from `versions[at]` on at a lower generation than a slice of its pool still unchanged since.

    `versions[:at]` is what was published at that point (a driver's stop, say); a slice of it counts as long as its
    resourceVersion stays the same. A slice rewritten in place at a lower generation is no problem by itself: the API
    allows a reset once every slice of the pool is updated or deleted (k8s.io/api v0.37.2 resource/v1/types.go:318).
    """
    before = replay(versions[:at])
    unchanged = {name: item["metadata"].get("resourceVersion") for name, item in before.items()}
    existing = dict(before)
    problems = []
    for kind, item in versions[at:]:
        name = name_of(item)
        if kind == "DELETED":
            existing.pop(name, None)
            continue
        existing[name] = item
        written = generation_of(item)
        problems += [
            f"{kind} {name} at generation {written} while {other} (generation {generation_of(old)}, unchanged since "
            "before) was still published"
            for other, old in sorted(existing.items())
            if other != name
            and other in unchanged
            and old["metadata"].get("resourceVersion") == unchanged[other]
            and pool_of(old) == pool_of(item)
            and generation_of(old) > written
        ]
    return problems


def pool_content(items: Iterable[Slice]) -> list[str]:
    """What the pools say at their highest generations: each slice's spec, less what a rewrite alone changes.

    One JSON text per slice, sorted, without the generation and without the times the API server gives taints
    written without one (k8s.io/kubernetes v1.37.2 pkg/apis/resource/v1/defaults.go, SetDefaults_DeviceTaint).
    """
    texts = []
    for members in current_slices(items).values():
        for item in members:
            spec = copy.deepcopy(item["spec"])
            spec["pool"].pop("generation", None)
            for device in spec.get("devices") or []:
                for taint in device.get("taints") or []:
                    taint.pop("timeAdded", None)
            texts.append(json.dumps(spec, sort_keys=True))
    return sorted(texts)


def writes_between(before: Iterable[Slice], after: Iterable[Slice]) -> list[str]:
    """The writes between two lists of slices: each one written or added since `before`, or deleted while current.

    Current: of its pool's highest generation in `before`; a slice of an older generation may go unremarked.
    """
    earlier = list(before)
    versions = {name_of(item): item["metadata"]["resourceVersion"] for item in earlier}
    now = {name_of(item): item["metadata"]["resourceVersion"] for item in after}
    written = [
        f"{name} added" if name not in versions else f"{name} rewritten (resourceVersion {versions[name]} -> {rv})"
        for name, rv in sorted(now.items())
        if versions.get(name) != rv
    ]
    kept = sorted(name_of(item) for members in current_slices(earlier).values() for item in members)
    return written + [f"{name} deleted" for name in kept if name not in now]
