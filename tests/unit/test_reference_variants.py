"""The reference driver's variant profiles: the reference profile with one start-time option each.

What each option does is the Go build's own tests' (drivers/fake-dra-go); the variants are certified on a cluster
from these profiles.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_conformance import paths
from dra_conformance.driver.profile import Capability, Strictness, load_profile
from dra_conformance.driver.reference import behaviour_args

VARIANTS = paths.fixtures_dir() / "profiles" / "reference-variants"
# Variant profile -> its one extra argument.
PROFILE_OPTIONS = {
    "status-data-only": "--status-conditions=none",
    "status-kept-after-unprepare": "--keep-status-after-unprepare",
    "unknown-claim-whole-call": "--unknown-claim-answer=whole-call",
    "no-health-service": "--health-service=none",
    "health-v1alpha1-only": "--health-service=v1alpha1",
    "prepare-refused-while-device-held": "--refuse-devices-held-by-other-claims",
}


def _values(root: Path, driver: str) -> dict[str, str]:
    kubelet_root = root / "kubelet"
    return {
        "bin:reference_driver_go": "/cache/bin/reference_driver_go",
        "devices": "8",
        "driver": driver,
        "node": "node-a",
        "kubeconfig": str(root / "driver.kubeconfig"),
        "kubelet_root": str(kubelet_root),
        "cdi_dir": str(root / "cdi"),
        "data_dir": str(root / "state"),
    }


def test_every_variant_profile_is_listed_here() -> None:
    assert sorted(p.stem for p in VARIANTS.glob("*.yaml")) == sorted(PROFILE_OPTIONS)


@pytest.mark.parametrize(("name", "flag"), list(PROFILE_OPTIONS.items()), ids=list(PROFILE_OPTIONS))
def test_variant_profile_is_the_reference_profile_with_its_one_option(tmp_path: Path, name: str, flag: str) -> None:
    reference = load_profile(paths.reference_driver_profile())
    variant = load_profile(VARIANTS / f"{name}.yaml")
    assert variant.strictness == Strictness.CONTRACT
    assert [p.read_bytes() for p in variant.identity.rbac] == [paths.reference_driver_rbac().read_bytes()]
    assert variant.run is not None and reference.run is not None
    assert variant.run.process.args == (*reference.run.process.args, flag)
    assert set(variant.run.versions) == set(reference.run.versions) == {"previous"}
    assert variant.run.versions["previous"].args == (*reference.run.versions["previous"].args, flag)
    assert variant.run.process.command == reference.run.process.command == ("{bin:reference_driver_go}",)
    values = _values(tmp_path, variant.driver)
    assert variant.run.process.argv(values) == [*reference.run.process.argv(values), flag]
    # Only a driver without a health service stops declaring it; every other capability is the reference's.
    undeclared = {Capability.HEALTH_STREAM} if flag == "--health-service=none" else set()
    assert variant.capabilities == reference.capabilities - undeclared
    same = ("driver", "version", "device_classes", "devices", "timeouts")
    assert [getattr(variant, f) for f in same] == [getattr(reference, f) for f in same]
    assert variant.identity.service_account == reference.identity.service_account


def test_private_instances_carry_the_profiles_behaviour_options_and_nothing_about_where_it_runs() -> None:
    args = (
        "--driver-name={driver}",
        "--kubelet-root={kubelet_root}",
        "--status-conditions=none",
        "--keep-status-after-unprepare",
        "--broken-mode=prepares-wrong-device",
        "--devices=8",
    )
    assert behaviour_args(args) == (
        "--status-conditions=none",
        "--keep-status-after-unprepare",
        "--broken-mode=prepares-wrong-device",
    )
