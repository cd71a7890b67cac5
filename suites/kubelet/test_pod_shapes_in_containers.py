"""Pod shapes on a real node: the kubelet prepares the pod's claims and each container sees only its own devices.

The kwok-node check (suites/protocol/test_pod_shapes.py) plays the kubelet; here the node's own kubelet prepares
every claim of the pod (one no container references included) and hands each container, init containers and
restartable sidecars included, the CDI devices of the requests it references. Each container prints its environment;
the entries of it that the driver's CDI specs for the pod's claims inject are what the container got from the
driver. Read as in the kwok check, by the devices they name (a device's name, or a string attribute value no other
device of the node has) and the claims they name (by UID), they must name only devices and claims of the container's
own references, and some device of each claim it references, where the specs name that claim's devices and set an
env name for it that they do not also set for the container's other claims: one entry per name survives in a
container, so a container referencing two devices under one env name shows one of them.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml
from kubernetes import client

from dra_conformance.driver.real_node import PRINT_ENV_AND_WAIT, RealNodeTarget, await_ready
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube.builders import RESOURCE_API, Builder, ClaimUse
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

from ..protocol.cdi_specs import SEPARATORS
from ..protocol.pod_shapes import SHAPES, Shape, claim_spec
from ..protocol.published import identifiers, published_devices

# The real node is one per machine and every kubelet-mode check leases it in turn (see test_kubelet_mode.py).
pytestmark = pytest.mark.xdist_group("real-node")

# An init container prints its environment and exits, so that the pod's containers start after it.
PRINT_ENV = ("sh", "-c", "env")
# A device: (pool, device name).
DeviceKey = tuple[str, str]


def _spec_env(text: str, path: str) -> list[str]:
    """Every env entry a CDI spec file's edits inject (the spec's own and its devices')."""
    try:
        spec = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        return []
    if not isinstance(spec, dict):
        return []
    edits = [spec.get("containerEdits") or {}]
    edits += [d.get("containerEdits") or {} for d in spec.get("devices") or [] if isinstance(d, dict)]
    return [str(entry) for edit in edits for entry in edit.get("env") or []]


def _words(entries: set[str]) -> set[str]:
    values = {entry.split("=", 1)[1] for entry in entries if "=" in entry}
    return values | {part for value in values for part in SEPARATORS.split(value) if part}


def _events(api_client: client.ApiClient, namespace: str, pod: str) -> list[str]:
    found = client.CoreV1Api(api_client).list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}")
    return [f"{e.reason}: {e.message}" for e in found.items]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_each_container_of_a_pod_shape_sees_the_devices_of_only_its_own_requests(
    shape: Shape,
    real_node: RealNodeTarget,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    driver_under_test: DriverUnderTest,
    obligations: Obligations,
) -> None:
    per_node = driver_under_test.profile.devices.per_node
    if per_node < shape.devices:  # the node is leased: all its devices are the check's
        pytest.skip(f"not applicable: {per_node} device(s) per node leave no room for a pod of {shape.devices}")
    device_class = tracker.create(build.device_class())["metadata"]["name"]
    names = {
        pod_claim: tracker.create(build.claim_from_spec(claim_spec(requests, device_class)))["metadata"]["name"]
        for pod_claim, requests in shape.claims
    }
    containers = [dataclasses.replace(c, command=PRINT_ENV if c.init else PRINT_ENV_AND_WAIT) for c in shape.containers]
    manifest = build.pod_of_containers(
        [ClaimUse(pod_claim, claim=claim) for pod_claim, claim in names.items()],
        containers,
        node=real_node.name,
        tolerations=real_node.tolerations,
        image=real_node.image,
    )
    pod = tracker.create(manifest)["metadata"]["name"]
    where = f"pod {pod} ({shape}) on {real_node.name}, claims {sorted(names.items())}"
    try:
        await_ready(api_client, namespace, pod, timeouts.pod_running, f"pod {pod} ({shape}) Ready")
        problem = ""
    except WaitTimeout as error:
        problem = f"{error}; events: {_events(api_client, namespace, pod)}"
    obligations.check("kubelet.pod-shape-starts", not problem, problem, where)
    if real_node.cdi_specs is None:
        pytest.skip(f"not applicable: the CDI spec directory of {real_node.name} is not readable from this machine")
    claims = {
        pod_claim: tracker.get(RESOURCE_API, "ResourceClaim", name, namespace) for pod_claim, name in names.items()
    }
    uids = {pod_claim: str(claim["metadata"]["uid"]) for pod_claim, claim in claims.items()}
    allocated: dict[tuple[str, str], set[DeviceKey]] = {}
    for pod_claim, claim in claims.items():
        for result in claim["status"]["allocation"]["devices"]["results"]:
            if result["driver"] == driver_under_test.name:
                request = str(result["request"]).split("/", 1)[0]
                allocated.setdefault((pod_claim, request), set()).add((result["pool"], result["device"]))
    specs = real_node.cdi_specs.read()
    by_claim = {
        pod_claim: {
            entry for path, text in specs.items() if uid in path or uid in text for entry in _spec_env(text, path)
        }
        for pod_claim, uid in uids.items()
    }
    injected = set().union(*by_claim.values())
    pools = published_devices(api_client, driver_under_test.name, real_node.name)
    published = {(pool, name): ids for pool, devices in pools.items() for name, ids in identifiers(devices).items()}
    pod_devices = set().union(*allocated.values()) if allocated else set()
    nameable = {key for key in pod_devices if published.get(key, set()) & _words(injected)}
    named_claims = {pod_claim for pod_claim, uid in uids.items() if uid in _words(injected)}
    if not nameable and not named_claims:
        pytest.skip(
            "not applicable: the environment the driver's CDI specs inject for the pod's claims names none of its "
            f"devices or claims: {sorted(injected)}"
        )
    core = client.CoreV1Api(api_client)
    for container in shape.containers:
        env = set(core.read_namespaced_pod_log(pod, namespace, container=container.name).splitlines())
        got = env & injected
        words = _words(got)
        seen = {key for key, ids in published.items() if ids & words}
        seen_claims = {pod_claim for pod_claim, uid in uids.items() if uid in words}
        referenced = {pod_claim for pod_claim, _ in container.claims}
        mine = {
            key
            for (pod_claim, request), keys in allocated.items()
            for key in keys
            if (pod_claim, "") in container.claims or (pod_claim, request) in container.claims
        }
        # Some device (or the claim) of each claim it references, where the specs name that claim's devices and
        # inject an entry whose name the specs of its other referenced claims do not also set (one value survives).
        missing = sorted(
            pod_claim
            for pod_claim in referenced
            if _own_names(by_claim, pod_claim, referenced)
            and (
                _misses(nameable & _claim_devices(allocated, pod_claim, container.claims), seen)
                or (pod_claim in named_claims and pod_claim not in seen_claims)
            )
        )
        obligations.check(
            "kubelet.container-sees-only-its-requests-devices",
            seen <= mine and seen_claims <= referenced and not missing,
            f"container {container.name} referencing {list(container.claims) or 'no claim'} got {sorted(got)} "
            f"from the driver's CDI specs: devices {sorted(seen)} (of its references: {sorted(mine)}), claims "
            f"{sorted(seen_claims)} (referenced: {sorted(referenced)}), nothing of {missing}; the specs inject "
            f"{sorted(injected)}",
            where,
        )


def _claim_devices(
    allocated: dict[tuple[str, str], set[DeviceKey]], pod_claim: str, references: tuple[tuple[str, str], ...]
) -> set[DeviceKey]:
    """The devices of `pod_claim` that `references` (whole claims or single requests) give a container."""
    return {
        key
        for (claim, request), keys in allocated.items()
        if claim == pod_claim and ((claim, "") in references or (claim, request) in references)
        for key in keys
    }


def _misses(expected: set[DeviceKey], seen: set[DeviceKey]) -> bool:
    """Whether a container that should show one of `expected` (where any can be shown) shows none."""
    return bool(expected) and not expected & seen


def _own_names(by_claim: dict[str, set[str]], pod_claim: str, referenced: set[str]) -> set[str]:
    """The env names the specs of `pod_claim` set that those of the other `referenced` claims do not."""
    others = {entry.split("=", 1)[0] for claim in referenced - {pod_claim} for entry in by_claim[claim]}
    return {entry.split("=", 1)[0] for entry in by_claim[pod_claim]} - others
