"""Rollback rehearsal, device plugin -> DRA -> device plugin, for pods that ask for an extended resource.

Three phases, in order, on one worker (they share the rehearsal): `before` (the device plugin serves),
`after_change` (a DeviceClass with extendedResourceName lets DRA serve where no device plugin does) and
`after_rollback` (the class is gone, nothing DRA made is left, device-plugin workloads kept theirs). Each phase
writes its record to the state file and refreshes `reports/<run-id>/rollback-report.{json,md}`.

The device-plugin path is a real device plugin where a node's kubelet advertises the resource (with `--real-node`,
the reference plugin `dra_conformance.rollback.device_plugin` on `real-node-0`): its workloads must run there
(Ready) and keep the devices the plugin allocated them. Only on fake nodes does a status patch stand in for it. Each
record's `device_plugin` fact says which.

Each kind of problem a phase records is judged as the obligation it breaks (`rollback.yaml`): where the rehearsal
starts from, and the change and the rollback themselves, are preconditions; what the scheduler, the garbage
collector and the device plugin's path do through them are findings.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.kube.namespaces import NamespaceReaper
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.findings import Obligations
from dra_conformance.rollback.extended_resource import run_after_change, run_after_rollback, run_before
from dra_conformance.rollback.state import Phase, PhaseRecord
from dra_conformance.rollback.steps import Rehearsal, finish, resume, set_up
from dra_conformance.timeouts import Timeouts

from .phase_verdicts import Kinds, by_kind, judge, kind

pytestmark = [pytest.mark.xdist_group("rollback-rehearsal"), pytest.mark.capability("extendedResourceMapping")]


# What each phase records (dra_conformance.rollback.extended_resource), by the obligation each kind breaks.
PHASE_KINDS: dict[Phase, Kinds] = {
    Phase.BEFORE: (
        kind("rollback.rehearsal-starts-without-dra", r"DeviceClasses .* already serve "),
        kind("rollback.device-plugin-baseline", r"pod w1-device-plugin "),
    ),
    Phase.AFTER_CHANGE: (
        kind("rollback.change-made", r"no DeviceClass has extendedResourceName "),
        kind("rollback.workloads-keep-their-devices", r"workload \S+ did not keep its device"),
        kind("rollback.dra-serves-nodes-without-the-resource", r"pod w2-dra is (gone|served by)"),
        kind("rollback.dra-claim-allocated-from-the-class-driver", r"claim \S+ of w2 is not allocated by "),
        kind("rollback.device-plugin-nodes-stay-with-the-device-plugin", r"pod w3-device-plugin is (gone|served by)"),
        kind("rollback.device-plugin-workloads-run", r"pod w3-device-plugin is not Ready "),
    ),
    Phase.AFTER_ROLLBACK: (
        kind("rollback.rollback-made", r"DeviceClasses .* still serve .*: not rolled back"),
        kind("rollback.workloads-keep-their-devices", r"workload \S+ did not keep its device"),
        kind("rollback.device-plugin-nodes-stay-with-the-device-plugin", r"pod w4-device-plugin is (gone|served by)"),
        kind("rollback.device-plugin-workloads-run", r"pod w4-device-plugin is not Ready "),
        kind("rollback.former-dra-node-refuses-the-resource", r"pod w5 was placed on "),
        kind(
            "rollback.pods-drained-before-the-class-goes", r"pod \S+ still holds claim .*before its pods were drained"
        ),
        kind("rollback.extended-resource-claims-go-with-their-pods", r"claim \S+ of \S+ outlives its pod"),
        kind("rollback.extended-resource-claims-go-with-their-pods", r"claim \S+ left after every pod was deleted"),
    ),
}


def _verdict(obligations: Obligations, record: PhaseRecord) -> None:
    """Each kind of problem (and of what was left behind) the phase recorded, as the obligation it breaks."""
    served_by = (record.facts.get("device_plugin") or {}).get("served_by")
    found, unknown = by_kind([*record.problems, *record.left_behind], PHASE_KINDS[record.phase])
    judge(obligations, found, unknown, f"rollback phase {record.phase} (device-plugin path: {served_by})")


@pytest.mark.rollback_phase("before")
def test_before_the_change_the_device_plugin_serves_the_extended_resource(
    rehearsal: Rehearsal,
    api_client: client.ApiClient,
    driver_under_test: DriverUnderTest,
    run_id: str,
    timeouts: Timeouts,
    namespace_reaper: NamespaceReaper,
    obligations: Obligations,
    cluster: ClusterInfo,
) -> None:
    engine = set_up(rehearsal, api_client, driver_under_test, rehearsal.resource, run_id, timeouts, cluster)
    record = run_before(engine)
    rehearsal.record(record)
    if not record.passed and rehearsal.single_phase:
        finish(rehearsal, timeouts, namespace_reaper)  # nothing to continue from
    _verdict(obligations, record)


@pytest.mark.rollback_phase("after_change")
def test_after_the_change_dra_serves_only_nodes_without_the_device_plugin_and_workloads_keep_their_devices(
    rehearsal: Rehearsal, api_client: client.ApiClient, timeouts: Timeouts, obligations: Obligations
) -> None:
    if Phase.BEFORE not in rehearsal.state.records:
        pytest.skip("not applicable: phase before did not run (see its result)")
    record = run_after_change(resume(rehearsal, api_client, timeouts), rehearsal.state, drive=rehearsal.drive)
    rehearsal.record(record)
    _verdict(obligations, record)


@pytest.mark.rollback_phase("after_rollback")
def test_after_the_rollback_nothing_of_dra_is_left_and_the_device_plugin_serves_again(
    rehearsal: Rehearsal,
    api_client: client.ApiClient,
    timeouts: Timeouts,
    namespace_reaper: NamespaceReaper,
    obligations: Obligations,
) -> None:
    if Phase.AFTER_CHANGE not in rehearsal.state.records:
        pytest.skip("not applicable: phase after_change did not run (see its result)")
    engine = resume(rehearsal, api_client, timeouts)
    try:
        record = run_after_rollback(engine, rehearsal.state, drive=rehearsal.drive)
    finally:
        left = finish(rehearsal, timeouts, namespace_reaper)
    record.left_behind.extend(left)
    rehearsal.record(record)
    _verdict(obligations, record)
