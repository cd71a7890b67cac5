"""The scenario catalog rejects typos and bad values with the file and the key path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dra_conformance import paths
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
    done = substitute(spec, "gpu-1.example.com", {"gpu": "ns-class-1"})
    assert done["devices"]["requests"][0]["exactly"]["deviceClassName"] == "ns-class-1"
    assert done["devices"]["constraints"][0]["matchAttribute"] == "gpu-1.example.com/model"
