"""A seamless rolling update of the driver's DaemonSet while pods with claims keep starting (capability rollingUpdate).

Since kubelet 1.33 two instances of one DRA driver may be registered at once, each through a socket of its own,
and the kubelet uses the newest; a DaemonSet with `maxSurge: 1` then starts the new pod beside the old one and
deletes the old one once the new one is Ready. The check rolls the driver's DaemonSet that way (it sets the update
strategy for the rollout, prints it, and puts the original back), starts pods with claims one after another until
the rollout is over, and samples the node's registration sockets, the old pod and the driver's pool meanwhile.
Pods that ran before the rollout are deleted afterwards, so the new instance unprepares what the old one prepared.
"""

from __future__ import annotations

import datetime
import time

import allure
import pytest
from kubernetes import client

from dra_conformance.driver import rollout
from dra_conformance.driver.pool import node_slices
from dra_conformance.driver.profile import Capability
from dra_conformance.driver.real_node import RealNodeTarget, await_ready, claimed_pod
from dra_conformance.driver.slice_hygiene import pool_content, writes_between
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import Builder
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.layers import failed_prepare_messages
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts
from dra_wire.kubelet_api import KubeletAPI

pytestmark = pytest.mark.xdist_group("real-node")

# Pods with claims that run before the rollout, for the new instance to unprepare; each holds one device.
PODS_BEFORE = 2
# The annotation that changes the pod template, as `kubectl rollout restart` changes its own.
RESTARTED_AT = "dra-conformance.io/restartedAt"


@pytest.mark.capability(Capability.ROLLING_UPDATE.value)
def test_a_rolling_update_with_max_surge_keeps_pods_starting_and_hands_claims_to_the_new_instance(
    real_node: RealNodeTarget,
    driver_under_test: DriverUnderTest,
    kubelet_api: KubeletAPI,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    obligations: Obligations,
    cluster: ClusterInfo,
) -> None:
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    target = rollout.rollout_target(real_node, driver_under_test, core, cluster)
    if isinstance(target, str):
        pytest.skip(f"not applicable: {target}")
    old_pod, daemonset, ds_namespace, registry, where = (
        target.old_pod,
        target.daemonset,
        target.namespace,
        target.registry,
        target.where,
    )

    before = []
    for _ in range(PODS_BEFORE):
        pod, claim = claimed_pod(tracker, build, real_node)
        await_ready(
            api_client, namespace, pod["metadata"]["name"], timeouts.pod_running, "pod before the rollout Ready"
        )
        before.append((pod, claim))
    sampler = rollout.RolloutSampler(registry, core, api_client, driver_under_test.name, real_node.name, old_pod)
    slices_before = node_slices(api_client, driver_under_test.name, real_node.name)
    first = sampler.sample()
    old_sockets = rollout.driver_sockets(kubelet_api, registry, first.sockets, driver_under_test.name)
    obligations.check(
        "kubelet.rolling-update-starts-from-a-registered-instance",
        bool(old_sockets),
        f"no socket in {registry} answers GetInfo for {driver_under_test.name}: {sorted(first.sockets)}",
        where,
    )

    holder = f"rolling update@{real_node.name}"
    with rollout.rolling(apps, ds_namespace, daemonset, holder):
        original = rollout.restore_patch(api_client, apps.read_namespaced_daemon_set(daemonset, ds_namespace))
        restarted_at = datetime.datetime.now(datetime.UTC).isoformat()
        patch = {
            "spec": {
                "updateStrategy": rollout.SURGE_STRATEGY,
                "template": {"metadata": {"annotations": {RESTARTED_AT: restarted_at}}},
            }
        }
        started_pods: list[str] = []
        failures: list[str] = []
        stuck: WaitTimeout | None = None
        with allure.step(f"roll DaemonSet {ds_namespace}/{daemonset}: {patch}; afterwards {original}"):
            sampler.start()
            try:
                apps.patch_namespaced_daemon_set(daemonset, ds_namespace, patch)
                deadline = time.monotonic() + rollout.ROLLOUT_DEADLINE
                done, summary = False, ""
                while not done or sampler.samples[-1].old_pod != "gone":
                    # The new instance listening on the old one's socket name: the rollout cannot end well (its
                    # readiness never passes, or the old instance is cut off), and the samples already show why.
                    if rollout.taken_over(first, old_sockets, list(sampler.samples)):
                        break
                    if time.monotonic() > deadline:
                        # Raised once the samples are judged: a rollout stuck on shared sockets is that obligation's.
                        stuck = WaitTimeout(
                            f"the rollout of DaemonSet {ds_namespace}/{daemonset} on {real_node.name}",
                            rollout.ROLLOUT_DEADLINE,
                            last_observed=f"{summary}; old pod {sampler.samples[-1].old_pod}",
                        )
                        break
                    pod, claim = claimed_pod(tracker, build, real_node)
                    name = pod["metadata"]["name"]
                    started_pods.append(name)
                    try:
                        await_ready(
                            api_client, namespace, name, timeouts.pod_running, f"pod {name} started in the rollout"
                        )
                    except WaitTimeout as error:
                        failures.append(f"{name} did not run: {error}")
                    failed_prepares = failed_prepare_messages(core, namespace, name)
                    if failed_prepares:
                        failures.append(f"{name} had failed prepares: {failed_prepares}")
                    try:
                        tracker.delete(pod)
                        tracker.delete(claim)
                    except WaitTimeout as error:
                        # A pod the rollout left undeletable (the kubelet cannot unprepare its claim): raised once the
                        # samples are judged, which may already show why (the new instance on the old one's socket).
                        stuck = error
                        break
                    done, summary = rollout.rollout_done(apps, ds_namespace, daemonset)
            finally:
                samples = sampler.stop()
                apps.patch_namespaced_daemon_set(daemonset, ds_namespace, original)
        timeline = rollout.timeline(samples, samples[0].at if samples else 0.0)
        overlap = [s for s in samples if old_sockets <= s.sockets and s.sockets - first.sockets]
        report = [
            f"pods with claims started during the rollout: {len(started_pods)}, failed: {len(failures)}",
            f"samples: {len(samples)} every {rollout.SAMPLE_INTERVAL} s; both instances registered in {len(overlap)} "
            f"of them (~{len(overlap) * rollout.SAMPLE_INTERVAL:.1f} s)",
            *timeline,
        ]
        allure.attach("\n".join(report), "rollout timeline", allure.attachment_type.TEXT)
        print("\n".join(report))  # shown with -rP

        taken_over = rollout.taken_over(first, old_sockets, samples)
        obligations.check(
            "kubelet.rolling-update-instances-registered-side-by-side",
            not taken_over,
            f"the new instance re-created the old instance's socket {sorted(old_sockets)} under the same name: "
            f"{taken_over[:3]}; {timeline}",
            where,
        )
        removed_while_running = [s for s in samples if s.old_pod == "running" and not old_sockets <= s.sockets]
        obligations.check(
            "kubelet.rolling-update-leaves-other-instances-sockets",
            not removed_while_running,
            f"the old instance's sockets {sorted(old_sockets)} were gone while its pod ran (not being deleted): "
            f"{timeline}",
            where,
        )
        obligations.check(
            "kubelet.rolling-update-instances-registered-side-by-side",
            bool(overlap),
            f"no sample showed the old sockets {sorted(old_sockets)} and a new socket at once: {timeline}",
            where,
        )
        if stuck is not None:
            raise stuck
        new_sockets = rollout.driver_sockets(
            kubelet_api, registry, sampler.sample().sockets - first.sockets, driver_under_test.name
        )
        obligations.check(
            "kubelet.rolling-update-instances-registered-side-by-side",
            bool(new_sockets) and not new_sockets & old_sockets,
            f"after the rollout the driver answers on {sorted(new_sockets)}; before it on {sorted(old_sockets)}",
            where,
        )
        incomplete = [s for s in samples if not s.pool_complete]
        obligations.check(
            "kubelet.rolling-update-pool-stays-complete",
            not incomplete,
            f"{len(incomplete)} of {len(samples)} samples saw the pool incomplete, first: "
            f"{incomplete[0].pool if incomplete else ''}; {timeline}",
            where,
        )
        # The same release rolled: a pool that says what it said before must not have been written again.
        slices_after = node_slices(api_client, driver_under_test.name, real_node.name)
        if pool_content(slices_after) == pool_content(slices_before):
            writes = writes_between(slices_before, slices_after)
            obligations.check(
                "kubelet.rollout-leaves-unchanged-slices-untouched",
                not writes,
                f"the pool's content unchanged by the rollout, {len(writes)} slice write(s): {writes[:3]}",
                where,
            )
        obligations.check(
            "kubelet.rolling-update-pods-start",
            not failures,
            f"{len(started_pods)} pods started during the rollout, {len(failures)} failed: {failures}",
            where,
        )

        for pod, claim in before:
            left = rollout.claim_left_behind(real_node, tracker, pod, claim)
            obligations.check(
                "kubelet.rolling-update-new-instance-unprepares-old-claims",
                left is None,
                f"prepared by the old instance: {left}",
                where,
            )
        waits.until(
            lambda: rollout.rollout_done(apps, ds_namespace, daemonset),
            lambda outcome: outcome[0],
            timeout=timeouts.pod_running,
            what=f"DaemonSet {ds_namespace}/{daemonset} settled after the rollout",
            describe=lambda outcome: outcome[1],
        )
