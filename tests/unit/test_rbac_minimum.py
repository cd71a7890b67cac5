"""The least a driver needs for its declared capabilities: what flags an over-privileged RBAC file."""

from __future__ import annotations

from pathlib import Path

from dra_conformance import paths
from dra_conformance.driver.profile import load_profile
from dra_conformance.rbac import audit

DRIVER = "gpu.example.com"


def _documented(text: str, tmp_path: Path) -> set[audit.Permission]:
    path = tmp_path / "rbac.yaml"
    path.write_text(text.replace("{driver}", DRIVER))
    return audit.documented([path], DRIVER)


def test_overprivileged_variant_is_flagged_beyond_the_status_writer_minimum(tmp_path: Path) -> None:
    documented = _documented(paths.overprivileged_driver_role().read_text(), tmp_path)
    extra = audit.excess(documented, audit.minimum({"statusDevices"}, DRIVER), baseline=set())
    assert extra == [
        "resource.k8s.io resourceclaims delete",
        "resource.k8s.io resourceclaims update",
        f"resource.k8s.io resourceclaims/driver arbitrary-node:patch [{DRIVER}]",
    ], extra


def test_status_writes_are_beyond_the_minimum_of_a_driver_that_declares_no_status() -> None:
    writer = audit.minimum({"statusDevices"}, DRIVER)
    plain = audit.minimum(set(), DRIVER)
    assert audit.excess(writer, plain, baseline=set()) == [
        "resource.k8s.io resourceclaims/driver associated-node:patch [gpu.example.com]",
        "resource.k8s.io resourceclaims/driver associated-node:update [gpu.example.com]",
        "resource.k8s.io resourceclaims/status patch",
        "resource.k8s.io resourceclaims/status update",
    ]


def test_shipped_profiles_rbac_is_within_their_minimum() -> None:
    for name in ("reference-driver.yaml", "upstream-test-driver.yaml"):
        profile = load_profile(paths.fixtures_dir() / "profiles" / name)
        documented = audit.documented(profile.identity.rbac, profile.driver)
        needed = audit.minimum(profile.capabilities, profile.driver)
        assert audit.excess(documented, needed, baseline=set()) == [], name
