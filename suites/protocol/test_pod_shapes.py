"""Pod shapes as the kubelet serves them: which claims it prepares, and which CDI devices each container gets.

The kubelet prepares every claim in a pod's spec.resourceClaims, whether a container references it or not, in one
call per driver. It then hands each container (init containers and restartable sidecars included) the CDI devices
answered for the devices of the claims it references: of the whole claim, or, where a reference names one request,
only of the devices answered under that request's name (k8s.io/kubernetes@v1.37.2 pkg/kubelet/cm/dra/manager.go
GetResources, claiminfo.go cdiDevicesAsList). Each shape here gets its claims allocated by the real scheduler; the
check plays the kubelet: it prepares the pod's claims in one call, checks each device's request names against the
allocation, works out each container's CDI devices as the kubelet would, and reads their container edits from the
CDI dir: what they set up must be exactly the devices of that container's requests.

What the edits "set up" is read two ways, so that drivers whose edits name no device are judged too: a published
device is set up when the edits name it (its name, or a string attribute value no other device has); a device of the
pod is set up when the edits carry an entry (env, device node, mount) that only its own CDI devices carry among the
pod's other requests. A shape whose devices neither way shows is not applicable for the container part, saying why.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from kubernetes import client

from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API, Builder, ClaimUse
from dra_conformance.kube.pods import describe_pod
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim
from dra_conformance.kubelet.client import CallResult, ClaimAnswer
from dra_conformance.kubelet.obligations import check_prepare_answer, check_unprepare
from dra_conformance.kubelet.role import CallOutcome, KubeletRole
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

from .cdi_specs import CdiDevice, cdi_dir_of, read_specs
from .node_claims import claims_that_fit
from .pod_shapes import SHAPES, Shape, claim_spec
from .published import identifiers, published_devices

pytestmark = pytest.mark.usefixtures("driver_sockets")

# A published device or a device of the pod: (pool, device name).
DeviceKey = tuple[str, str]


@dataclass(frozen=True)
class AnsweredDevice:
    """One device of the pod: the claim and request it was allocated for, and what the prepare answered for it."""

    claim: str  # the pod's name for the claim (spec.resourceClaims[].name)
    request: str  # the request the scheduler allocated it for
    key: DeviceKey
    request_names: tuple[str, ...]
    cdi_ids: tuple[str, ...]

    def handed_for(self, claim: str, request: str) -> bool:
        """Whether the kubelet hands this device's CDI devices to a reference to `request` of `claim` ("" = all)."""
        return claim == self.claim and (not request or not self.request_names or request in self.request_names)

    def allocated_for(self, claim: str, request: str) -> bool:
        """Whether the scheduler allocated this device for `request` of `claim` ("" = any request of it)."""
        return claim == self.claim and (not request or request == self.request)


def _allocate_pod(
    shape: Shape,
    tracker: ResourceTracker,
    build: Builder,
    api_client: client.ApiClient,
    device_class: str,
    timeouts: Timeouts,
) -> tuple[str, dict[str, AllocatedClaim]]:
    """Create the shape's claims and pod; once the pod is bound, its name and claims by the pod's names for them."""
    names = {}
    for pod_name, requests in shape.claims:
        names[pod_name] = tracker.create(build.claim_from_spec(claim_spec(requests, device_class)))["metadata"]["name"]
    uses = [ClaimUse(pod_name, claim=claim) for pod_name, claim in names.items()]
    pod = tracker.create(build.held(build.pod_of_containers(uses, list(shape.containers))))
    pod_name = pod["metadata"]["name"]
    bound = waits.until(
        lambda: client.CoreV1Api(api_client).read_namespaced_pod(pod_name, build.namespace),
        lambda p: bool(p.spec.node_name),
        timeout=timeouts.pod_scheduled,
        what=f"pod {pod_name} ({shape}) bound to a node",
        describe=describe_pod,
    )
    claims = {
        name: AllocatedClaim(
            tracker.get(RESOURCE_API, "ResourceClaim", claim, build.namespace), pod, bound.spec.node_name
        )
        for name, claim in names.items()
    }
    return pod_name, claims


def _one_claim(outcome: CallOutcome, claim: AllocatedClaim) -> CallOutcome:
    """The outcome of a call for several claims as one for `claim` alone (the per-claim checks take that form)."""
    if outcome.result is None:
        return outcome
    answers: dict[str, ClaimAnswer] = {}
    if claim.ref.uid in outcome.result.claims:
        answers[claim.ref.uid] = outcome.result.claims[claim.ref.uid]
    return CallOutcome(CallResult(answers, outcome.result.latency))


def _answered_devices(pod_claim: str, claim: AllocatedClaim, answer: ClaimAnswer, driver: str) -> list[AnsweredDevice]:
    # A subrequest's device belongs to its request ("<request>/<subrequest>").
    allocated_for = {
        (r["pool"], r["device"], r.get("shareID") or ""): str(r["request"]).split("/", 1)[0]
        for r in claim.results
        if r["driver"] == driver
    }
    return [
        AnsweredDevice(
            pod_claim,
            allocated_for.get((d["poolName"], d["deviceName"], d.get("shareID") or ""), ""),
            (d["poolName"], d["deviceName"]),
            tuple(d.get("requestNames") or ()),
            tuple(str(cdi) for cdi in d.get("cdiDeviceIDs") or ()),
        )
        for d in answer.devices
    ]


def _entries(ids: set[str], defined: dict[str, CdiDevice]) -> set[str]:
    """The edit entries the CDI devices `ids` apply: env entries, device node paths, mounts."""
    found: set[str] = set()
    for cdi in ids & defined.keys():
        edits = defined[cdi].edits
        found |= {f"env {entry}" for entry in edits.get("env") or []}
        found |= {f"device node {node.get('path', '')}" for node in edits.get("deviceNodes") or []}
        found |= {f"mount {m.get('hostPath', '')}:{m.get('containerPath', '')}" for m in edits.get("mounts") or []}
    return found


@dataclass(frozen=True)
class View:
    """What the container edits of a set of CDI devices set up, read as the module docstring says."""

    defined: dict[str, CdiDevice]
    published: dict[DeviceKey, set[str]]  # what names each published device of the node
    pod_devices: list[AnsweredDevice]

    def own_entries(self, device: AnsweredDevice) -> set[str]:
        """The edit entries of `device`'s CDI devices that no device of another request or claim of the pod has."""
        others = {
            cdi
            for other in self.pod_devices
            if (other.claim, other.request) != (device.claim, device.request)
            for cdi in other.cdi_ids
        }
        return _entries(set(device.cdi_ids), self.defined) - _entries(others, self.defined)

    def set_up(self, ids: set[str]) -> set[DeviceKey]:
        """The devices the edits of the CDI devices `ids` set up."""
        words = set().union(*(self.defined[cdi].words() for cdi in ids & self.defined.keys()))
        entries = _entries(ids, self.defined)
        named = {key for key, names in self.published.items() if names & words}
        return named | {d.key for d in self.pod_devices if self.own_entries(d) & entries}

    def shows(self, device: AnsweredDevice) -> bool:
        """Whether the edits of the device's own CDI devices show it set up (else it is left out of the check)."""
        return device.key in self.set_up(set(device.cdi_ids))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_each_container_gets_the_cdi_devices_of_exactly_its_own_requests(
    shape: Shape,
    held_nodes: None,
    tracker: ResourceTracker,
    build: Builder,
    api_client: client.ApiClient,
    device_class: str,
    timeouts: Timeouts,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    obligations: Obligations,
) -> None:
    """The pod's claims prepared in one call; request names match the allocation; each container sees its devices."""
    claims_that_fit(driver_under_test, 1, f"a pod of {shape.devices}", devices=shape.devices)
    driver = driver_under_test.name
    pod, claims = _allocate_pod(shape, tracker, build, api_client, device_class, timeouts)
    node = next(iter(claims.values())).node
    endpoint = driver_under_test.endpoints[node]
    refs = [claim.ref for claim in claims.values()]
    where = f"pod {pod} ({shape}) on {node}, claims {[(name, c.ref.name) for name, c in claims.items()]}"
    # As the kubelet does: every claim of the pod, referenced by a container or not, in one call for the driver.
    outcome = kubelet.prepare_outcome(endpoint, refs)
    keys = sorted(outcome.keys())
    obligations.check(
        "protocol.prepare-answers-exactly-the-requested-claims",
        outcome.error is not None or keys == sorted(ref.uid for ref in refs),
        f"answered {keys} for {sorted(ref.uid for ref in refs)}",
        f"prepare of every claim of {where}",
    )
    pod_devices: list[AnsweredDevice] = []
    for pod_claim, claim in claims.items():
        referenced = any(name == pod_claim for c in shape.containers for name, _ in c.claims)
        call = (
            f"prepare of the pod's claims ({shape}; {pod_claim}{'' if referenced else ', referenced by no container'})"
        )
        answer = check_prepare_answer(obligations, claim, driver, _one_claim(outcome, claim), call)
        pod_devices += _answered_devices(pod_claim, claim, answer, driver)
    requests = dict(shape.claims)
    for device in pod_devices:
        # No request names: the device is associated with every request of the claim (api.proto).
        named = sorted(set(device.request_names or requests[device.claim]))
        obligations.check(
            "protocol.answer-request-names-match-allocation",
            named == [device.request],
            f"{device.key[0]}/{device.key[1]} of claim {device.claim} answered under requests "
            f"{list(device.request_names)}, allocated for {device.request!r}",
            where,
        )
    # Read while the claims are prepared: unprepare removes their specs.
    endpoint_cdi = endpoint.cdi_dir
    defined = read_specs(endpoint_cdi) if endpoint_cdi is not None else {}
    pools = published_devices(api_client, driver, node)
    published = {(pool, name): names for pool, devices in pools.items() for name, names in identifiers(devices).items()}
    for claim in claims.values():
        check_unprepare(obligations, kubelet, endpoint, claim.ref, "protocol.unprepare-succeeds", "unprepare")
    cdi_dir_of(endpoint)  # not applicable, saying why, where the CDI dir is not readable here
    view = View(defined, published, pod_devices)
    shown = [device for device in pod_devices if view.shows(device)]
    if not shown:
        pytest.skip(
            "not applicable: the container edits of the CDI devices answered show none of the pod's devices (no "
            "published name or unique attribute value, no edit entry of their own): "
            f"{[(d.key, d.cdi_ids) for d in pod_devices]}"
        )
    for container in shape.containers:
        handed = {
            cdi
            for claim, request in container.claims
            for device in pod_devices
            if device.handed_for(claim, request)
            for cdi in device.cdi_ids
        }
        mine = {
            d.key for d in pod_devices if any(d.allocated_for(claim, request) for claim, request in container.claims)
        }
        expected = {d.key for d in shown if d.key in mine}
        seen = view.set_up(handed)
        obligations.check(
            "protocol.container-cdi-edits-set-up-only-its-requests-devices",
            expected <= seen and seen <= mine,
            f"container {container.name} referencing {list(container.claims) or 'no claim'} is handed "
            f"{sorted(handed)}, whose edits set up {sorted(seen)}; allocated for its references: {sorted(mine)} "
            f"(answered: {[(d.claim, d.key, list(d.request_names), list(d.cdi_ids)) for d in pod_devices]})",
            f"{where}, CDI dir {endpoint_cdi}",
        )
