"""Pure logic of the reference driver: fault parsing and matching, the published slice, CDI specs, the call log."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import pytest

from fake_dra import cdi, devices
from fake_dra.config import DriverConfig
from fake_dra.core import allocated_node
from fake_dra.faults import FAULT_SCHEMA, MODES, Fault, FaultError, FaultSet
from fake_dra.recorder import CallLog

# A thread waiting on a condition must be released within this long after the fault is cleared.
RELEASE_DEADLINE = 5.0


def _config(tmp_path: Path, **overrides: object) -> DriverConfig:
    base: dict[str, object] = dict(
        driver_name="gpu.example.com",
        node_name="node-a",
        kubelet_root=tmp_path / "k",
        cdi_dir=tmp_path / "cdi",
        state_dir=tmp_path / "s",
        devices=3,
    )
    return DriverConfig(**{**base, **overrides})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"mode": "melt"}, "mode: 'melt' is not one of"),
        ({"mode": "slow-prepare"}, "fault: 'delay' is a required property"),
        ({"mode": "slow-prepare", "delay": -1}, "delay: -1 is less than"),
        ({"mode": "reduced-capacity"}, "fault: 'devices' is a required property"),
        ({"mode": "crash", "when": "now"}, "('when' was unexpected)"),
        (["crash"], "fault: ['crash'] is not of type 'object'"),
        ({"mode": "unavailable", "device": 0}, "device: 0 is not of type 'string'"),
        ({"mode": "reduced-capacity", "devices": True}, "devices: True is not of type 'integer'"),
    ],
    ids=[
        "unknown-mode",
        "slow-without-delay",
        "negative-delay",
        "capacity-without-count",
        "unknown-field",
        "not-object",
        "device-not-a-string",
        "boolean-count",
    ],
)
def test_invalid_fault_is_rejected_with_the_offending_field(raw: object, expected: str) -> None:
    with pytest.raises(FaultError) as rejected:
        Fault.parse(raw)
    assert expected in str(rejected.value) and "\n" not in str(rejected.value), str(rejected.value)


def test_fault_schema_names_exactly_the_fields_and_modes_of_a_fault() -> None:
    assert set(FAULT_SCHEMA["properties"]) == {f.name for f in dataclasses.fields(Fault)}
    assert set(FAULT_SCHEMA["properties"]["mode"]["enum"]) == set(MODES)


def test_claim_scoped_fault_applies_to_that_claim_only() -> None:
    faults = FaultSet()
    faults.replace([Fault.parse({"mode": "prepare-error", "claim": "uid-1"})])
    assert faults.find("prepare-error", claim="uid-1") is not None
    assert faults.find("prepare-error", claim="uid-2") is None


def test_device_scoped_fault_marks_only_that_device_unavailable() -> None:
    faults = FaultSet()
    faults.replace([Fault.parse({"mode": "unavailable", "device": "gpu-1"})])
    assert faults.unavailable_devices(["gpu-0", "gpu-1", "gpu-2"]) == {"gpu-1"}


def test_clearing_a_hang_releases_the_waiting_call() -> None:
    faults = FaultSet()
    faults.replace([Fault.parse({"mode": "hang-prepare"})])
    released: list[bool] = []
    waiter = threading.Thread(
        target=lambda: released.append(faults.wait_cleared("hang-prepare", claim="u", timeout=RELEASE_DEADLINE))
    )
    waiter.start()
    faults.replace([])
    waiter.join(RELEASE_DEADLINE)
    assert released == [True], f"waiter result {released}, alive={waiter.is_alive()}"


def test_slice_taints_unavailable_devices_and_publishes_the_reduced_count(tmp_path: Path) -> None:
    manifest = devices.resource_slice(_config(tmp_path), 7, unavailable={"gpu-1"}, published=2)
    spec = manifest["spec"]
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"], spec["devices"]
    assert spec["devices"][1]["taints"][0]["effect"] == "NoSchedule", spec["devices"][1]
    assert "taints" not in spec["devices"][0]
    assert spec["pool"] == {"name": "node-a", "generation": 7, "resourceSliceCount": 1}
    assert spec["nodeName"] == "node-a" and spec["driver"] == "gpu.example.com"


def test_nic_profile_devices_carry_interface_and_mac(tmp_path: Path) -> None:
    manifest = devices.resource_slice(_config(tmp_path, profile="nic"), 1, unavailable=set(), published=3)
    attributes = manifest["spec"]["devices"][2]["attributes"]
    assert attributes["interfaceName"] == {"string": "fake2"}, attributes
    assert attributes["mac"]["string"].count(":") == 5, attributes


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (
            {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]},
            "n1",
        ),
        (
            {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}
                ]
            },
            "",
        ),
        ({"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]}]}, ""),
        (None, ""),
    ],
    ids=["single-node", "two-nodes", "label-selector", "no-selector"],
)
def test_allocated_node_is_only_a_single_named_node(selector: object, expected: str) -> None:
    assert allocated_node({"nodeSelector": selector}) == expected


def test_cdi_spec_names_one_device_per_allocated_device_and_is_removed(tmp_path: Path) -> None:
    ids = cdi.write_spec(tmp_path, "gpu.example.com", "gpu", "uid-1", ["gpu-0", "gpu-3"])
    assert ids == ["gpu.example.com/gpu=uid-1-gpu-0", "gpu.example.com/gpu=uid-1-gpu-3"]
    spec = json.loads(cdi.spec_path(tmp_path, "gpu.example.com", "uid-1").read_text())
    assert [d["name"] for d in spec["devices"]] == ["uid-1-gpu-0", "uid-1-gpu-3"], spec
    cdi.remove_spec(tmp_path, "gpu.example.com", "uid-1")
    cdi.remove_spec(tmp_path, "gpu.example.com", "uid-1")  # idempotent
    assert list(tmp_path.iterdir()) == []


def test_call_log_returns_sorted_copies_and_mirrors_to_disk(tmp_path: Path) -> None:
    log = CallLog(tmp_path / "calls.jsonl", "node-a")
    log.record("NodeUnprepareResources", 20.0, claims=["b"], outcome="ok")
    log.record("NodePrepareResources", 10.0, claims=["a"], outcome="ok")
    calls = log.calls()
    assert [c["method"] for c in calls] == ["NodePrepareResources", "NodeUnprepareResources"]
    calls[0]["outcome"] = "tampered"
    assert log.calls()[0]["outcome"] == "ok"
    assert len((tmp_path / "calls.jsonl").read_text().splitlines()) == 2
