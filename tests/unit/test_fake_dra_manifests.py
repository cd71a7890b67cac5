"""The fake driver's image and in-cluster manifests agree with its CLI, its RBAC and the pinned kubelet API.

The image holds the driver and dra_wire only, nothing of the engine.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from fake_dra.__main__ import parse_args
from fake_dra.config import DriverConfig

REPO = Path(__file__).resolve().parents[2]
DRIVER_DIR = REPO / "drivers" / "fake-dra"
# What the image may hold, relative to the build context (the repository root): the driver and dra_wire.
IMAGE_SOURCES = (PurePosixPath("drivers/dra-wire"), PurePosixPath("drivers/fake-dra"))
DEPLOY = DRIVER_DIR / "deploy"
DRIVER_NAME = "gpu.fake-dra.example.com"
NODE = "node-a"


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


def _driver_config() -> DriverConfig:
    """The container args as the driver parses them, with $(NODE_NAME) expanded the way the kubelet would."""
    args = [arg.replace("$(NODE_NAME)", NODE) for arg in _container()["args"]]
    return parse_args(args)


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in (DRIVER_DIR / "Dockerfile").read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        keyword, _, rest = (pending + line).strip().partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    assert not pending, f"Dockerfile ends inside a continued instruction: {pending!r}"
    return instructions


def _dockerfile_stages() -> list[tuple[str, list[tuple[str, str]]]]:
    """(base image, instructions of that stage) per FROM."""
    stages: list[tuple[str, list[tuple[str, str]]]] = []
    for keyword, rest in _dockerfile_instructions():
        if keyword == "FROM":
            stages.append((rest.split()[0], []))
        else:
            assert stages, f"{keyword} before the first FROM"
            stages[-1][1].append((keyword, rest))
    return stages


def test_daemonset_args_are_accepted_by_the_driver_cli() -> None:
    config = _driver_config()
    assert config.driver_name == DRIVER_NAME
    assert config.node_name == NODE
    assert config.kubeconfig is None, "in a pod the driver must use the in-cluster configuration"


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
    config = _driver_config()
    volumes = {volume["name"]: volume for volume in _pod_spec()["volumes"]}
    mounted: list[PurePosixPath] = []
    for mount in _container()["volumeMounts"]:
        host_path = volumes[mount["name"]].get("hostPath")
        assert host_path, f"volume {mount['name']} is not a hostPath"
        assert host_path["path"] == mount["mountPath"], f"{mount['name']} is mounted at a different path"
        assert not mount.get("readOnly"), f"{mount['mountPath']} is read-only, the driver writes there"
        mounted.append(PurePosixPath(mount["mountPath"]))
    needed = {
        "registration socket directory": config.registration_socket.parent,
        "DRA socket directory": config.dra_socket.parent,
        "CDI directory": config.cdi_dir,
        "state directory": config.state_dir,
    }
    for what, directory in needed.items():
        path = PurePosixPath(directory)
        assert any(path.is_relative_to(root) for root in mounted), f"{what} {path} is not on a host mount"


def test_daemonset_is_not_privileged() -> None:
    context = _container().get("securityContext", {})
    assert not context.get("privileged"), "the driver only writes files and unix sockets"
    assert not _pod_spec().get("hostNetwork")


def test_cluster_role_grants_status_writes_for_exactly_the_deployed_driver_name() -> None:
    role = _only("rbac.yaml", "ClusterRole")
    rules = [rule for rule in role["rules"] if "resourceclaims/driver" in rule["resources"]]
    assert len(rules) == 1, rules
    assert rules[0]["resourceNames"] == [_driver_config().driver_name]


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    manifests = sorted(path.name for path in DEPLOY.glob("*.yaml") if path.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == manifests


def test_dockerfile_entrypoint_runs_the_driver() -> None:
    entrypoints = [rest for keyword, rest in _dockerfile_stages()[-1][1] if keyword == "ENTRYPOINT"]
    assert len(entrypoints) == 1, entrypoints
    assert json.loads(entrypoints[0]) == ["python", "-m", "fake_dra"]


def test_dockerfile_needs_no_go_the_bindings_are_compiled_by_building_dra_wire() -> None:
    stages = _dockerfile_stages()
    assert [image for image, _ in stages] == [stages[-1][0]], f"expected one stage (no Go stage): {stages}"
    runs = " ".join(rest for keyword, rest in stages[-1][1] if keyword == "RUN")
    assert "go mod" not in runs and "generate(" not in runs, runs
    backend = tomllib.loads((REPO / "drivers" / "dra-wire" / "pyproject.toml").read_text())["build-system"]
    assert backend["build-backend"] == "dra_wire_build", f"dra-wire's build must compile the bindings: {backend}"


def test_dockerfile_has_nothing_of_the_engine() -> None:
    assert "dra_conformance" not in (DRIVER_DIR / "Dockerfile").read_text()


def test_dockerfile_copies_and_installs_only_the_driver_and_dra_wire() -> None:
    steps = _dockerfile_stages()[-1][1]
    copied: list[PurePosixPath] = []
    for keyword, rest in steps:
        if keyword == "COPY" and not rest.startswith("--from="):
            copied += [PurePosixPath(source) for source in rest.split()[:-1]]
    assert sorted(copied) == sorted(IMAGE_SOURCES), copied
    for source in copied:
        assert (REPO / source / "pyproject.toml").is_file(), f"{source} is not a distribution in the build context"
    installs = " ".join(rest for keyword, rest in steps if keyword == "RUN" and "pip install" in rest)
    for source in IMAGE_SOURCES:
        assert f"/src/{source}" in installs, f"{source} is copied but not installed"
    # fake-dra's dependency on dra-wire must come from the local copy, not an index.
    assert "--no-deps" not in installs


def test_reference_programs_depend_on_dra_wire_not_on_the_engine() -> None:
    for program in ("fake-dra", "fake-metrics"):
        project = tomllib.loads((REPO / "drivers" / program / "pyproject.toml").read_text())["project"]
        names = {re.split(r"[<>=!~\[;\s]", requirement, maxsplit=1)[0] for requirement in project["dependencies"]}
        assert "dra-wire" in names, program
        assert "dra-conformance" not in names, program
