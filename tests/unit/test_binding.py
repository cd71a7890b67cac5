"""Binding conditions: the reference driver's fabric devices and attach bookkeeping, and how the checks read a claim."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from dra_conformance import paths
from dra_conformance.driver.binding import controller_cluster_role, device_bindings, named_writer, parse_time
from dra_conformance.driver.profile import load_profile
from dra_conformance.errors import ProfileError
from fake_dra import devices, fabric
from fake_dra.config import DriverConfig
from fake_dra.faults import FaultSet

DRIVER = "gpu-x.fake-dra.example.com"


def _config(tmp_path: Path, **changes: Any) -> DriverConfig:
    return DriverConfig(DRIVER, "node-a", tmp_path, tmp_path / "cdi", tmp_path / "state", **changes)


def _claim(*, conditions: list[dict[str, str]] | None = None, binding: bool = True) -> dict[str, Any]:
    result: dict[str, Any] = {"request": "req", "driver": DRIVER, "pool": "node-a", "device": "gpu-fabric-0"}
    if binding:
        result |= {"bindingConditions": ["attached"], "bindingFailureConditions": ["attach-failed"]}
    status: dict[str, Any] = {"allocation": {"devices": {"results": [result]}}}
    if conditions is not None:
        status["devices"] = [{"driver": DRIVER, "pool": "node-a", "device": "gpu-fabric-0", "conditions": conditions}]
    return {"metadata": {"uid": "u", "name": "c", "namespace": "n"}, "status": status}


def _true(kind: str, at: str = "2026-12-02T03:00:05Z") -> dict[str, str]:
    return {"type": kind, "status": "True", "reason": "R", "message": "m", "lastTransitionTime": at}


def test_fabric_devices_bind_to_the_node_and_carry_a_binding_and_a_failure_condition(tmp_path: Path) -> None:
    config = _config(tmp_path, profile=fabric.PROFILE, devices=2)
    [pool] = devices.resource_slices(config, 1, unavailable=set(), published=2)
    listed = pool["spec"]["devices"]
    assert [d["name"] for d in listed] == devices.device_names(config) == ["gpu-fabric-0", "gpu-fabric-1"]
    for device in listed:
        assert device["bindsToNode"] is True
        assert device["bindingConditions"] == [fabric.BINDING_CONDITION]
        assert device["bindingFailureConditions"] == [fabric.FAILURE_CONDITION]


def test_controller_attaches_a_device_whose_entry_has_no_binding_or_failure_condition_yet() -> None:
    assert [r["device"] for r in fabric.pending_devices(_claim(), DRIVER)] == ["gpu-fabric-0"]
    assert fabric.pending_devices(_claim(conditions=[_true("Ready")]), DRIVER), "Ready is not a binding condition"
    assert not fabric.pending_devices(_claim(conditions=[_true("attached")]), DRIVER)
    assert not fabric.pending_devices(_claim(conditions=[_true("attach-failed")]), DRIVER)
    assert not fabric.pending_devices(_claim(binding=False), DRIVER), "a device without binding conditions"
    assert not fabric.pending_devices(_claim(), "other.example.com"), "another driver's device"


def test_attach_log_lists_attaches_oldest_first_as_json() -> None:
    log = fabric.AttachLog()
    log.record(fabric.Attachment("u", "n", "c", "gpu-fabric-0", "attached", 1.0, 3.0, 3.5))
    log.record(fabric.Attachment("v", "n", "d", "gpu-fabric-1", "failed", 4.0, 4.0, 4.1))
    assert [(a["claim"], a["outcome"], a["finishedAt"]) for a in log.to_json()] == [
        ("u", "attached", 3.0),
        ("v", "failed", 4.0),
    ]


@pytest.mark.parametrize(
    ("conditions", "pending", "failed", "ready"),
    [
        (None, ("attached",), (), False),
        ([{**_true("attached"), "status": "False"}], ("attached",), (), False),
        ([_true("attached")], (), (), True),
        ([_true("attach-failed")], ("attached",), ("attach-failed",), False),
        ([_true("attached"), _true("attach-failed")], (), ("attach-failed",), False),
    ],
)
def test_device_binding_is_ready_once_every_binding_condition_is_true_and_no_failure_condition(
    conditions: list[dict[str, str]] | None, pending: tuple[str, ...], failed: tuple[str, ...], ready: bool
) -> None:
    [binding] = device_bindings(_claim(conditions=conditions), DRIVER)
    assert (binding.pending, binding.failed, binding.ready) == (pending, failed, ready)


def test_device_bindings_leave_out_devices_without_binding_conditions_and_other_drivers() -> None:
    assert device_bindings(_claim(binding=False), DRIVER) == []
    assert device_bindings(_claim(), "other.example.com") == []
    assert device_bindings({"metadata": {}, "status": {}}, DRIVER) == []


def test_true_binding_conditions_carry_their_transition_time() -> None:
    [binding] = device_bindings(_claim(conditions=[_true("attached", "2026-12-02T03:00:05Z")]), DRIVER)
    assert binding.true_since == {"attached": "2026-12-02T03:00:05Z"}
    assert parse_time("2026-12-02T03:00:05Z") - parse_time("2026-12-02T03:00:00Z") == 5


def test_controller_role_grants_status_writes_for_the_given_driver_only() -> None:
    profile = load_profile(paths.fixtures_dir() / "profiles" / "reference-driver.yaml")
    assert profile.identity.controller is not None
    role = controller_cluster_role(profile.identity.controller.rbac)("ns-attach-controller", DRIVER)
    assert role["metadata"] == {"name": "ns-attach-controller"}
    [driver_rule] = [r for r in role["rules"] if "resourceclaims/driver" in r["resources"]]
    assert driver_rule["resourceNames"] == [DRIVER]
    assert driver_rule["verbs"] == ["arbitrary-node:patch"]
    shipped = next(
        doc
        for doc in yaml.safe_load_all(profile.identity.controller.rbac[0].read_text())
        if doc["kind"] == "ClusterRole"
    )
    assert [r["resourceNames"] for r in shipped["rules"] if "resourceNames" in r] == [["gpu.fake-dra.example.com"]]


def test_the_named_writer_is_the_controller_where_the_profile_names_one_else_the_plugin() -> None:
    reference = load_profile(paths.fixtures_dir() / "profiles" / "reference-driver.yaml")
    assert named_writer(reference) == "system:serviceaccount:fake-dra:fake-dra-attach-controller"
    upstream = load_profile(paths.fixtures_dir() / "profiles" / "upstream-test-driver.yaml")
    assert named_writer(upstream) == upstream.identity.service_account.username


CONTROLLER_PROFILE = """\
apiVersion: dra-conformance.io/v1alpha1
kind: DriverProfile
driver: fabric.example.com
identity:
  serviceAccount: {namespace: drivers, name: plugin}
  controller:
    serviceAccount: {namespace: drivers, name: attacher}
    rbac: [%s]
deviceClasses:
- name: fabric
  create: true
devices:
  perNode: 2
capabilities:
  bindingConditions: true
"""


def test_profile_names_the_controller_identity_and_its_rbac(tmp_path: Path) -> None:
    (tmp_path / "attacher-rbac.yaml").write_text("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: attacher}\n")
    path = tmp_path / "profile.yaml"
    path.write_text(CONTROLLER_PROFILE % "attacher-rbac.yaml")
    controller = load_profile(path).identity.controller
    assert controller is not None
    assert controller.service_account.username == "system:serviceaccount:drivers:attacher"
    assert controller.rbac == ((tmp_path / "attacher-rbac.yaml").resolve(),)


def test_a_missing_controller_rbac_file_is_one_line_naming_its_key(tmp_path: Path) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text(CONTROLLER_PROFILE % "nope.yaml")
    with pytest.raises(ProfileError) as raised:
        load_profile(path)
    assert "identity.controller.rbac[0]: file not found" in str(raised.value), raised.value
    assert ":8:" in str(raised.value), raised.value


def test_controller_attaches_each_allocation_once_and_again_after_a_deallocation(tmp_path: Path) -> None:
    controller = fabric.AttachController(_config(tmp_path), client.ApiClient(), FaultSet(), fabric.AttachLog())
    started: list[str] = []
    controller._attach = lambda claim, result: started.append(result["device"])  # type: ignore[method-assign]
    allocated = _claim()
    allocated["status"]["allocation"]["allocationTimestamp"] = "2026-12-02T03:00:00Z"
    controller.observe(allocated)
    controller.observe(allocated)  # the claim changed again before the condition landed
    controller.observe({"metadata": allocated["metadata"], "status": {}})  # deallocated
    controller.observe(allocated)  # allocated again within the same second
    for thread in threading.enumerate():
        if thread.name.startswith("attach-"):
            thread.join()
    assert started == ["gpu-fabric-0", "gpu-fabric-0"]


def test_each_status_apply_carries_every_entry_the_controller_wrote_for_the_current_allocation(tmp_path: Path) -> None:
    # Server-side apply takes a manager's fields away when its next apply leaves them out: an apply naming only the
    # second device would delete the first device's entry (seen on a claim of eight devices).
    controller = fabric.AttachController(_config(tmp_path), client.ApiClient(), FaultSet(), fabric.AttachLog())
    applied: list[list[str]] = []

    def apply(meta: dict[str, Any], entries: list[dict[str, Any]], what: str) -> float:
        applied.append([entry["device"] for entry in entries])
        return 1.0

    controller._apply = apply  # type: ignore[method-assign]
    claim = _claim()
    claim["status"]["allocation"]["allocationTimestamp"] = "2026-12-02T03:00:00Z"
    first = {"driver": DRIVER, "pool": "node-a", "device": "gpu-fabric-0"}
    second = {**first, "device": "gpu-fabric-1"}
    controller._write(claim, first, fabric.condition("attached", "Attached", "m"))
    controller._write(claim, second, fabric.condition("attached", "Attached", "m"))
    claim["status"]["allocation"]["allocationTimestamp"] = "2026-12-02T03:00:09Z"  # allocated again
    controller._write(claim, second, fabric.condition("attached", "Attached", "m"))
    assert applied == [["gpu-fabric-0"], ["gpu-fabric-0", "gpu-fabric-1"], ["gpu-fabric-1"]]
