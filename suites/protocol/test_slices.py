"""Where the driver's ResourceSlices say its devices are.

A kubelet plugin publishes the devices of the node it runs on: a slice bound to a node (spec.nodeName) offers its
devices to pods scheduled there. A slice bound to a node that does not exist is never cleaned up by any kubelet
(the kubelet wipes only its own node's slices) and says nothing true. Whenever what a pool publishes changes, its
generation changes too: consumers keep only the slices of a pool's highest generation.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from dra_conformance.driver.applicability import require_fault_switches
from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.reference import FakeDriverControl
from dra_conformance.driver.slice_history import SliceHistory, SliceVersion
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.kube.nodes import node_uids
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

# One LIST of the driver's slices the API server answers from its watch cache.
LIST_TIMEOUT = 10.0


def test_driver_binds_its_slices_only_to_nodes_that_exist(
    driver_under_test: DriverUnderTest, api_client: client.ApiClient, obligations: Obligations
) -> None:
    group, version = RESOURCE_API.split("/")
    slices = client.CustomObjectsApi(api_client).list_cluster_custom_object(
        group,
        version,
        "resourceslices",
        field_selector=f"spec.driver={driver_under_test.name}",
        _request_timeout=LIST_TIMEOUT,
    )["items"]
    bound = {item["metadata"]["name"]: item["spec"]["nodeName"] for item in slices if item["spec"].get("nodeName")}
    # Only the nodes the slices name: the cluster's node list would grow with the cluster, not with the driver.
    nodes = set(node_uids(client.CoreV1Api(api_client), bound.values()))
    stray = sorted(f"{name} -> {node}" for name, node in bound.items() if node not in nodes)
    obligations.check(
        "protocol.slices-bound-to-existing-nodes",
        not stray,
        f"slices bound to no existing node: {stray}; of the nodes they name, these exist: {sorted(nodes)}",
        f"driver {driver_under_test.name}",
    )


def _content(item: dict[str, Any]) -> str:
    """What a slice publishes: its devices (attributes, capacity, taints) and shared counters, as comparable text.

    A taint's timeAdded is left out: the API server sets it when the driver does not, on every write.
    """
    spec = item["spec"]
    devices = [
        {**device, "taints": [{k: v for k, v in t.items() if k != "timeAdded"} for t in device.get("taints") or []]}
        for device in spec.get("devices") or []
    ]
    return json.dumps({"devices": devices, "sharedCounters": spec.get("sharedCounters")}, sort_keys=True)


def content_changes(versions: list[SliceVersion]) -> list[tuple[str, int, int]]:
    """(slice, generation before, generation after) for every version of a slice that publishes other content.

    A deleted slice is remembered, so that one written again under its name is compared with what it replaced.
    """
    last: dict[str, tuple[int, str]] = {}
    changes = []
    for kind, item in versions:
        if kind == "DELETED":
            continue
        name, generation, content = item["metadata"]["name"], int(item["spec"]["pool"]["generation"]), _content(item)
        before = last.get(name)
        if before is not None and before[1] != content:
            changes.append((name, before[0], generation))
        last[name] = (generation, content)
    return changes


def test_every_change_of_a_pools_devices_comes_with_a_new_generation(
    disruption: Disruption,
    driver_under_test: DriverUnderTest,
    api_client: client.ApiClient,
    obligations: Obligations,
    timeouts: Timeouts,
) -> None:
    profile = driver_under_test.profile
    require_fault_switches(profile, "changing what a pool publishes on request")
    node = disruption.node
    where = f"slices of {driver_under_test.name} on {node}"
    history = SliceHistory(api_client, driver_under_test.name, node).start()
    control = FakeDriverControl(disruption.endpoint)
    try:
        published = sorted(d["name"] for _, item in history.snapshot() for d in item["spec"].get("devices") or [])
        if not published:
            obligations.fail("protocol.reference-fault-changes-pool-content", "no device published", where)
        device = published[-1]
        # The reference driver taints the device NoSchedule and republishes; clearing the fault republishes again.
        undo = control.set_faults([*control.faults(), {"mode": "unavailable", "device": device}])
        try:
            tainted = waits.until(
                lambda: history.taints_of(device),
                bool,
                timeout=timeouts.taint_observed,
                what=f"device {device} tainted in a watched slice",
                describe=str,
            )
        except WaitTimeout:
            tainted = history.taints_of(device)
        finally:
            undo()
        try:
            waits.until(
                lambda: history.taints_of(device),
                lambda taints: taints == [],
                timeout=timeouts.taint_observed,
                what=f"device {device} untainted in a watched slice",
                describe=str,
            )
        except WaitTimeout:
            pass  # judged on what was seen
    finally:
        history.stop()
    changes = content_changes(history.snapshot())
    seen = [
        f"{kind} {item['metadata']['name']} generation {item['spec']['pool']['generation']}"
        for kind, item in history.snapshot()
    ]
    obligations.check(
        "protocol.reference-fault-changes-pool-content",
        bool(tainted) and bool(changes),
        f"device {device} taints {tainted}; content changes {changes}; versions {seen}; watch error {history.error!r}",
        where,
    )
    for name, before, after in changes:
        observed = f"slice {name}: devices changed from generation {before} to {after}; versions {seen}"
        obligations.check("protocol.pool-content-change-changes-generation", after != before, observed, where)
        obligations.check("protocol.pool-generation-grows-on-content-change", after > before, observed, where)
