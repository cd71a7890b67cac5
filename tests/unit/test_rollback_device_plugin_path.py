"""The rehearsal's verdict on the device-plugin path: a real plugin's workloads must run and keep their devices."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from dra_conformance.rollback import extended_resource as er
from dra_conformance.rollback.state import Phase, PhaseRecord


def _record() -> PhaseRecord:
    return PhaseRecord(Phase.AFTER_CHANGE, datetime.now(UTC).isoformat())


def _seen(**changes: Any) -> dict[str, Any]:
    base = {
        "name": "w1-device-plugin",
        "present": True,
        "uid": "u1",
        "node": "real-node-0",
        "deleting": False,
        "path": er.DEVICE_PLUGIN,
        "ready": True,
        "must_run": True,
        "devices": "gpu-0",
    }
    return {**base, **changes}


def test_a_workload_on_the_real_plugin_node_that_is_not_ready_is_a_problem() -> None:
    record = _record()
    er._expect_path(record, _seen(ready=False), er.DEVICE_PLUGIN, "before")
    assert len(record.problems) == 1 and "not Ready" in record.problems[0], record.problems


def test_a_stand_in_workload_need_not_run() -> None:
    record = _record()
    er._expect_path(record, _seen(ready=False, must_run=False, devices=None), er.DEVICE_PLUGIN, "before")
    assert record.problems == [], record.problems


def test_a_kept_workload_with_other_devices_or_stopped_did_not_keep_its_device() -> None:
    for now in (_seen(devices="gpu-3"), _seen(ready=False), _seen(uid="u2")):
        record = _record()
        er._kept(record, _seen(), now)
        assert len(record.problems) == 1 and "did not keep its device" in record.problems[0], (now, record.problems)
    record = _record()
    er._kept(record, _seen(), _seen())
    assert record.problems == [], record.problems


def test_tolerations_cover_the_nodes_own_taints_but_never_condition_taints() -> None:
    node = client.V1Node(
        spec=client.V1NodeSpec(
            taints=[
                client.V1Taint(key="dra-conformance.io/real-node", effect="NoSchedule", value="true"),
                client.V1Taint(key="node.kubernetes.io/not-ready", effect="NoExecute"),
                client.V1Taint(key="example.com/soft", effect="PreferNoSchedule"),
            ]
        )
    )
    tolerations = er.tolerations_of(node)
    assert tolerations == ({"key": "dra-conformance.io/real-node", "operator": "Exists", "effect": "NoSchedule"},), (
        tolerations
    )
