"""A pod force-deleted while its driver is down on a real node: its claim is unprepared once the driver is back.

A force deletion (grace period 0) removes the pod from the API at once; the kubelet still stops its containers and
must still have the driver unprepare the claim, which it cannot while the driver is down. It keeps the claim in its
cache and retries from its DRA manager's reconcile loop, every 60 s, for every claim of a pod no longer active,
until the driver's NodeUnprepareResources succeeds (k8s.io/kubernetes v1.37.2 pkg/kubelet/cm/dra/manager.go:61 and
:227); the kubelet cannot tell a driver gone for good from one briefly away and assumes the latter (k/k#129402).
Upstream's e2e suite checks the unprepare of a force-deleted pod; this one does it with the driver down, as a node
drain or a driver upgrade meets it (issue 44, item 5).

The claim comes from a template, so it goes with its pod: the driver is asked to unprepare a claim the API no longer
has, after a restart, from whatever it recorded before the stop. Judged once the driver is back, within one reconcile
period: the kubelet no longer counts the claim (`dra_resource_claims_in_use` no higher than the driver's claims still
reserved on the node, `kubelet.claims_in_use`), and where the driver wrote CDI specs naming the claim they are gone
once the kubelet's count fell.

Runs where the `disruption` fixture stops the driver on a real node (installed as DaemonSet pods on two or more);
elsewhere not applicable. Obligation: `kubelet.force-deleted-pod-claim-unprepared-after-driver-returns`
(`dra_conformance/model/registry/kubelet.yaml`).
"""

from __future__ import annotations

import allure
import pytest
from kubernetes import client

from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.real_node import RealNodeTarget, await_ready, pod_on
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API, Builder, ClaimUse
from dra_conformance.kube.tracker import ResourceTracker, TrackedObject
from dra_conformance.kubelet import claims_in_use, dra_metrics
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

# The real node is one per machine and every kubelet-mode check leases it in turn.
pytestmark = pytest.mark.xdist_group("real-node")

# The kubelet retries the unprepare of a gone pod's claims from its reconcile loop every 60 s
# (defaultReconcilePeriod, pkg/kubelet/cm/dra/manager.go:61): one period after the driver is back, plus 30 s for the
# call, the kubelet's cache and a scrape through the API server on a busy machine.
UNPREPARE_AFTER_RETURN_DEADLINE = 90.0
# The kubelet counts the claim until the driver's NodeUnprepareResources answered: a spec still naming the claim a few
# seconds after the count fell was left behind, not on its way out.
SPEC_REMOVAL_GRACE = 5.0


def test_a_pod_force_deleted_while_the_driver_is_down_has_its_claim_unprepared_once_the_driver_is_back(
    disrupted_real_node: RealNodeTarget,
    disruption: Disruption,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    driver, node = build.driver, disrupted_real_node.name
    reading, why = dra_metrics.read(api_client, node)
    if reading is None:
        pytest.skip(f"not applicable: the kubelet's dra_resource_claims_in_use cannot be read: {why}")
    device_class = tracker.create(build.device_class())["metadata"]["name"]
    template = tracker.create(build.claim_template(device_class))["metadata"]["name"]
    created = tracker.create(pod_on(build, disrupted_real_node, [ClaimUse("devices", template=template)]))
    name = created["metadata"]["name"]
    pod = await_ready(api_client, namespace, name, timeouts.pod_running, f"pod {name} Ready")
    claim_name = pod.status.resource_claim_statuses[0].resource_claim_name
    claim = f"{namespace}/{claim_name}"
    uid = tracker.get(RESOURCE_API, "ResourceClaim", claim_name, namespace)["metadata"]["uid"]
    cdi = disrupted_real_node.cdi_specs
    specs_before = sorted(cdi.naming(uid)) if cdi is not None else []
    where = f"pod {name} on {node}, claim {claim} (uid {uid}), driver {driver}"
    running = claims_in_use.await_settled(
        api_client,
        driver,
        node,
        lambda seen: seen.gauge is not None and seen.gauge >= 1 and claim in seen.reserved,
        f"dra_resource_claims_in_use of {driver} on {node} counting claim {claim} of the running pod {name}",
    )
    if running.gauge is None or running.gauge < 1:
        pytest.skip(f"not applicable: the kubelet never counted the running pod's claim ({running})")
    with allure.step(f"stop the driver on {node}"):
        if disruption.terminate() is None:
            disruption.kill()
    try:
        with allure.step(f"force-delete pod {name} (grace period 0) while the driver is down"):
            tracker.delete(TrackedObject("v1", "Pod", name, namespace), grace_seconds=0)
        held = claims_in_use.read(api_client, driver, node)
    finally:
        with allure.step(f"start the driver on {node} again"):
            disruption.start()  # waits for its registration and a complete pool
    if held.gauge is not None and held.gauge <= len(held.reserved):
        # The kubelet let the claim go while no driver could unprepare it: the kubelet's doing, not the driver's.
        pytest.skip(f"not applicable: the kubelet stopped counting the claim while the driver was down ({held})")
    after = claims_in_use.await_settled(
        api_client,
        driver,
        node,
        lambda seen: seen.no_more_than_reserved() and claim not in seen.reserved,
        f"dra_resource_claims_in_use of {driver} on {node} no higher than its claims still reserved there, claim "
        f"{claim} unprepared",
        deadline=UNPREPARE_AFTER_RETURN_DEADLINE,
    )
    specs_left: list[str] = []
    if cdi is not None and specs_before:
        try:
            specs_left = waits.until(
                lambda: sorted(cdi.naming(uid)),
                lambda left: not left,
                timeout=SPEC_REMOVAL_GRACE,
                what=f"CDI specs naming claim {uid} removed on {node}",
                describe=str,
            )
        except WaitTimeout:
            specs_left = sorted(cdi.naming(uid))
    seen = (
        f"while the pod ran: {running}\nwhile the driver was down, the pod force-deleted: {held}\n"
        f"within {UNPREPARE_AFTER_RETURN_DEADLINE:g}s of the driver's return: {after}\n"
        f"CDI specs naming the claim: before {specs_before}, left {specs_left}"
    )
    allure.attach(seen, "claim of a pod force-deleted while the driver was down", allure.attachment_type.TEXT)
    obligations.check(
        "kubelet.force-deleted-pod-claim-unprepared-after-driver-returns",
        after.no_more_than_reserved() and claim not in after.reserved and not specs_left,
        seen.replace("\n", "; "),
        where,
    )
