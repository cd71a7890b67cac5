"""The kind backend's rendered cluster config, commands and driver manifests, and its stop without an engine.

No test here needs Docker or kind: the engine probe and the command runner are injected.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_conformance import paths, versions
from dra_conformance.backends import kind
from dra_conformance.backends.kind import (
    DriverImage,
    KindBackend,
    KindClusterConfig,
    KindFiles,
    container_process,
    driver_image,
    driver_manifests,
    kind_plan,
    setup_steps,
    teardown_step,
)
from dra_conformance.backends.registry import BACKENDS, make_backend
from dra_conformance.config import SuiteConfig
from dra_conformance.driver.profile import DriverProfile, ProcessTemplate, RunSpec, load_profile
from dra_conformance.errors import BackendError, UsageError
from dra_conformance.model.cluster import ClusterInfo
from tests.driver_flags import option_values

PROFILES = paths.fixtures_dir() / "profiles"
SHIPPED = ("reference-driver", "upstream-test-driver")
MINOR = versions.minor(versions.KUBERNETES)
CLUSTER = "dra-conformance"
# Node directories a kubelet plugin needs: registration sockets, plugin sockets, CDI specs.
KUBELET_DIRECTORIES = ("/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi")


def _profile(name: str) -> DriverProfile:
    return load_profile(PROFILES / f"{name}.yaml")


def _only(documents: Sequence[dict[str, Any]], kind_name: str) -> dict[str, Any]:
    found = [doc for doc in documents if doc["kind"] == kind_name]
    assert len(found) == 1, f"expected one {kind_name}, got {[doc['metadata']['name'] for doc in found]}"
    return found[0]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


# --- the kind cluster config ---------------------------------------------------------------------------------------


def test_cluster_config_sets_the_pinned_minors_feature_gates_and_runtime_config() -> None:
    config = kind.cluster_config()
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert config["kind"] == "Cluster"
    assert config["featureGates"] == versions.FEATURE_GATES[MINOR]
    # kind joins runtimeConfig into --runtime-config; it must say what the local backend's flag says.
    runtime_config = ",".join(f"{key}={value}" for key, value in sorted(config["runtimeConfig"].items()))
    assert runtime_config == versions.runtime_config_flag(), config["runtimeConfig"]
    assert all(isinstance(value, str) for value in config["runtimeConfig"].values()), "kind takes strings there"


def test_containerd_patch_enables_cdi_in_the_containerd_2_runtime_plugin() -> None:
    patches = kind.cluster_config()["containerdConfigPatches"]
    assert len(patches) == 1, patches
    runtime = tomllib.loads(patches[0])["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["enable_cdi"] is True, runtime
    assert "/var/run/cdi" in runtime["cdi_spec_dirs"], runtime


def test_every_node_runs_the_node_image_of_the_pinned_kubernetes_version() -> None:
    nodes = kind.cluster_config()["nodes"]
    images = {node["image"] for node in nodes}
    assert images == {f"kindest/node:{versions.KUBERNETES}"}, images
    assert images.pop().rpartition(":")[2] == versions.KUBERNETES


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_cluster_has_one_control_plane_and_the_requested_workers(workers: int) -> None:
    roles = [node["role"] for node in kind.cluster_config(workers)["nodes"]]
    assert roles == ["control-plane", *["worker"] * workers], roles


def test_default_cluster_has_two_workers_and_no_kubeadm_patch() -> None:
    config = kind.cluster_config()
    assert [node["role"] for node in config["nodes"]].count("worker") == 2
    # kind hands featureGates to every component, kubelets included: nothing is left for a kubeadm patch.
    assert "kubeadmConfigPatches" not in config


def test_a_cluster_without_workers_is_refused() -> None:
    with pytest.raises(UsageError, match="at least one worker"):
        kind.cluster_config(0)


# --- commands ------------------------------------------------------------------------------------------------------


def test_setup_commands_for_the_reference_driver(tmp_path: Path) -> None:
    files = KindFiles(tmp_path)
    profile = _profile("reference-driver")
    checkout = paths.CHECKOUT
    image = driver_image(profile, checkout)
    node = f"kindest/node:{versions.KUBERNETES}"
    kubectl = ["kubectl", "--kubeconfig", str(tmp_path / "kubeconfig")]
    own_files = ["--config", str(tmp_path / "kind-config.yaml"), "--kubeconfig", str(tmp_path / "kubeconfig")]
    steps = setup_steps(files, CLUSTER, image, profile)
    assert [list(step.argv) for step in steps] == [
        ["kind", "build", "node-image", "--type", "release", "--image", node, versions.KUBERNETES],
        [
            "docker",
            "build",
            "-f",
            str(checkout / "drivers/fake-dra-go/Dockerfile"),
            "-t",
            "fake-dra:dev",
            str(checkout),
        ],
        ["kind", "create", "cluster", "--name", CLUSTER, *own_files],
        ["kind", "load", "docker-image", "fake-dra:dev", "--name", CLUSTER],
        [*kubectl, "apply", "-f", str(tmp_path / "driver.yaml")],
        [*kubectl, "--namespace", "fake-dra", "rollout", "status", "daemonset/fake-dra", "--timeout=300s"],
    ]
    # The node image is built only when no image with its tag is there yet.
    assert steps[0].unless == ("docker", "image", "inspect", node)
    assert all(step.unless is None for step in steps[1:])


def test_a_vendor_drivers_image_is_loaded_not_built(tmp_path: Path) -> None:
    profile = _profile("upstream-test-driver")
    image = driver_image(profile)
    assert image == DriverImage(f"dra-conformance/test-driver.cdi.k8s.io:{versions.KUBERNETES}")
    argvs = [list(step.argv) for step in setup_steps(KindFiles(tmp_path), CLUSTER, image, profile)]
    assert not [argv for argv in argvs if argv[:2] == ["docker", "build"]], argvs
    assert ["kind", "load", "docker-image", image.name, "--name", CLUSTER] in argvs


def test_reference_image_without_its_dockerfile_is_only_loaded(tmp_path: Path) -> None:
    """In an installed wheel there is no Dockerfile: the image must be built from a checkout."""
    assert driver_image(_profile("reference-driver"), checkout=tmp_path) == DriverImage("fake-dra:dev")


def test_teardown_deletes_the_named_cluster_through_its_own_kubeconfig(tmp_path: Path) -> None:
    argv = list(teardown_step(KindFiles(tmp_path), CLUSTER).argv)
    assert argv == ["kind", "delete", "cluster", "--name", CLUSTER, "--kubeconfig", str(tmp_path / "kubeconfig")]


def test_written_files_hold_the_rendered_plan(tmp_path: Path) -> None:
    profile = _profile("reference-driver")
    plan = kind_plan(KindClusterConfig(state_dir=tmp_path, profile=profile.source), profile, driver_image(profile))
    kind.write_plan(plan)
    assert yaml.safe_load(plan.files.cluster_config.read_text()) == plan.cluster_config
    assert list(yaml.safe_load_all(plan.files.driver_manifests.read_text())) == plan.manifests
    script = plan.files.commands.read_text().splitlines()
    assert script[0] == "#!/bin/sh"
    assert "set -eu" in script
    assert script[-len(plan.setup) :] == [step.shell() for step in plan.setup]
    assert plan.files.commands.stat().st_mode & 0o100, "the script is executable"


# --- the driver's manifests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SHIPPED)
def test_daemonset_mounts_the_kubelet_plugin_directories_from_the_node(name: str) -> None:
    profile = _profile(name)
    daemonset = _only(driver_manifests(profile, driver_image(profile)), "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    host_paths = {volume["name"]: volume["hostPath"]["path"] for volume in pod["volumes"]}
    (container,) = pod["containers"]
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    for directory in KUBELET_DIRECTORIES:
        assert directory in mounts, f"{directory} not mounted: {sorted(mounts)}"
        assert host_paths[mounts[directory]] == directory, "mounted at the path the node's kubelet uses"
    assert container["imagePullPolicy"] == "IfNotPresent", "the image is loaded into the nodes, never pulled"


@pytest.mark.parametrize("name", SHIPPED)
def test_daemonset_runs_as_the_profiles_service_account(name: str) -> None:
    profile = _profile(name)
    account = profile.identity.service_account
    manifests = driver_manifests(profile, driver_image(profile))
    daemonset = _only(manifests, "DaemonSet")
    assert daemonset["metadata"]["namespace"] == account.namespace
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == account.name
    accounts = [doc for doc in manifests if doc["kind"] == "ServiceAccount"]
    assert [(doc["metadata"]["namespace"], doc["metadata"]["name"]) for doc in accounts] == [
        (account.namespace, account.name)
    ]


@pytest.mark.parametrize("name", SHIPPED)
def test_daemonset_takes_the_node_name_from_the_downward_api(name: str) -> None:
    profile = _profile(name)
    daemonset = _only(driver_manifests(profile, driver_image(profile)), "DaemonSet")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    first = container["env"][0]
    assert first == {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}, container["env"]
    assert "--node-name=$(NODE_NAME)" in container["args"], container["args"]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_placeholder_is_resolved_and_the_kubeconfig_flag_dropped(name: str) -> None:
    profile = _profile(name)
    manifests = driver_manifests(profile, driver_image(profile))
    rendered = [doc for doc in manifests if doc["kind"] in ("DaemonSet", "DeviceClass")]
    unresolved = [text for text in _strings(rendered) if "{" in text or "}" in text]
    assert not unresolved, unresolved
    (container,) = _only(manifests, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert not [arg for arg in container["args"] if "kubeconfig" in arg], "in a pod the driver uses in-cluster config"


@pytest.mark.parametrize("name", SHIPPED)
def test_manifests_hold_the_rbac_files_as_they_are_and_each_object_once(name: str) -> None:
    profile = _profile(name)
    manifests = driver_manifests(profile, driver_image(profile))
    rbac = [doc for path in profile.identity.rbac for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert all(doc in manifests for doc in rbac)
    keys = [(doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"]) for doc in manifests]
    assert len(keys) == len(set(keys)), keys
    namespace = profile.identity.service_account.namespace
    assert manifests[0] == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}


@pytest.mark.parametrize("name", SHIPPED)
def test_device_classes_the_profile_creates_select_its_driver(name: str) -> None:
    profile = _profile(name)
    classes = [doc for doc in driver_manifests(profile, driver_image(profile)) if doc["kind"] == "DeviceClass"]
    assert [doc["metadata"]["name"] for doc in classes] == [spec.name for spec in profile.device_classes if spec.create]
    for doc in classes:
        assert doc["spec"]["selectors"] == [{"cel": {"expression": f'device.driver == "{profile.driver}"'}}]


def test_reference_driver_runs_with_in_cluster_configuration_and_the_standard_kubelet_root() -> None:
    daemonset = _only(driver_manifests(_profile("reference-driver"), DriverImage("fake-dra:dev")), "DaemonSet")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["reference_driver_go"], "the Go build, on the image's PATH"
    options = option_values(container["args"])
    assert options["node-name"] == "$(NODE_NAME)", options
    assert "kubeconfig" not in options, "no --kubeconfig: the driver reads its in-cluster configuration"
    assert options.get("kubelet-root", "/var/lib/kubelet") == "/var/lib/kubelet", options


def test_upstream_driver_runs_its_binary_from_the_image_path_and_gets_its_socket_directory() -> None:
    profile = _profile("upstream-test-driver")
    process = container_process(profile)
    assert process.command == ["dra_test_driver", "kubelet-plugin"]
    pod = _only(driver_manifests(profile, driver_image(profile)), "DaemonSet")["spec"]["template"]["spec"]
    socket_dir = "/var/lib/kubelet/plugins/test-driver.cdi.k8s.io"
    assert {"path": socket_dir, "type": "DirectoryOrCreate"} in [volume["hostPath"] for volume in pod["volumes"]]


def _with_run(profile: DriverProfile, process: ProcessTemplate) -> DriverProfile:
    return dataclasses.replace(profile, run=RunSpec(process))


def test_kubeconfig_as_a_separate_value_and_in_env_is_dropped() -> None:
    process = ProcessTemplate(
        command=("{bin:my_driver}",),
        args=("--kubeconfig", "{kubeconfig}", "--data={data_dir}", "--node={node}"),
        env={"KUBECONFIG": "{kubeconfig}", "WHERE": "{node}"},
    )
    rendered = container_process(_with_run(_profile("reference-driver"), process))
    assert rendered.command == ["my_driver"]
    assert rendered.args == ["--data=/var/lib/dra-conformance/gpu.fake-dra.example.com", "--node=$(NODE_NAME)"]
    assert rendered.env == {"WHERE": "$(NODE_NAME)"}


def test_kubeconfig_inside_another_value_is_refused_in_one_line() -> None:
    process = ProcessTemplate(command=("{python}",), args=("--config=cluster:{kubeconfig}",))
    with pytest.raises(UsageError, match=r"has no meaning in a pod") as raised:
        container_process(_with_run(_profile("reference-driver"), process))
    assert "\n" not in str(raised.value)


def test_a_profile_without_run_cannot_be_deployed() -> None:
    profile = dataclasses.replace(_profile("reference-driver"), run=None)
    with pytest.raises(UsageError, match="has no `run` section"):
        container_process(profile)


# --- the backend ---------------------------------------------------------------------------------------------------


class RecordingRunner:
    """Records every command; answers with exit status 0 unless told otherwise for a program's argv."""

    def __init__(self, failing: dict[tuple[str, ...], str] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.failing = failing or {}

    def __call__(self, argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        error = self.failing.get(tuple(argv))
        return subprocess.CompletedProcess(list(argv), 1 if error else 0, "", error or "")


def _backend(tmp_path: Path, *, engine: bool, runner: RecordingRunner, owner_pid: int | None = None) -> KindBackend:
    config = KindClusterConfig(state_dir=tmp_path / "kind", owner_pid=owner_pid)
    return KindBackend(config, engine_running=lambda: engine, run=runner)


def test_start_without_an_engine_writes_the_files_and_stops_in_one_line(tmp_path: Path) -> None:
    runner = RecordingRunner()
    backend = _backend(tmp_path, engine=False, runner=runner)
    with pytest.raises(UsageError) as raised:
        backend.start()
    message = str(raised.value)
    assert "\n" not in message, message
    assert "Docker (or podman) engine" in message
    assert str(tmp_path / "kind") in message
    for written in ("kind-config.yaml", "driver.yaml", "commands.sh"):
        assert (tmp_path / "kind" / written).is_file(), written
    assert runner.calls == [], "nothing runs without an engine"
    assert backend.info() is None


def test_stop_and_release_without_an_engine_run_nothing(tmp_path: Path) -> None:
    runner = RecordingRunner()
    backend = _backend(tmp_path, engine=False, runner=runner)
    backend.stop()
    backend.release(owner_pid=1)
    assert runner.calls == []


def test_start_with_an_engine_runs_the_plan_in_order_and_attaches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class AttachedCluster:
        def __init__(self, config: Any) -> None:
            self.kubeconfig = config.kubeconfig

        def start(self) -> ClusterInfo:
            return ClusterInfo(backend="existing", kubeconfig=self.kubeconfig, server="https://127.0.0.1:6443")

    monkeypatch.setattr(kind, "ExistingBackend", AttachedCluster)
    runner = RecordingRunner()
    backend = _backend(tmp_path, engine=True, runner=runner, owner_pid=4242)
    info = backend.start()
    node = f"kindest/node:{versions.KUBERNETES}"
    # The probe for the node image answered 0: that image is there, so it is not built again.
    assert runner.calls == [
        ["docker", "image", "inspect", node],
        *(list(step.argv) for step in backend.plan.setup[1:]),
    ]
    assert info.backend == "kind"
    assert info.details["state_dir"] == str(tmp_path / "kind")
    assert json.loads((tmp_path / "kind" / "owner.json").read_text()) == {"owner_pid": 4242}

    runner.calls.clear()
    assert backend.ends_with(4242) and not backend.ends_with(1)
    backend.release(owner_pid=1)
    assert runner.calls == [], "another process's run leaves the cluster alone"
    backend.release(owner_pid=4242)
    assert runner.calls == [list(backend.plan.teardown.argv)]


def test_a_failing_command_is_one_line_with_its_last_output_line(tmp_path: Path) -> None:
    runner = RecordingRunner()
    backend = _backend(tmp_path, engine=True, runner=runner)
    (create,) = [step.argv for step in backend.plan.setup if step.argv[:3] == ("kind", "create", "cluster")]
    runner.failing[create] = "ERROR: failed to create cluster\nnode(s) already exist for a cluster"
    with pytest.raises(BackendError) as raised:
        backend.start()
    message = str(raised.value)
    assert "\n" not in message
    assert message.endswith("failed (exit 1): node(s) already exist for a cluster"), message


# --- the registry --------------------------------------------------------------------------------------------------


def test_kind_is_a_registered_backend_writing_to_the_cluster_state_dir(tmp_path: Path) -> None:
    assert "kind" in BACKENDS
    backend = make_backend(SuiteConfig(backend="kind", state_dir=tmp_path, nodes=3))
    assert isinstance(backend, KindBackend)
    assert backend.plan.files.root == tmp_path
    assert [node["role"] for node in backend.plan.cluster_config["nodes"]].count("worker") == 3
