"""The `kind` backend: a kind v0.33 cluster with the DRA gates, runtime config and CDI, and the driver under test.

kind runs its nodes as containers, so it needs a container engine (Docker, or podman through kind's podman
provider). Everything the backend does is first rendered here as plain data: the kind `Cluster` config, the driver's
manifests from its profile (a DaemonSet running its image) and the command lines that build, create, load and apply
them. That data is what the unit tests check, on machines without an engine. `KindBackend.start` writes it to its
state directory; without a running engine it stops there with one line naming that directory, with one it runs the
commands and attaches to the new cluster as the `existing` backend would.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

import yaml

from dra_conformance import paths, versions
from dra_conformance.backends.existing import ExistingBackend, ExistingClusterConfig
from dra_conformance.driver.daemonset import daemon_set, host_path_volume
from dra_conformance.driver.profile import BINARY_PLACEHOLDER, DriverProfile, load_profile, render
from dra_conformance.errors import BackendError, ConformanceError, UsageError
from dra_conformance.kube.builders import RESOURCE_API, Manifest, service_account
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.timeouts import Timeouts

# The kind release whose config API and commands this module writes for.
KIND_RELEASE = "v0.33.0"
KIND_API_VERSION = "kind.x-k8s.io/v1alpha4"
NODE_IMAGE_REPOSITORY = "kindest/node"
DEFAULT_CLUSTER_NAME = "dra-conformance"

# Where a kind node's kubelet keeps plugin sockets, and where containerd reads CDI specs that drivers write.
KUBELET_ROOT = PurePosixPath("/var/lib/kubelet")
CDI_DIR = PurePosixPath("/var/run/cdi")
# Per-driver state on the node (prepared claims survive a pod restart there); the driver name is the last part.
DRIVER_DATA_ROOT = PurePosixPath("/var/lib/dra-conformance")
# containerd 2 enables CDI by default; the patch says so explicitly, with the directory drivers write to. The table
# is the config-version-3 plugin name: containerd 2 keeps it when it migrates a version-2 file, so the patch holds
# whichever version the node image's config.toml declares.
CONTAINERD_CDI_PATCH = f"""\
[plugins."io.containerd.cri.v1.runtime"]
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "{CDI_DIR}"]
"""

# The reference driver's image, as drivers/fake-dra-go/Dockerfile and its deploy/daemonset.yaml name it.
REFERENCE_IMAGE = "fake-dra:dev"
REFERENCE_DOCKERFILE = PurePosixPath("drivers/fake-dra-go/Dockerfile")
# Another driver's image, which its vendor builds: `dra-conformance/<driver>:<profile version>`.
VENDOR_IMAGE_REPOSITORY = "dra-conformance"
# `{python}` inside an image: the interpreter on its PATH.
IMAGE_PYTHON = "python"
CONTAINER_NAME = "kubelet-plugin"
# `{node}` in a pod: Kubernetes expands $(NODE_NAME) in command, args and later env values.
NODE_NAME_ENV = "NODE_NAME"
KUBECONFIG_PLACEHOLDER = "{kubeconfig}"

# `docker info` answers in well under a second from a running daemon; 20 s covers a daemon that is still starting.
ENGINE_PROBE_TIMEOUT = 20.0
# The DaemonSet's pods start once each new node's CNI is ready (a minute or two after `kind create cluster` returns),
# then the loaded image starts in seconds.
DRIVER_ROLLOUT_TIMEOUT = 300.0


# --- the kind cluster config ---------------------------------------------------------------------------------------


def node_image(kubernetes: str = versions.KUBERNETES) -> str:
    """The kind node image of a Kubernetes version (a tag: kind publishes digests per kind release)."""
    return f"{NODE_IMAGE_REPOSITORY}:{kubernetes}"


def cluster_config(workers: int = 2, kubernetes: str = versions.KUBERNETES) -> Manifest:
    """The kind `Cluster`: one control plane and `workers` workers, the version's DRA gates, runtime config and CDI.

    kind passes `featureGates` to every component (kubelets included), so no kubeadm patch is needed.
    """
    if workers < 1:
        raise UsageError(f"a kind cluster for the suites needs at least one worker, got {workers}")
    minor = versions.minor(kubernetes)
    image = node_image(kubernetes)
    return {
        "apiVersion": KIND_API_VERSION,
        "kind": "Cluster",
        "featureGates": dict(sorted(versions.FEATURE_GATES[minor].items())),
        # kind's runtimeConfig is a string map: each entry becomes `<key>=<value>` in --runtime-config.
        "runtimeConfig": {key: str(value).lower() for key, value in sorted(versions.RUNTIME_CONFIG[minor].items())},
        "containerdConfigPatches": [CONTAINERD_CDI_PATCH],
        "nodes": [
            {"role": "control-plane", "image": image},
            *({"role": "worker", "image": image} for _ in range(workers)),
        ],
    }


# --- the driver under test in pods ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DriverImage:
    """The image the driver under test runs from on kind nodes, and how to build it when this project can."""

    name: str
    # argv of the build, None when the image is built elsewhere (a vendor's driver) and only loaded here.
    build: tuple[str, ...] | None = None


def driver_image(profile: DriverProfile, checkout: Path = paths.CHECKOUT) -> DriverImage:
    """The reference driver is built from its Dockerfile (in a checkout); another driver's image is its vendor's."""
    if profile.source.resolve() == paths.reference_driver_profile().resolve():
        dockerfile = checkout / REFERENCE_DOCKERFILE
        if not dockerfile.is_file():
            return DriverImage(REFERENCE_IMAGE)
        # The build context is the repository root: the image builds drivers/fake-dra-go.
        return DriverImage(
            REFERENCE_IMAGE, ("docker", "build", "-f", str(dockerfile), "-t", REFERENCE_IMAGE, str(checkout))
        )
    return DriverImage(f"{VENDOR_IMAGE_REPOSITORY}/{profile.driver}:{profile.version or 'dev'}")


class _InPodValues(Mapping[str, str]):
    """What the profile's placeholders stand for inside the driver's pod; `{bin:X}` is the binary X on its PATH."""

    def __init__(self, profile: DriverProfile) -> None:
        plugins_dir = KUBELET_ROOT / "plugins" / profile.driver
        self._values = {
            "driver": profile.driver,
            "node": f"$({NODE_NAME_ENV})",
            "kubelet_root": str(KUBELET_ROOT),
            "registrar_dir": str(KUBELET_ROOT / "plugins_registry"),
            "plugins_dir": str(plugins_dir),
            "socket_path": str(plugins_dir / "dra.sock"),
            "cdi_dir": str(CDI_DIR),
            "data_dir": str(DRIVER_DATA_ROOT / profile.driver),
            "python": IMAGE_PYTHON,
            "devices": str(profile.devices.per_node),
        }

    def __getitem__(self, name: str) -> str:
        prefix = f"{BINARY_PLACEHOLDER}:"
        if name.startswith(prefix):
            return name.removeprefix(prefix)
        return self._values[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name.startswith(f"{BINARY_PLACEHOLDER}:") or name in self._values)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def _no_kubeconfig(where: str, text: str) -> UsageError:
    return UsageError(
        f"{where}: {text!r}: {KUBECONFIG_PLACEHOLDER} has no meaning in a pod, where the driver uses its in-cluster "
        f"configuration; give it as a whole flag value (--kubeconfig={KUBECONFIG_PLACEHOLDER}) so it can be dropped"
    )


def _args_without_kubeconfig(args: Sequence[str], where: str) -> list[str]:
    """`args` without the flag that passes `{kubeconfig}` (`--flag={kubeconfig}` or `--flag {kubeconfig}`)."""
    kept: list[str] = []
    for arg in args:
        if KUBECONFIG_PLACEHOLDER not in arg:
            kept.append(arg)
            continue
        flag, equals, value = arg.partition("=")
        if flag.startswith("-") and equals and value == KUBECONFIG_PLACEHOLDER:
            continue
        if arg == KUBECONFIG_PLACEHOLDER and kept and kept[-1].startswith("-") and "=" not in kept[-1]:
            kept.pop()
            continue
        raise _no_kubeconfig(where, arg)
    return kept


@dataclass(frozen=True)
class ContainerProcess:
    """The driver's container command line and environment, placeholders filled in for the pod."""

    command: list[str]
    args: list[str]
    env: dict[str, str]


def container_process(profile: DriverProfile) -> ContainerProcess:
    """Render the profile's `run` process for a pod: in-node paths, the node from the downward API, no kubeconfig."""
    if profile.run is None:
        raise UsageError(
            f"{profile.source}: driver {profile.driver} has no `run` section: the kind backend cannot run it"
        )
    where = f"{profile.source}: run"
    process = profile.run.process
    values = _InPodValues(profile)
    for word in process.command:
        if KUBECONFIG_PLACEHOLDER in word:
            raise _no_kubeconfig(where, word)
    env: dict[str, str] = {}
    for name, value in process.env.items():
        if value == KUBECONFIG_PLACEHOLDER:
            continue  # e.g. KUBECONFIG={kubeconfig}: unset, the in-cluster configuration applies
        if KUBECONFIG_PLACEHOLDER in value:
            raise _no_kubeconfig(where, value)
        env[name] = render(value, values)
    return ContainerProcess(
        command=[render(word, values) for word in process.command],
        args=[render(arg, values) for arg in _args_without_kubeconfig(process.args, where)],
        env=env,
    )


def _host_directories(profile: DriverProfile) -> list[tuple[str, str]]:
    """(volume name, path) of every node directory the driver uses, mounted at the same path in its pod."""
    values = _InPodValues(profile)
    directories = [
        ("plugins-registry", values["registrar_dir"]),
        ("plugins", str(KUBELET_ROOT / "plugins")),
        ("cdi", values["cdi_dir"]),
        ("data", values["data_dir"]),
    ]
    assert profile.run is not None
    # A directory the driver expects to exist but does not create: a hostPath of type DirectoryOrCreate makes it.
    for index, directory in enumerate(profile.run.create_dirs):
        path = render(directory, values)
        if path not in {known for _, known in directories}:
            directories.append((f"create-dir-{index}", path))
    return directories


def driver_daemonset(profile: DriverProfile, image: DriverImage) -> Manifest:
    """A DaemonSet running the driver on every node, as its ServiceAccount, with the kubelet's plugin directories."""
    process = container_process(profile)
    account = profile.identity.service_account
    labels = {"app.kubernetes.io/name": account.name, "app.kubernetes.io/part-of": "dra-conformance"}
    directories = _host_directories(profile)
    node_name = {"name": NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    container: Manifest = {
        "name": CONTAINER_NAME,
        "image": image.name,
        # Loaded into the nodes by `kind load docker-image`, never pulled from a registry.
        "imagePullPolicy": "IfNotPresent",
        "command": process.command,
        "args": process.args,
        # NODE_NAME first: later values may refer to it as $(NODE_NAME).
        "env": [node_name, *({"name": name, "value": value} for name, value in process.env.items())],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            # Root without capabilities still owns the root-owned host directories it writes to.
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": name, "mountPath": path} for name, path in directories],
    }
    pod_spec: Manifest = {
        "serviceAccountName": account.name,
        # Every node, control plane included, as a kubelet plugin is deployed.
        "tolerations": [{"operator": "Exists"}],
        "containers": [container],
        "volumes": [host_path_volume(name, path) for name, path in directories],
    }
    selector = {"app.kubernetes.io/name": account.name}
    return daemon_set(account.name, account.namespace, labels, pod_spec, selector=selector)


def device_classes(profile: DriverProfile) -> list[Manifest]:
    """The DeviceClasses the profile asks the suite to create (`create: true`); selectors name the driver."""
    return [
        {
            "apiVersion": RESOURCE_API,
            "kind": "DeviceClass",
            "metadata": {"name": spec.name},
            "spec": {
                "selectors": [{"cel": {"expression": render(s, {"driver": profile.driver})}} for s in spec.selectors]
            },
        }
        for spec in profile.device_classes
        if spec.create
    ]


def _identity(document: Manifest) -> tuple[str, str, str | None, str]:
    metadata = document.get("metadata", {})
    return document["apiVersion"], document["kind"], metadata.get("namespace"), metadata["name"]


def driver_manifests(profile: DriverProfile, image: DriverImage) -> list[Manifest]:
    """Everything `kubectl apply` installs for the driver, Namespaces first.

    The profile's RBAC files go in as they are; the Namespace and ServiceAccount are added only when those files do
    not already hold them.
    """
    account = profile.identity.service_account
    rbac = [doc for path in profile.identity.rbac for doc in yaml.safe_load_all(path.read_text()) if doc]
    declared = {_identity(doc) for doc in rbac}
    generated = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": account.namespace}},
        service_account(account.name, account.namespace),
    ]
    documents = [doc for doc in generated if _identity(doc) not in declared]
    documents += [*rbac, driver_daemonset(profile, image), *device_classes(profile)]
    # Namespaced objects need their Namespace first; the order is otherwise kept (sorted is stable).
    return sorted(documents, key=lambda doc: doc["kind"] != "Namespace")


# --- files and commands --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KindFiles:
    """Where the backend writes what it rendered, under its state directory."""

    root: Path

    @property
    def cluster_config(self) -> Path:
        """The kind `Cluster` config (`kind create cluster --config`)."""
        return self.root / "kind-config.yaml"

    @property
    def driver_manifests(self) -> Path:
        """The driver's manifests (`kubectl apply -f`)."""
        return self.root / "driver.yaml"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig kind writes (`--kubeconfig`), so the user's own is never touched."""
        return self.root / "kubeconfig"

    @property
    def commands(self) -> Path:
        """The setup commands as a shell script, for a machine with a container engine."""
        return self.root / "commands.sh"

    @property
    def owner(self) -> Path:
        """Which process created the cluster (`release` deletes it only for that process)."""
        return self.root / "owner.json"


@dataclass(frozen=True)
class Step:
    """One command of the setup; skipped when the probe `unless` exits 0."""

    argv: tuple[str, ...]
    unless: tuple[str, ...] | None = None

    def shell(self) -> str:
        """The step as one line of a POSIX shell script."""
        if self.unless is None:
            return shlex.join(self.argv)
        return f"{shlex.join(self.unless)} >/dev/null 2>&1 || {shlex.join(self.argv)}"


def setup_steps(
    files: KindFiles, cluster: str, image: DriverImage, profile: DriverProfile, kubernetes: str = versions.KUBERNETES
) -> list[Step]:
    """Build the node image and the driver's image, create the cluster, load the image, install the driver."""
    node = node_image(kubernetes)
    kubectl = ("kubectl", "--kubeconfig", str(files.kubeconfig))
    create_files = ("--config", str(files.cluster_config), "--kubeconfig", str(files.kubeconfig))
    account = profile.identity.service_account
    wait = f"--timeout={DRIVER_ROLLOUT_TIMEOUT:g}s"
    steps = [
        # kind v0.33.0 publishes a v1.37.0 node image, not the pinned patch: build it from the release binaries
        # (unless an image with that tag is already there).
        Step(
            ("kind", "build", "node-image", "--type", "release", "--image", node, kubernetes),
            unless=("docker", "image", "inspect", node),
        ),
    ]
    if image.build is not None:
        steps.append(Step(image.build))
    steps += [
        Step(("kind", "create", "cluster", "--name", cluster, *create_files)),
        Step(("kind", "load", "docker-image", image.name, "--name", cluster)),
        Step((*kubectl, "apply", "-f", str(files.driver_manifests))),
        Step((*kubectl, "--namespace", account.namespace, "rollout", "status", f"daemonset/{account.name}", wait)),
    ]
    return steps


def teardown_step(files: KindFiles, cluster: str) -> Step:
    """Delete the cluster (kind removes its context from our kubeconfig); a missing cluster is no error to kind."""
    return Step(("kind", "delete", "cluster", "--name", cluster, "--kubeconfig", str(files.kubeconfig)))


def commands_script(steps: Sequence[Step], teardown: Step) -> str:
    """The setup steps as a shell script that stops at the first failure."""
    header = [
        "#!/bin/sh",
        f"# Written by dra-conformance for kind {KIND_RELEASE}; run it where a Docker (or podman) engine runs.",
        "# Delete the cluster afterwards with:",
        f"#   {teardown.shell()}",
        "set -eu",
    ]
    return "\n".join([*header, *(step.shell() for step in steps)]) + "\n"


class _BlockStringDumper(yaml.SafeDumper):
    """Writes multi-line strings (the containerd patch) as literal blocks, readable as the TOML they hold."""


def _represent_string(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_BlockStringDumper.add_representer(str, _represent_string)


def _yaml(documents: Sequence[Manifest]) -> str:
    return yaml.dump_all(documents, Dumper=_BlockStringDumper, sort_keys=False, default_flow_style=False)


# --- the backend ---------------------------------------------------------------------------------------------------


def docker_engine_running() -> bool:
    """Whether `docker info` reaches a running engine (podman's docker-compatible CLI answers too)."""
    try:
        probe = subprocess.run(
            ["docker", "info"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=ENGINE_PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def run_command(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run `argv` to completion, capturing its output; a missing program or a hung one is one line."""
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise UsageError(f"kind backend: {argv[0]} is not on PATH (it needs kind {KIND_RELEASE} and kubectl)") from None
    except subprocess.TimeoutExpired:
        raise BackendError(f"kind backend: {shlex.join(argv)} did not finish within {timeout:g}s") from None


CommandRunner = Callable[[Sequence[str], float], "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class KindClusterConfig:
    """Settings of one kind cluster."""

    # Where the rendered files (and kind's kubeconfig) go.
    state_dir: Path = field(default_factory=lambda: paths.default_state_root() / "kind")
    # The driver under test, deployed as a DaemonSet (default: the reference driver).
    profile: Path = field(default_factory=paths.reference_driver_profile)
    cluster_name: str = DEFAULT_CLUSTER_NAME
    workers: int = 2
    kubernetes: str = versions.KUBERNETES
    # `build` bounds each command (image builds are the long ones).
    timeouts: Timeouts = field(default_factory=Timeouts)
    # The process that owns a cluster this backend creates (`release`); None lets it outlive the caller.
    owner_pid: int | None = None


@dataclass(frozen=True)
class KindPlan:
    """Everything the backend renders for one cluster."""

    files: KindFiles
    cluster_config: Manifest
    manifests: list[Manifest]
    setup: list[Step]
    teardown: Step


def kind_plan(config: KindClusterConfig, profile: DriverProfile, image: DriverImage) -> KindPlan:
    """Render the config, manifests and commands of the cluster `config` describes."""
    files = KindFiles(config.state_dir)
    return KindPlan(
        files=files,
        cluster_config=cluster_config(config.workers, config.kubernetes),
        manifests=driver_manifests(profile, image),
        setup=setup_steps(files, config.cluster_name, image, profile, config.kubernetes),
        teardown=teardown_step(files, config.cluster_name),
    )


def write_plan(plan: KindPlan) -> None:
    """Write the kind config, the driver's manifests and the command script."""
    plan.files.root.mkdir(parents=True, exist_ok=True)
    plan.files.cluster_config.write_text(_yaml([plan.cluster_config]))
    plan.files.driver_manifests.write_text(_yaml(plan.manifests))
    plan.files.commands.write_text(commands_script(plan.setup, plan.teardown))
    plan.files.commands.chmod(0o755)


class KindBackend:
    """Creates a kind cluster for the driver under test where a container engine runs; elsewhere, only its files."""

    name = "kind"

    def __init__(
        self,
        config: KindClusterConfig,
        *,
        engine_running: Callable[[], bool] = docker_engine_running,
        run: CommandRunner = run_command,
    ) -> None:
        """Render the plan (a bad profile or worker count is a UsageError here); only `start` writes files."""
        self.config = config
        self.profile = load_profile(config.profile)
        self.plan = kind_plan(config, self.profile, driver_image(self.profile))
        self._engine_running = engine_running
        self._run = run

    def start(self) -> ClusterInfo:
        """Write the files; without an engine stop in one line, with one create the cluster (or reuse it)."""
        write_plan(self.plan)
        files = self.plan.files
        if not self._engine_running():
            raise UsageError(
                f"kind backend: kind needs a running Docker (or podman) engine and `docker info` reached none; "
                f"its config, manifests and commands are in {files.root} (run {files.commands} where one runs)"
            )
        running = self.info()
        if running is not None:
            return running
        if self.config.owner_pid is not None:
            # Before the first step, so a run that fails halfway still deletes what it created.
            files.owner.write_text(json.dumps({"owner_pid": self.config.owner_pid}))
        for step in self.plan.setup:
            self._step(step)
        return self._described(ExistingBackend(ExistingClusterConfig(files.kubeconfig)).start())  # with the preflight

    def info(self) -> ClusterInfo | None:
        """Describe the cluster when its kubeconfig exists and it answers; None otherwise."""
        if not self.plan.files.kubeconfig.is_file() or not self._engine_running():
            return None
        try:
            info = ExistingBackend(ExistingClusterConfig(self.plan.files.kubeconfig)).info()
        except ConformanceError:
            return None
        return None if info is None else self._described(info)

    def stop(self) -> None:
        """Delete the cluster (kind does nothing for a cluster that does not exist); without an engine, nothing."""
        if not self._engine_running():
            return
        self._step(self.plan.teardown)
        self.plan.files.owner.unlink(missing_ok=True)

    def release(self, owner_pid: int) -> None:
        """Delete the cluster if `owner_pid` created it; leave clusters created by others running."""
        if self.ends_with(owner_pid):
            self.stop()

    def ends_with(self, owner_pid: int) -> bool:
        """Whether `owner_pid` created the cluster (then its release deletes it)."""
        try:
            return bool(json.loads(self.plan.files.owner.read_text()).get("owner_pid") == owner_pid)
        except (OSError, ValueError):
            return False

    def _described(self, info: ClusterInfo) -> ClusterInfo:
        details = {**info.details, "state_dir": str(self.plan.files.root), "cluster": self.config.cluster_name}
        return replace(info, backend=self.name, details=details)

    def _step(self, step: Step) -> None:
        timeout = self.config.timeouts.build
        if step.unless is not None and self._run(step.unless, timeout).returncode == 0:
            return
        result = self._run(step.argv, timeout)
        if result.returncode != 0:
            output = (result.stderr or result.stdout or "").strip().splitlines()
            last = output[-1] if output else "no output"
            raise BackendError(f"kind backend: {shlex.join(step.argv)} failed (exit {result.returncode}): {last}")
