"""The reference driver's in-cluster manifests (drivers/fake-dra-go/deploy) agree with its command line and RBAC."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import yaml

from dra_conformance import paths
from tests.driver_flags import option_values

DEPLOY = paths.reference_driver_go_module() / "deploy"
DRIVER_NAME = "gpu.fake-dra.example.com"


def _documents(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DEPLOY / name).read_text()) if doc]


def _only(name: str, kind: str) -> dict[str, Any]:
    found = [doc for doc in _documents(name) if doc["kind"] == kind]
    assert len(found) == 1, f"expected one {kind} in {name}, got {len(found)}"
    return found[0]


def _pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = _only("daemonset.yaml", "DaemonSet")["spec"]["template"]["spec"]
    return spec


def _container() -> dict[str, Any]:
    containers: list[dict[str, Any]] = _pod_spec()["containers"]
    assert len(containers) == 1, [c["name"] for c in containers]
    return containers[0]


def _flags() -> dict[str, str]:
    """The container's options, by name."""
    return option_values(_container()["args"])


def test_daemonset_runs_the_driver_by_name_on_its_node_in_cluster() -> None:
    flags = _flags()
    assert flags["driver-name"] == DRIVER_NAME
    assert flags["node-name"] == "$(NODE_NAME)"
    assert "kubeconfig" not in flags, "in a pod the driver must use the in-cluster configuration"


def test_daemonset_node_name_comes_from_the_downward_api() -> None:
    env = {item["name"]: item for item in _container()["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_daemonset_runs_as_the_service_account_of_the_rbac() -> None:
    daemonset = _only("daemonset.yaml", "DaemonSet")
    account = _only("rbac.yaml", "ServiceAccount")
    assert daemonset["metadata"]["namespace"] == account["metadata"]["namespace"]
    assert _pod_spec()["serviceAccountName"] == account["metadata"]["name"]
    binding = _only("rbac.yaml", "ClusterRoleBinding")
    assert {"kind": "ServiceAccount", **account["metadata"]} in binding["subjects"]


def test_every_host_directory_the_driver_writes_is_mounted_from_the_same_host_path() -> None:
    flags = _flags()
    volumes = {volume["name"]: volume for volume in _pod_spec()["volumes"]}
    mounted: list[PurePosixPath] = []
    for mount in _container()["volumeMounts"]:
        host_path = volumes[mount["name"]].get("hostPath")
        assert host_path, f"volume {mount['name']} is not a hostPath"
        assert host_path["path"] == mount["mountPath"], f"{mount['name']} is mounted at a different path"
        assert not mount.get("readOnly"), f"{mount['mountPath']} is read-only, the driver writes there"
        mounted.append(PurePosixPath(mount["mountPath"]))
    kubelet_root = PurePosixPath(flags["kubelet-root"])
    needed = {
        "registration socket directory": kubelet_root / "plugins_registry",
        "DRA socket directory": kubelet_root / "plugins" / flags["driver-name"],
        "CDI directory": PurePosixPath(flags["cdi-dir"]),
        "state directory": PurePosixPath(flags["state-dir"]),
    }
    for what, path in needed.items():
        assert any(path.is_relative_to(root) for root in mounted), f"{what} {path} is not on a host mount"


def test_daemonset_is_not_privileged() -> None:
    context = _container().get("securityContext", {})
    assert not context.get("privileged"), "the driver only writes files and unix sockets"
    assert not _pod_spec().get("hostNetwork")


def test_cluster_role_grants_status_writes_for_exactly_the_deployed_driver_name() -> None:
    role = _only("rbac.yaml", "ClusterRole")
    rules = [rule for rule in role["rules"] if "resourceclaims/driver" in rule["resources"]]
    assert len(rules) == 1, rules
    assert rules[0]["resourceNames"] == [_flags()["driver-name"]]


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    manifests = sorted(path.name for path in DEPLOY.glob("*.yaml") if path.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == manifests
