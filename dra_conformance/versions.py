"""Pinned upstream versions and the per-minor settings that depend on them."""

from __future__ import annotations

KUBERNETES = "v1.37.2"
ETCD = "v3.6.16"
# kwok (the fake nodes) and kwokctl (bench/cluster_up's side-by-side anchor) come from this one release.
KWOK = "v0.8.0"
METRICS_SERVER = "v0.9.0"
# containerd 2 for the real node tier (opt-in): the latest v2.3 patch; its go.mod needs Go >= 1.26.8.
CONTAINERD = "v2.3.7"
# runc for the real node tier (opt-in), started by containerd's runc shim: the latest v1.4 patch.
RUNC = "v1.4.4"
# Sonobuoy, built from its Go module into an image of its own (`dra-conformance image build --image sonobuoy`).
SONOBUOY = "v0.57.4"
# The kubelet plugin API (.proto files) is pinned where dra-wire builds its bindings from: dra_wire.kubelet_pin.

# Feature gates per Kubernetes minor, identical for every component. GA gates that are locked to their
# default are left out: setting a locked gate to false is rejected, and gates are removed a few releases
# after locking, which would fail start-up.
FEATURE_GATES: dict[str, dict[str, bool]] = {
    "1.37": {
        "DRADeviceTaints": True,
        "DRADeviceTaintRules": True,
        "DRAPartitionableDevices": True,
        "DRADeviceBindingConditions": True,
        "DRAConsumableCapacity": True,
        "DRAResourceClaimGranularStatusAuthorization": True,
        "ResourceHealthStatus": True,
    },
}

# resource.k8s.io/v1 is served by default; the betas are enabled so suites can check every served version.
RUNTIME_CONFIG: dict[str, dict[str, bool]] = {
    "1.37": {"resource.k8s.io/v1beta1": True, "resource.k8s.io/v1beta2": True},
}


def minor(version: str = KUBERNETES) -> str:
    """Return "1.37" for "v1.37.2"."""
    major_part, minor_part = version.removeprefix("v").split(".")[:2]
    return f"{major_part}.{minor_part}"


def feature_gate_flag(version: str = KUBERNETES) -> str:
    """The `--feature-gates` value for a Kubernetes version."""
    return _join(FEATURE_GATES[minor(version)])


def runtime_config_flag(version: str = KUBERNETES) -> str:
    """The kube-apiserver `--runtime-config` value for a Kubernetes version."""
    return _join(RUNTIME_CONFIG[minor(version)])


def _join(settings: dict[str, bool]) -> str:
    return ",".join(f"{key}={str(value).lower()}" for key, value in sorted(settings.items()))
