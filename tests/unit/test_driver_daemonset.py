"""The real node's driver DaemonSet: the profile's command changed into the host's root, writable where it writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_conformance.backends.local import driver_daemonset
from dra_conformance.backends.local.backend import LocalBackend, LocalClusterConfig
from dra_conformance.backends.local.images import BUSYBOX_APPLETS, BUSYBOX_IMAGE
from dra_conformance.backends.local.process_plan import ProcessSpec

SPEC = ProcessSpec(
    "driver-real-node-0",
    ["/cache/bin/reference_driver_go", "--node-name=real-node-0"],
    "/tmp/driver.log",
    critical=False,
    env={"KUBECONFIG": "/run/x/driver.kubeconfig", "TMPDIR": "/run/x/tmp"},
)
WRITABLE = (Path("/tmp/k/real-node-0/plugins_registry"), Path("/tmp/k/real-node-0/plugins"), Path("/run/x/cdi"))


def _pod_spec() -> dict:  # type: ignore[type-arg]
    manifest = driver_daemonset.manifest(SPEC, "real-node-0", "dra-driver", "driver-sa", WRITABLE)
    assert manifest["kind"] == "DaemonSet", manifest
    return manifest["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def test_container_runs_the_profile_command_inside_the_host_root() -> None:
    (container,) = _pod_spec()["containers"]
    assert container["command"] == ["chroot", "/host", *SPEC.argv], container["command"]
    assert container["image"] == BUSYBOX_IMAGE and container["imagePullPolicy"] == "Never", container
    assert "chroot" in BUSYBOX_APPLETS, BUSYBOX_APPLETS


def test_host_root_is_read_only_and_only_the_driver_directories_are_writable() -> None:
    spec = _pod_spec()
    mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["/host"].get("readOnly") is True, mounts["/host"]
    writable = {path for path, mount in mounts.items() if not mount.get("readOnly")}
    assert writable == {"/host/var/tmp", *(f"/host{p}" for p in WRITABLE)}, writable
    host_paths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert host_paths == {"/", *map(str, WRITABLE)}, host_paths


def test_profile_environment_wins_over_the_defaults_and_the_pod_stays_on_its_node() -> None:
    spec = _pod_spec()
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env["TMPDIR"] == "/run/x/tmp" and env["KUBECONFIG"] == SPEC.env["KUBECONFIG"], env
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["real-node-0"]}]}], terms
    assert spec["hostNetwork"] is True and spec["automountServiceAccountToken"] is False, spec


def test_a_relative_cluster_state_dir_gives_absolute_paths_for_the_driver_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--dra-state-dir=reports/clusters/x` (as CI passes it) must not reach the pod's hostPath mounts as is."""
    monkeypatch.chdir(tmp_path)
    backend = LocalBackend(LocalClusterConfig(state_dir=Path("reports/clusters/real-node")))
    assert backend.layout.root == tmp_path / "reports/clusters/real-node", backend.layout.root
