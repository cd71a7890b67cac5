"""Feature gates and runtime config are built per Kubernetes minor, and never touch locked gates."""

from __future__ import annotations

from dra_conformance import versions

# Locked GA gates in 1.37 (setting them is rejected once they are removed, and =false is rejected already).
LOCKED_IN_1_37 = {"DynamicResourceAllocation", "DRAResourceClaimDeviceStatus", "DRAPrioritizedList", "DRAAdminAccess"}


def test_gate_string_for_pinned_release_enables_dra_betas_and_skips_locked_gates() -> None:
    flag = versions.feature_gate_flag("v1.37.2")
    gates = dict(item.split("=") for item in flag.split(","))
    assert gates["DRAResourceClaimGranularStatusAuthorization"] == "true", flag
    assert gates["ResourceHealthStatus"] == "true", flag
    assert not LOCKED_IN_1_37 & gates.keys(), f"locked gates in {flag}"


def test_runtime_config_serves_resource_betas() -> None:
    assert versions.runtime_config_flag("v1.37.2") == "resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true"


def test_minor_of_a_version_tag() -> None:
    assert versions.minor("v1.37.2") == "1.37"
