"""Releases of the driver rolled on a real node: one that cannot start, and an upgrade from the previous one and back.

Both roll the driver's DaemonSet with a surge and `maxUnavailable: 0` (set for the rollout and put back after, as
the rolling-update check does; `maxSurge: 100%` for the release that cannot start, so its pod fails beside the
old one on the watched node too) while pods with claims keep starting, and sample the node's registration sockets,
the old pod and the driver's pool meanwhile (issue 44, item 4).

- **A release that cannot start.** The pod template is changed into a release whose start fails: the profile's
  `install.cannotStart.args` appended to the driver's container (the reference driver publishes its pool, then gives
  up), or else its program replaced by one that does not exist. The new pod must never be Ready, the old instance
  must keep running and registered and prepare a new pod's claim, and once the template is put back (what
  `kubectl rollout undo` does) the DaemonSet settles with the old instance, which unprepares what it prepared.
- **An upgrade and its rollback.** For a profile naming its previous release (`install.previous`), the DaemonSet
  rolls to that release's pod template, then to the installed one (the upgrade), back to the previous one (the
  rollback), and to the installed one again. A pod with a claim runs across each switch and is deleted after it: the
  release after the switch unprepares what the one before prepared. A switch after which the pool says what it said
  before leaves its slices untouched.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import allure
import pytest
from kubernetes import client

from dra_conformance.driver import rollout
from dra_conformance.driver.pool import node_slices
from dra_conformance.driver.profile import CannotStart, Capability
from dra_conformance.driver.real_node import RealNodeTarget, await_ready, claimed_pod
from dra_conformance.driver.slice_hygiene import pool_content, writes_between
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import TEST_POD_GRACE_SECONDS, Builder, Manifest
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts
from dra_wire.kubelet_api import KubeletAPI

pytestmark = pytest.mark.xdist_group("real-node")

# The failing release's first failed start: its pod scheduled, the image (on the node) started, the driver's start
# run up to where it fails; minutes on a loaded two-core machine.
FAILED_START_DEADLINE = 120.0
# Failed starts of the new release watched before its template is put back: the kubelet restarts the container
# after a 10 s back-off, so the second shows what a retry of the failing release does to the old instance.
FAILED_STARTS_WATCHED = 2
# Shown of a list in a failure message.
SHOWN = 3


def _target(
    real_node: RealNodeTarget, driver: DriverUnderTest, core: client.CoreV1Api, cluster: ClusterInfo
) -> rollout.RolloutTarget:
    found = rollout.rollout_target(real_node, driver, core, cluster)
    if isinstance(found, str):
        pytest.skip(f"not applicable: {found}")
    return found


def _pod_with_claim_runs(
    tracker: ResourceTracker, build: Builder, real_node: RealNodeTarget, api_client: client.ApiClient, timeout: float
) -> tuple[Manifest, Manifest, str | None]:
    """Start a pod with a claim on the node: (pod, claim, why it did not run or None)."""
    pod, claim = claimed_pod(tracker, build, real_node)
    name = pod["metadata"]["name"]
    try:
        await_ready(api_client, pod["metadata"]["namespace"], name, timeout, f"pod {name} with a claim Ready")
    except WaitTimeout as error:
        return pod, claim, str(error)
    return pod, claim, None


@pytest.mark.capability(Capability.ROLLING_UPDATE.value)
def test_a_release_that_cannot_start_leaves_the_old_instance_serving_until_its_template_is_put_back(
    real_node: RealNodeTarget,
    driver_under_test: DriverUnderTest,
    kubelet_api: KubeletAPI,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    timeouts: Timeouts,
    obligations: Obligations,
    cluster: ClusterInfo,
) -> None:
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    target = _target(real_node, driver_under_test, core, cluster)
    install = driver_under_test.profile.install
    spec = install.cannot_start if install is not None else CannotStart()

    pod_before, claim_before, failed = _pod_with_claim_runs(tracker, build, real_node, api_client, timeouts.pod_running)
    if failed is not None:
        pytest.fail(f"precondition: a pod with a claim runs on {real_node.name} before the rollout: {failed}")
    sampler = rollout.RolloutSampler(
        target.registry, core, api_client, driver_under_test.name, real_node.name, target.old_pod
    )
    first = sampler.sample()
    old_sockets = rollout.driver_sockets(kubelet_api, target.registry, first.sockets, driver_under_test.name)
    obligations.check(
        "kubelet.rolling-update-starts-from-a-registered-instance",
        bool(old_sockets),
        f"no socket in {target.registry} answers GetInfo for {driver_under_test.name}: {sorted(first.sockets)}",
        target.where,
    )
    with rollout.rolling(apps, target.namespace, target.daemonset, f"release that cannot start@{real_node.name}"):
        saved = apps.read_namespaced_daemon_set(target.daemonset, target.namespace)
        put_back = rollout.put_back_patch(api_client, saved)
        failing, change = rollout.cannot_start(rollout.template_of(api_client, saved), spec.args, spec.container)
        problems: list[str] = []
        new_pod: rollout.NewPod | None = None
        during: str | None = None
        with allure.step(f"roll {target.daemonset} to a release that cannot start ({change}), then put it back"):
            sampler.start()
            try:
                apps.patch_namespaced_daemon_set(
                    target.daemonset, target.namespace, rollout.switch_patch(failing, rollout.SURGE_EVERYWHERE_STRATEGY)
                )
                new_pod = waits.until(
                    lambda: rollout.new_pod_on(core, target.old_pod, real_node.name),
                    lambda pod: pod is not None and (pod.ready or pod.failed_starts >= 1),
                    timeout=FAILED_START_DEADLINE,
                    what=f"the new release's pod on {real_node.name} failed to start once ({change})",
                    describe=repr,
                )
                if new_pod is not None and not new_pod.ready:
                    _, _, during = _pod_with_claim_runs(tracker, build, real_node, api_client, timeouts.pod_running)
                    new_pod = waits.until(
                        lambda: rollout.new_pod_on(core, target.old_pod, real_node.name),
                        lambda pod: pod is None or pod.ready or pod.failed_starts >= FAILED_STARTS_WATCHED,
                        timeout=FAILED_START_DEADLINE,
                        what=f"failed start {FAILED_STARTS_WATCHED} of the new release's pod on {real_node.name}",
                        describe=repr,
                    )
            finally:
                samples = sampler.stop()
                apps.patch_namespaced_daemon_set(target.daemonset, target.namespace, put_back)
        timeline = rollout.timeline(samples, samples[0].at if samples else 0.0)
        print("\n".join([f"release that cannot start: {change}; its pod: {new_pod}", *timeline]))  # shown with -rP
        allure.attach("\n".join(timeline), "rollout timeline", allure.attachment_type.TEXT)

        if new_pod is not None and new_pod.ready:
            problems.append(f"the release that cannot start ({change}) became Ready: {new_pod}")
        if during is not None:
            problems.append(f"a pod with a claim started while the new release failed did not run: {during}")
        gone = [s for s in samples if s.old_pod != "running"]
        if gone:
            problems.append(f"the old pod was {gone[0].old_pod} +{gone[0].at - samples[0].at:.1f}s into the rollout")
        unregistered = [s for s in samples if not old_sockets <= s.sockets]
        if unregistered:
            problems.append(
                f"the old instance's sockets {sorted(old_sockets)} were gone "
                f"+{unregistered[0].at - samples[0].at:.1f}s into the rollout"
            )
        obligations.check(
            "kubelet.failed-release-leaves-old-instance-serving",
            not problems,
            f"{'; '.join(problems)}; {timeline}",
            target.where,
        )
        try:
            waits.until(
                lambda: rollout.rollout_done(apps, target.namespace, target.daemonset),
                lambda outcome: outcome[0],
                timeout=rollout.ROLLOUT_DEADLINE,
                what=f"DaemonSet {target.namespace}/{target.daemonset} settled with its template put back",
                describe=lambda outcome: outcome[1],
            )
        except WaitTimeout as error:
            obligations.fail("kubelet.failed-release-rolled-back-serves", str(error), target.where)
    _, _, after = _pod_with_claim_runs(tracker, build, real_node, api_client, timeouts.pod_running)
    obligations.check(
        "kubelet.failed-release-rolled-back-serves",
        after is None,
        f"a pod with a claim started once the template was put back did not run: {after}; {timeline}",
        target.where,
    )
    left = rollout.claim_left_behind(real_node, tracker, pod_before, claim_before)
    obligations.check(
        "kubelet.failed-release-rolled-back-serves",
        left is None,
        f"the claim the old instance prepared before the failed rollout: {left}",
        target.where,
    )
    # Judged last: the contract's obligations above say more of a pool that went missing than its gaps do.
    incomplete = [s for s in samples if not s.pool_complete]
    obligations.check(
        "kubelet.rolling-update-pool-stays-complete",
        not incomplete,
        f"{len(incomplete)} of {len(samples)} samples saw the pool incomplete while the release that cannot start "
        f"was tried, first: {incomplete[0].pool if incomplete else ''}; {timeline}",
        target.where,
    )


def _previous_template(cluster: ClusterInfo, target: rollout.RolloutTarget) -> dict[str, Any]:
    """The previous release's pod template for the target's DaemonSet; skips where the profile names none."""
    if not cluster.previous_release:
        pytest.skip(
            "not applicable: no previous release installed beside this one (the profile's install.previous, on a "
            "cluster the local backend builds)"
        )
    for daemonset in cluster.previous_release:
        meta = daemonset["metadata"]
        if (meta.get("namespace") or "default", meta["name"]) == (target.namespace, target.daemonset):
            template: dict[str, Any] = daemonset["spec"]["template"]
            return template
    names = [f"{d['metadata'].get('namespace')}/{d['metadata']['name']}" for d in cluster.previous_release]
    pytest.skip(f"not applicable: the previous release has no DaemonSet {target.namespace}/{target.daemonset}: {names}")


@dataclass
class Switch:
    """One rollout between two releases, as observed."""

    name: str
    samples: list[rollout.Sample]
    pods: int
    failures: list[str]
    writes: list[str]
    content_kept: bool


def _switch(
    name: str,
    template: dict[str, Any],
    target: rollout.RolloutTarget,
    api_client: client.ApiClient,
    start_pod: Callable[[], str | None],
    driver: str,
    node: str,
) -> Switch:
    """Roll the DaemonSet to `template`, starting pods with claims (`start_pod`) until the rollout is over."""
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    current = core.read_namespaced_pod(target.old_pod.metadata.name, target.namespace)
    slices_before = node_slices(api_client, driver, node)
    sampler = rollout.RolloutSampler(target.registry, core, api_client, driver, node, current).start()
    failures: list[str] = []
    pods = 0
    deadline = time.monotonic() + rollout.ROLLOUT_DEADLINE
    try:
        apps.patch_namespaced_daemon_set(target.daemonset, target.namespace, rollout.switch_patch(template))
        done, summary = False, ""
        while not done or sampler.samples[-1].old_pod != "gone":
            if time.monotonic() > deadline:
                old = sampler.samples[-1].old_pod if sampler.samples else "?"
                raise WaitTimeout(
                    f"the {name} of DaemonSet {target.namespace}/{target.daemonset} on {node}",
                    rollout.ROLLOUT_DEADLINE,
                    last_observed=f"{summary}; old pod {old}",
                )
            failure = start_pod()
            pods += 1
            if failure is not None:
                failures.append(failure)
            done, summary = rollout.rollout_done(apps, target.namespace, target.daemonset)
    finally:
        samples = sampler.stop()
    slices_after = node_slices(api_client, driver, node)
    kept = pool_content(slices_after) == pool_content(slices_before)
    return Switch(name, samples, pods, failures, writes_between(slices_before, slices_after) if kept else [], kept)


@pytest.mark.capability(Capability.ROLLING_UPDATE.value)
def test_an_upgrade_from_the_previous_release_and_its_rollback_keep_claims_prepared_and_unchanged_slices_untouched(
    real_node: RealNodeTarget,
    driver_under_test: DriverUnderTest,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    timeouts: Timeouts,
    obligations: Obligations,
    cluster: ClusterInfo,
) -> None:
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    target = _target(real_node, driver_under_test, core, cluster)
    previous = _previous_template(cluster, target)
    with rollout.rolling(apps, target.namespace, target.daemonset, f"upgrade and rollback@{real_node.name}"):
        saved = apps.read_namespaced_daemon_set(target.daemonset, target.namespace)
        installed = rollout.template_of(api_client, saved)
        put_back = rollout.put_back_patch(api_client, saved)

        def start_pod() -> str | None:
            pod, claim, failed = _pod_with_claim_runs(tracker, build, real_node, api_client, timeouts.pod_running)
            if failed is None:
                tracker.delete(pod, grace_seconds=TEST_POD_GRACE_SECONDS)
                tracker.delete(claim)
            return failed

        switches: list[Switch] = []
        try:
            plan = [
                ("switch to the previous release", previous),
                ("upgrade to the installed release", installed),
                ("rollback to the previous release", previous),
                ("upgrade to the installed release again", installed),
            ]
            for name, template in plan:
                with allure.step(name):
                    pod, claim, failed = _pod_with_claim_runs(
                        tracker, build, real_node, api_client, timeouts.pod_running
                    )
                    switch = _switch(
                        name, template, target, api_client, start_pod, driver_under_test.name, real_node.name
                    )
                    switches.append(switch)
                    left = rollout.claim_left_behind(real_node, tracker, pod, claim) if failed is None else None
                    target = _target(real_node, driver_under_test, core, cluster)  # the new release's pod
                    timeline = rollout.timeline(switch.samples, switch.samples[0].at if switch.samples else 0.0)
                    print("\n".join([f"{name}: {switch.pods} pods started, {switch.failures}", *timeline]))
                    allure.attach("\n".join(timeline), f"{name}: timeline", allure.attachment_type.TEXT)
                    problems = [*switch.failures, *([f"before the switch: {failed}"] if failed else [])]
                    problems += [f"prepared by the release before the switch: {left}"] if left else []
                    obligations.check(
                        "kubelet.upgrade-and-rollback-keep-claims-prepared",
                        not problems,
                        f"{name}: {'; '.join(problems)}; {timeline}",
                        target.where,
                    )
                    incomplete = [s for s in switch.samples if not s.pool_complete]
                    obligations.check(
                        "kubelet.rolling-update-pool-stays-complete",
                        not incomplete,
                        f"{name}: {len(incomplete)} of {len(switch.samples)} samples saw the pool incomplete, first: "
                        f"{incomplete[0].pool if incomplete else ''}; {timeline}",
                        target.where,
                    )
                    if switch.content_kept:
                        obligations.check(
                            "kubelet.rollout-leaves-unchanged-slices-untouched",
                            not switch.writes,
                            f"{name}: the pool's content unchanged, {len(switch.writes)} slice write(s): "
                            f"{switch.writes[:SHOWN]}",
                            target.where,
                        )
        finally:
            apps.patch_namespaced_daemon_set(target.daemonset, target.namespace, put_back)
            waits.until(
                lambda: rollout.rollout_done(apps, target.namespace, target.daemonset),
                lambda outcome: outcome[0],
                timeout=rollout.ROLLOUT_DEADLINE,
                what=f"DaemonSet {target.namespace}/{target.daemonset} settled with its installed template put back",
                describe=lambda outcome: outcome[1],
            )
