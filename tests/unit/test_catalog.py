"""The scenario catalog rejects typos and bad values with the file and the key path."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_conformance import paths
from dra_conformance.driver.profile import AttributeType, Capability, DeviceExpectations, DriverProfile, load_profile
from dra_conformance.errors import FixtureError
from dra_conformance.scenarios import catalog

VALID = {
    "id": "one-device",
    "description": "d",
    "deviceClasses": [{"name": "gpu"}],
    "claims": [
        {"name": "c", "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}}}
    ],
    "pods": [{"name": "app", "claims": [{"name": "gpu", "claim": "c"}]}],
    "expect": {"pods": {"app": {"scheduled": True}}},
}


def _write(tmp_path: Path, *scenarios: dict[str, object]) -> Path:
    path = tmp_path / "scenarios.yaml"
    path.write_text(yaml.safe_dump({"scenarios": list(scenarios)}))
    return path


def _broken(change: str, value: object) -> dict[str, object]:
    scenario = yaml.safe_load(yaml.safe_dump(VALID))
    target = scenario
    *parents, last = change.split(".")
    for key in parents:
        target = target[int(key)] if key.isdigit() else target[key]
    target[last] = value
    return scenario  # type: ignore[no-any-return]


def test_the_shipped_catalog_is_valid_and_covers_every_family() -> None:
    scenarios = catalog.load(paths.scenario_catalog())
    ids = {s.id for s in scenarios}
    assert len(scenarios) >= 20, ids
    for required in (
        "one-device",
        "only-device-tainted",
        "race-for-last-device",
        "slow-prepare-beyond-deadline",
        "prepare-error-then-recovery",
    ):
        assert required in ids, f"{required} missing from {sorted(ids)}"


@pytest.mark.parametrize(
    ("change", "value", "expected"),
    [
        ("claims.0.spek", {}, "scenarios[0].claims[0].spek: unknown key"),
        (
            "claims.0.spec.devices.requests.0.exactly.count",
            0,
            "scenarios[0].claims[0].spec.devices.requests[0].exactly.count: 0 is less than the minimum of 1",
        ),
        (
            "claims.0.spec.devices.requests.0.exactly.allocationMode",
            "Some",
            "exactly.allocationMode: 'Some' is not one of",
        ),
        ("expect.pods.app.schedulled", True, "scenarios[0].expect.pods.app.schedulled: unknown key"),
        ("driver", {"profile": "fpga"}, "scenarios[0].driver.profile: 'fpga' is not one of"),
        ("id", "Has Spaces", "scenarios[0].id: 'Has Spaces' does not match"),
        ("fault", {"mode": "slow-prepare", "dealy": 2}, "scenarios[0].fault.dealy: unknown key"),
        ("fault", {"mode": "slow-prepair", "delay": 2}, "scenarios[0].fault.mode: 'slow-prepair' is not one of"),
        ("fault", {"mode": "slow-prepare"}, "scenarios[0].fault.delay: missing required field"),
    ],
    ids=[
        "unknown-key",
        "zero-count",
        "bad-allocation-mode",
        "typo-in-expectation",
        "unknown-profile",
        "bad-id",
        "unknown-fault-key",
        "unknown-fault-mode",
        "slow-fault-without-delay",
    ],
)
def test_invalid_scenario_names_file_and_key_path(tmp_path: Path, change: str, value: object, expected: str) -> None:
    path = _write(tmp_path, _broken(change, value))
    with pytest.raises(FixtureError) as rejected:
        catalog.load_file(path)
    message = str(rejected.value)
    assert message.startswith(f"{path}: ") and expected in message, message
    assert "\n" not in message, message


def test_reference_to_an_undefined_device_class_is_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path, _broken("deviceClasses", [{"name": "fpga"}]))
    with pytest.raises(FixtureError, match=r"claims\[0\]\.spec\.devices\.requests\[0\]: unknown deviceClassName 'gpu'"):
        catalog.load_file(path)


def test_expectation_for_an_undefined_pod_is_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path, _broken("expect", {"pods": {"ghost": {"scheduled": True}}}))
    with pytest.raises(FixtureError, match="unknown pod 'ghost'"):
        catalog.load_file(path)


def test_duplicate_ids_across_files_are_rejected(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({"scenarios": [VALID]}))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"scenarios": [VALID]}))
    with pytest.raises(FixtureError, match="already defined"):
        catalog.load(tmp_path)


def test_driver_placeholder_and_logical_class_names_are_substituted() -> None:
    from dra_conformance.scenarios.runner import substitute

    spec = {
        "devices": {
            "requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}],
            "constraints": [{"matchAttribute": "{driver}/model"}],
        }
    }
    done = substitute(spec, "gpu-1.example.com", {"gpu": "ns-class-1"}, devices=4)
    assert done["devices"]["requests"][0]["exactly"]["deviceClassName"] == "ns-class-1"
    assert done["devices"]["constraints"][0]["matchAttribute"] == "gpu-1.example.com/model"


@pytest.mark.parametrize(("written", "devices", "resolved"), [("{devices}", 4, 4), ("{devices+1}", 4, 5), (3, 8, 3)])
def test_relative_counts_resolve_against_the_devices_of_the_node(written: object, devices: int, resolved: int) -> None:
    from dra_conformance.scenarios.runner import substitute

    spec = {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": written}}]}}
    done = substitute(spec, "d.example.com", {"gpu": "c"}, devices=devices)
    assert done["devices"]["requests"][0]["exactly"]["count"] == resolved, done


def test_a_relative_count_that_is_not_devices_plus_a_number_is_rejected(tmp_path: Path) -> None:
    scenario: dict[str, Any] = copy.deepcopy(VALID)
    scenario["claims"][0]["spec"]["devices"]["requests"][0]["exactly"]["count"] = "{device}+1"
    path = _write(tmp_path, scenario)
    with pytest.raises(FixtureError, match=r"exactly\.count: '\{device\}\+1' does not match"):
        catalog.load_file(path)


def _profile() -> DriverProfile:
    upstream = load_profile(paths.fixtures_dir() / "profiles" / "upstream-test-driver.yaml")
    assert upstream.devices == DeviceExpectations(per_node=4, from_slices=True, attributes={}), upstream.devices
    return upstream


def _scenario(**fields: Any) -> catalog.Scenario:
    return catalog.Scenario(id="s", description="d", source=Path("s.yaml"), **fields)


def test_the_reference_driver_runs_every_scenario_whose_capabilities_it_declares() -> None:
    reference = load_profile(paths.reference_driver_profile())
    assert _scenario(reference_only="values", attributes={"x": AttributeType.INT}).not_applicable(reference) is None
    # The reference profile declares every capability (issue 22); one taken away makes its scenarios not applicable.
    without = dataclasses.replace(reference, capabilities=reference.capabilities - {Capability.CONSUMABLE_CAPACITY})
    assert "consumableCapacity" in str(
        _scenario(capabilities=(Capability.CONSUMABLE_CAPACITY,)).not_applicable(without)
    )


@pytest.mark.parametrize(
    ("candidate", "reason"),
    [
        (_scenario(reference_only="uses index 1"), "is for the reference driver only: uses index 1"),
        (_scenario(min_devices=5), "needs 5 devices on a node; the profile declares 4"),
        (
            _scenario(capabilities=(Capability.STATUS_DEVICES,)),
            "capabilities the profile does not declare: statusDevices",
        ),
        (
            _scenario(attributes={"model": AttributeType.STRING}),
            "attributes the profile does not declare: model (string)",
        ),
    ],
    ids=["reference-only", "too-few-devices", "capability", "attribute"],
)
def test_a_scenario_the_driver_cannot_meet_says_why(candidate: catalog.Scenario, reason: str) -> None:
    found = candidate.not_applicable(_profile())
    assert found is not None and reason in found, found


def test_a_scenario_within_the_drivers_declarations_applies() -> None:
    assert _scenario(min_devices=4).not_applicable(_profile()) is None


def test_the_reference_drivers_installed_image_runs_its_fault_scenarios_where_its_nodes_suit_them() -> None:
    shipped = load_profile(paths.fixtures_dir() / "profiles" / "reference-driver-shipped.yaml")
    assert shipped.fault_switches and not shipped.declares(Capability.REFERENCE_FAULTS), shipped.capabilities
    fault = {"mode": "prepare-error"}
    assert _scenario(fault=fault, reference_only="switches a fault").not_applicable(shipped) is None
    exact = _scenario(fault=fault, reference_only="switches a fault", devices_exactly=1).not_applicable(shipped)
    assert exact is not None and "exactly 1 devices" in exact and "declares 8" in exact, exact
    # Without the switches, a fault scenario stays the reference driver's alone.
    without = dataclasses.replace(shipped, capabilities=shipped.capabilities - {Capability.FAULT_SWITCHES})
    found = _scenario(fault=fault, reference_only="switches a fault").not_applicable(without)
    assert found is not None and "for the reference driver only" in found, found


def test_every_fault_scenario_is_reference_only() -> None:
    scenarios = catalog.load(paths.scenario_catalog())
    faulty = [s.id for s in scenarios if s.fault and not s.reference_only]
    assert faulty == [], faulty


def _selecting(expression: str, **fields: Any) -> catalog.Scenario:
    classes = [{"name": "gpu", "selectors": [{"cel": {"expression": expression}}]}]
    return _scenario(
        device_classes=classes,
        placeholders=frozenset(catalog._placeholders(Path("s"), 0, {"deviceClasses": classes})),
        **fields,
    )


def test_a_version_placeholder_becomes_the_cel_term_of_the_first_attribute_the_profile_declares_as_a_version() -> None:
    reference = load_profile(paths.reference_driver_profile())
    scenario = _selecting('{attribute:version}.isLessThan(semver("0.0.0-0"))')
    assert scenario.placeholders == {"attribute:version"}
    assert scenario.not_applicable(reference) is None
    resolved = scenario.for_profile(reference)
    expression = resolved.device_classes[0]["selectors"][0]["cel"]["expression"]
    assert expression == 'device.attributes["{driver}"]["driverVersion"].isLessThan(semver("0.0.0-0"))'
    # The attribute joins those the scenario selects on, which the allocation suite checks as published.
    assert resolved.attributes == {"driverVersion": AttributeType.VERSION}
    assert resolved.placeholders == frozenset()


def test_a_capacity_placeholder_becomes_the_cel_term_of_the_declared_capacity_a_qualified_name_in_its_domain() -> None:
    reference = load_profile(paths.reference_driver_profile())
    assert reference.devices.capacity == ("memory",), reference.devices
    scenario = _selecting('{capacity}.compareTo(quantity("0")) >= 0')
    expression = scenario.for_profile(reference).device_classes[0]["selectors"][0]["cel"]["expression"]
    assert expression == 'device.capacity["{driver}"]["memory"].compareTo(quantity("0")) >= 0'
    qualified = dataclasses.replace(
        reference, devices=dataclasses.replace(reference.devices, capacity=("dra.example.com/bandwidth",))
    )
    expression = scenario.for_profile(qualified).device_classes[0]["selectors"][0]["cel"]["expression"]
    assert expression.startswith('device.capacity["dra.example.com"]["bandwidth"]'), expression


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("{attribute:version}.major() > 0", "compares an attribute of type version, and the profile declares none"),
        ('{capacity}.compareTo(quantity("0")) >= 0', "compares a device capacity, and the profile declares none"),
    ],
    ids=["version", "capacity"],
)
def test_a_scenario_comparing_what_the_profile_does_not_declare_is_not_applicable(expression: str, reason: str) -> None:
    found = _selecting(expression).not_applicable(_profile())
    assert found is not None and reason in found, found
    # The reference driver's private instances are judged by its profile's declarations too.
    reference = load_profile(paths.reference_driver_profile())
    bare = dataclasses.replace(reference, devices=DeviceExpectations(per_node=8))
    assert _selecting(expression).not_applicable(bare) is not None


def test_a_placeholder_of_an_unknown_attribute_type_is_rejected(tmp_path: Path) -> None:
    scenario: dict[str, Any] = copy.deepcopy(VALID)
    scenario["deviceClasses"] = [{"name": "gpu", "selectors": [{"cel": {"expression": "{attribute:float} > 1.0"}}]}]
    with pytest.raises(FixtureError, match=r"unknown attribute type in \{attribute:float\}"):
        catalog.load_file(_write(tmp_path, scenario))


def test_the_typed_selector_scenarios_run_in_their_own_test_and_only_there() -> None:
    scenarios = catalog.load(paths.scenario_catalog())
    own = {s.id: s.obligation for s in catalog.select(scenarios, own_obligation=True)}
    assert own == {
        "selector-version-at-least-lowest": "allocation.version-attribute-compares-as-semver",
        "selector-version-below-lowest": "allocation.version-attribute-compares-as-semver",
        "selector-capacity-at-least-zero": "allocation.capacity-compares-as-quantity",
    }
    generic = {s.id for s in catalog.select(scenarios, own_obligation=False)}
    assert not generic & set(own) and len(generic) + len(own) == len(scenarios)
