"""Binding conditions: how the checks read a claim's binding conditions, and the attach controller's identity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_conformance import paths
from dra_conformance.driver.binding import controller_cluster_role, device_bindings, named_writer, parse_time
from dra_conformance.driver.profile import load_profile
from dra_conformance.errors import ProfileError

DRIVER = "gpu-x.fake-dra.example.com"


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
