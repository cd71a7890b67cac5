"""networkData in status.devices, compared with what the driver's own slice publishes for the device.

The API does not tie the two together: networkData "may be filled by drivers or other components", and its interface
name may be the one configured in the pod (k8s.io/api v0.37.2 resource/v1/types.go:2618-2624). What the check takes
as a mismatch is narrower: networkData naming an interface, hardware address or address that the slice publishes
for another device of the pool, and not for this one (an index or a lookup gone wrong).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from dra_conformance.driver.profile import Capability
from dra_conformance.driver.reference import PrivateDriver
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API, Builder
from dra_conformance.kube.claims import device_statuses
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import allocate
from dra_conformance.kubelet.obligations import allocated_devices, check_prepare_answer, check_unprepare
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

from .node_claims import ClaimsOnOneNode
from .published import published_devices, string_attributes

pytestmark = pytest.mark.usefixtures("driver_sockets")

# Devices of the one claim: two distinct devices, so that an off-by-one mix-up names at least one published device.
CLAIM_DEVICES = 2


def _normalized(value: str) -> str:
    """A value as compared: lower case, an address without its prefix length (192.0.2.5/24 -> 192.0.2.5)."""
    value = value.strip().lower()
    try:
        return str(ipaddress.ip_interface(value).ip)
    except ValueError:
        return value


def network_values(network: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, value) for what networkData names: the interface, the hardware address, each IP."""
    named = [
        ("interfaceName", network.get("interfaceName") or ""),
        ("hardwareAddress", network.get("hardwareAddress") or ""),
    ]
    named += [("ips", ip) for ip in network.get("ips") or []]
    return [(field, value) for field, value in named if value]


def mismatches(
    network: dict[str, Any], device: str, pool: dict[str, dict[str, Any]]
) -> tuple[bool, list[dict[str, Any]]]:
    """(whether any networkData value is one the pool publishes, the values that belong to another device only).

    A problem is a structure, `{<networkData field>: value, "publishedFor": devices}`, never a sentence quoting
    the value: the failure message masks it by its field (`dra_conformance.model.masking`).
    """
    published = {name: {_normalized(v) for v in string_attributes(d).values()} for name, d in pool.items()}
    own = published.get(device, set())
    determinable, problems = False, []
    for field, value in network_values(network):
        compared = _normalized(value)
        owners = sorted(name for name, values in published.items() if compared in values)
        determinable = determinable or bool(owners)
        if owners and compared not in own:
            problems.append({field: value, "publishedFor": owners})
    return determinable, problems


@pytest.mark.capability("statusDevices", "networkData")
def test_declared_network_data_names_what_the_slice_publishes_for_the_device(
    private_driver: Callable[..., PrivateDriver],
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    timeouts: Timeouts,
    claims_on_one_node: Callable[..., ClaimsOnOneNode],
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    obligations: Obligations,
) -> None:
    profile = driver_under_test.profile
    missing = [c.value for c in (Capability.STATUS_DEVICES, Capability.NETWORK_DATA) if not profile.declares(c)]
    if missing:
        pytest.skip(f"not applicable: {profile.source} does not declare {', '.join(missing)}")
    if profile.declares(Capability.REFERENCE_FAULTS):
        # The reference driver writes networkData for the devices of its nic device profile only: a private
        # instance of that profile (with the driver under test's behaviour options) is checked.
        nic = private_driver(profile="nic", devices=CLAIM_DEVICES)
        node, process = next(iter(nic.processes.items()))
        # The test's builder, for the private driver: its name counter is shared, so names stay unique in the namespace.
        nic_build = dataclasses.replace(build, driver=nic.name)
        device_class = tracker.create(nic_build.device_class())["metadata"]["name"]
        claim = allocate(
            tracker, nic_build, api_client, device_class, timeout=timeouts.pod_scheduled, node=node, count=CLAIM_DEVICES
        )
        endpoint, driver = process.endpoint, nic.name
    else:
        allocated = claims_on_one_node(1, minimum=1, devices=CLAIM_DEVICES)
        node, endpoint, claim = allocated.node, allocated.endpoint, allocated.claims[0]
        driver = driver_under_test.name
    check_prepare_answer(obligations, claim, driver, kubelet.prepare_outcome(endpoint, [claim.ref]), "prepare")
    meta = claim.claim["metadata"]
    expected = allocated_devices(claim, driver)

    def mine() -> list[dict[str, Any]]:
        entries = device_statuses(tracker.get(RESOURCE_API, "ResourceClaim", meta["name"], meta["namespace"]))
        return [e for e in entries if e["driver"] == driver]

    # Written during or after prepare, by the driver or another component: judged once every device has its entry.
    try:
        entries = waits.until(
            mine,
            lambda now: sorted((e["pool"], e["device"]) for e in now if e.get("networkData")) == expected,
            timeout=timeouts.status_written,
            what=f"networkData of {claim.ref.name} for {expected}",
            describe=str,
        )
    except WaitTimeout:
        entries = mine()
    networked = [e for e in entries if e.get("networkData")]
    pools = published_devices(api_client, driver, node)
    compared = []
    for entry in networked:
        determinable, problems = mismatches(entry["networkData"], entry["device"], pools.get(entry["pool"], {}))
        if not determinable:
            continue
        compared.append(entry["device"])
        obligations.check(
            "protocol.network-data-agrees-with-slice",
            not problems,
            {"networkData": entry["networkData"], "publishedForAnotherDevice": problems},
            f"claim {claim.ref.name} on {node}, device {entry['pool']}/{entry['device']}",
        )
    check_unprepare(obligations, kubelet, endpoint, claim.ref, "protocol.unprepare-succeeds", "unprepare")
    if not networked:
        pytest.skip(f"not applicable: {driver} wrote no networkData for {expected} (its devices here are no NICs)")
    if not compared:
        pytest.skip(
            "not applicable: the slice publishes none of the values networkData names "
            f"({obligations.mask([e['networkData'] for e in networked])}): nothing to compare"
        )
