"""`dra-conformance sonobuoy-plugin`: the Sonobuoy plugin definitions that run the suite in-cluster, and their RBAC.

A plugin's container runs `dra-conformance sonobuoy-entry` with the driver profile mounted from the plugin's
ConfigMap. Its pod runs as a ServiceAccount of its own, bound to a ClusterRole with exactly the rights
`dra_conformance/kube/rights.py` declares (the rights the preflight asks for and `ci-clusterrole.yaml` grants), not
Sonobuoy's own account (cluster-admin by default). Sonobuoy reads one document per plugin file, so the
ServiceAccount and its RBAC are a manifest of their own, applied before the run.

Three shapes (`--part`, see `sonobuoy/part.py`):

- whole: one Job running every check (the plugin as it was first written; checks that need a node's kubelet root
  are not applicable in it);
- cluster: the same Job running the cluster-level checks only (`-m "not node_level"`);
- node: a DaemonSet (plugin `dra-conformance-node`) on each driver node, running the node-level checks
  (`-m node_level`) with the host's kubelet root mounted at its own path, on the host's network, tolerating every
  taint, after the cluster part (Sonobuoy's plugin `order`): the suite's node agent then finds the node's
  files on "this machine", and the driver's sockets are reached in place. `dra-conformance sonobuoy run` runs both
  and merges their verdicts (`sonobuoy/merge.py`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import yaml

from dra_conformance import __version__
from dra_conformance.driver.profile import load_profile
from dra_conformance.errors import UsageError
from dra_conformance.kube import host_access, rights
from dra_conformance.sonobuoy import protocol
from dra_conformance.sonobuoy.part import Part, selection_args

PLUGIN_NAME = "dra-conformance"
# The node part's DaemonSet plugin: its results land under plugins/<name>/results/<node>/.
NODE_PLUGIN_NAME = "dra-conformance-node"
DAEMONSET_DRIVER = "DaemonSet"
# Sonobuoy starts a plugin once every plugin of a lower order is done: the node part (which rolls the driver's
# DaemonSet and leases the driver's nodes) never runs beside the cluster part.
NODE_PART_ORDER = 1
DEFAULT_KUBELET_ROOT = PurePosixPath("/var/lib/kubelet")
# The CDI spec directories containerd reads by default; the node part mounts them where the node keeps them, read-only.
NODE_CDI_DIRS = (PurePosixPath("/etc/cdi"), PurePosixPath("/var/run/cdi"))
# Under the kubelet root: the node part's temporary files, among them the kubelet-side interposer's socket, which
# the node's kubelet must reach at the same path (unix socket paths are limited to 107 bytes: kept short).
SCRATCH_SUBDIR = "plugins/dra-conformance-sonobuoy"
SERVICE_ACCOUNT = "dra-conformance"
# Not rights.CLUSTER_ROLE_NAME: deleting the plugin's RBAC must not take away a CI identity's role of the same rules.
CLUSTER_ROLE = "dra-conformance-sonobuoy"
# The suite image `dra-conformance image build` writes (dra_conformance/image/recipes.py SUITE: repository, and
# the project's version as tag); tests/unit/test_sonobuoy_plugin.py keeps the two in step once both are merged.
SUITE_IMAGE_REPOSITORY = "dra-conformance.io/suite"
DEFAULT_IMAGE = f"{SUITE_IMAGE_REPOSITORY}:{__version__}"
# The plugin's container runs `dra-conformance sonobuoy-entry` (dra_conformance/cli.py) under a shell that writes
# Sonobuoy's done file itself should the entry end without one (it could not even start: a broken image, a missing
# module), so the worker sends a failed result at once instead of waiting out the plugin's timeout (6 h by default).
FALLBACK_SCRIPT = (
    r"""dra-conformance sonobuoy-entry "$@"; code=$?
results="${@ENV@:-@DIR@}"
if [ ! -f "$results/@DONE@" ]; then
  printf 'name: dra-conformance\nstatus: failed\nitems:\n- name: dra-conformance sonobuoy-entry exited with code %s'\
' before writing results (see the plugin container log)\n  status: failed\n' "$code" > "$results/@FILE@"
  printf '%s' "$results/@FILE@" > "$results/@DONE@"
fi
exit "$code"
""".replace("@ENV@", protocol.RESULTS_DIR_ENV)
    .replace("@DIR@", str(protocol.RESULTS_DIR))
    .replace("@DONE@", protocol.DONE_FILE)
    .replace("@FILE@", protocol.RESULTS_FILE)
)
# The node part's container: a DaemonSet restarts a container that exits, so after the entry (run once: its done file
# survives a restart in the results volume) the shell waits until Sonobuoy deletes the DaemonSet.
NODE_SCRIPT = (
    r"""results="${@ENV@:-@DIR@}"
if [ ! -f "$results/@DONE@" ]; then
  dra-conformance sonobuoy-entry "$@"; code=$?
  if [ ! -f "$results/@DONE@" ]; then
    printf 'name: dra-conformance\nstatus: failed\nitems:\n- name: dra-conformance sonobuoy-entry exited with code %s'\
' before writing results (see the plugin container log)\n  status: failed\n' "$code" > "$results/@FILE@"
    printf '%s' "$results/@FILE@" > "$results/@DONE@"
  fi
fi
trap 'exit 0' TERM
while :; do sleep 3600 & wait $!; done
""".replace("@ENV@", protocol.RESULTS_DIR_ENV)
    .replace("@DIR@", str(protocol.RESULTS_DIR))
    .replace("@DONE@", protocol.DONE_FILE)
    .replace("@FILE@", protocol.RESULTS_FILE)
)
LABELS = {"app.kubernetes.io/name": "dra-conformance", "app.kubernetes.io/component": "sonobuoy-plugin"}
NODE_NAME_ENV = "NODE_NAME"
# A ConfigMap key is a file name: letters, digits, '-', '_' and '.'.
CONFIG_MAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class PluginSettings:
    """What a plugin definition is made of: the driver profile, the cluster's name in reports, image, namespace."""

    profile: Path
    cluster_name: str
    image: str = DEFAULT_IMAGE
    namespace: str = protocol.DEFAULT_NAMESPACE
    # Passed on to `dra-conformance run` in the pod (`-k protocol`, `--dra-strictness strict`).
    run_args: tuple[str, ...] = field(default=())
    # On a cluster whose pods have no Service path to the API server (the local cluster): the pod's host network,
    # and this address in the in-cluster variables (see kube/host_access.py). None: the `kubernetes` Service.
    api_server_from_host: str | None = None
    # The nodes the plugin's pod may run on, whatever they are tainted with for scheduling (none: any Linux node);
    # for the node part, the driver's nodes it runs on.
    nodes: tuple[str, ...] = field(default=())
    # Which checks the plugin runs (see the module's docstring).
    part: Part = Part.WHOLE
    # The node part: the nodes' kubelet root (mounted at the same path), and a node label (key, value) choosing the
    # nodes to run on, beside or instead of `nodes`.
    kubelet_root: PurePosixPath = DEFAULT_KUBELET_ROOT
    node_label: tuple[str, str] | None = None

    @property
    def plugin_name(self) -> str:
        """The Sonobuoy plugin's name: its results' directory in the tarball."""
        return NODE_PLUGIN_NAME if self.part is Part.NODE else PLUGIN_NAME


def profile_files(profile: Path) -> dict[str, str]:
    """The profile and the RBAC manifests it names, by file name: the plugin's ConfigMap.

    The profile names its manifests relative to its own directory; mounted from a ConfigMap they are files of one
    directory, so a manifest elsewhere (a path with a directory in it) is refused in one line.
    """
    load_profile(profile)  # a bad profile is one line naming file, line and key before anything is printed
    if not CONFIG_MAP_KEY.match(profile.name):
        raise UsageError(f"driver profile {profile}: its file name is no ConfigMap key (letters, digits, -, _, .)")
    raw = yaml.safe_load(profile.read_text())
    identity = raw.get("identity") or {}
    named = [("identity.rbac", name) for name in identity.get("rbac") or []]
    named += [("identity.controller.rbac", name) for name in (identity.get("controller") or {}).get("rbac") or []]
    files = {profile.name: profile.read_text()}
    for key, name in named:
        if not CONFIG_MAP_KEY.match(str(name)):
            raise UsageError(
                f"driver profile {profile}: {key} names {name!r}; the plugin mounts the profile and its manifests "
                f"from one ConfigMap directory, so each must be a file beside the profile"
            )
        files[str(name)] = (profile.parent / str(name)).read_text()
    return files


def check_settings(settings: PluginSettings) -> None:
    """Refuse, in one line, what would give a plugin that cannot run or cannot be told apart in a fleet report."""
    if not settings.cluster_name.strip() or "\n" in settings.cluster_name:
        raise UsageError(
            "--cluster-name needs a name on one line: in a pod every cluster's API server is "
            "https://kubernetes.default.svc, so the fleet report tells clusters apart by this name"
        )
    if not DNS_LABEL.match(settings.namespace):
        raise UsageError(f"--namespace {settings.namespace!r} is no namespace name (a DNS label)")
    server = settings.api_server_from_host
    if server is not None and (urlsplit(server).scheme != "https" or not urlsplit(server).hostname):
        raise UsageError(f"--api-server-from-host {server!r} is no API server URL (such as https://127.0.0.1:6443)")
    if not settings.kubelet_root.is_absolute():
        raise UsageError(f"--kubelet-root {settings.kubelet_root} is no absolute path (the nodes' kubelet --root-dir)")
    if settings.part is Part.NODE and not settings.nodes and settings.node_label is None:
        raise UsageError(
            "the node part runs on the driver's nodes: give them (--node NAME, repeatable) or a label they carry "
            "(--node-label KEY=VALUE)"
        )


def container_args(settings: PluginSettings) -> list[str]:
    """The entry's arguments: the mounted profile, the cluster's name, then the run's arguments."""
    mounted = protocol.CONFIG_DIR / settings.profile.name
    part: list[str] = []
    if settings.part is not Part.WHOLE:
        part = ["--part", str(settings.part)]
    if settings.part is Part.NODE:
        part += ["--scratch-dir", str(settings.kubelet_root / SCRATCH_SUBDIR)]
    return [
        "--profile",
        str(mounted),
        "--cluster-name",
        settings.cluster_name,
        *part,
        *selection_args(settings.part),
        *settings.run_args,
    ]


def _node_pod(settings: PluginSettings, container: dict[str, Any]) -> dict[str, Any]:
    """The node part's pod: the kubelet root and the CDI dirs at their own paths, the host's network, any taint."""
    root = str(settings.kubelet_root)
    volumes: list[dict[str, Any]] = [{"name": "kubelet-root", "hostPath": {"path": root, "type": "Directory"}}]
    # HostToContainer: what the kubelet mounts under its root later (pods' volumes) shows in the container too.
    mounts: list[dict[str, Any]] = [{"name": "kubelet-root", "mountPath": root, "mountPropagation": "HostToContainer"}]
    for index, directory in enumerate(NODE_CDI_DIRS):
        name = f"cdi-{index}"
        volumes.append({"name": name, "hostPath": {"path": str(directory), "type": "DirectoryOrCreate"}})
        mounts.append({"name": name, "mountPath": str(directory), "readOnly": True})
    container["volumeMounts"] = mounts
    container["env"] = [
        *container.get("env", []),
        {"name": NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    selector = {"kubernetes.io/os": "linux"}
    if settings.node_label is not None:
        selector[settings.node_label[0]] = settings.node_label[1]
    pod_spec: dict[str, Any] = {
        "serviceAccountName": SERVICE_ACCOUNT,
        "hostNetwork": True,
        "nodeSelector": selector,
        # Driver nodes are often tainted (GPU pools): the node part goes wherever the driver runs.
        "tolerations": [{"operator": "Exists"}],
        "volumes": volumes,
        "containers": [],
    }
    if settings.nodes:
        host_access.require_nodes(pod_spec, settings.nodes)
    return pod_spec


def plugin_definition(settings: PluginSettings) -> dict[str, Any]:
    """The plugin definition Sonobuoy v0.57.4 reads (`sonobuoy run --plugin FILE`), as a document."""
    check_settings(settings)
    node = settings.part is Part.NODE
    container: dict[str, Any] = {
        "name": "plugin",
        "image": settings.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", NODE_SCRIPT if node else FALLBACK_SCRIPT, "dra-conformance-sonobuoy-entry"],
        "args": container_args(settings),
    }
    if settings.api_server_from_host is not None:
        # Sonobuoy puts `container` into the pod's containers (its worker gets the same variables).
        host_access.reach_api_server_from_host({"containers": [container]}, settings.api_server_from_host)
    if node:
        pod_spec = _node_pod(settings, container)
    else:
        # Sonobuoy uses this instead of its default pod spec: the suite's own ServiceAccount, and a Job's restart
        # policy (the entry runs once and always leaves a done file, whatever the run did).
        pod_spec = {
            "serviceAccountName": SERVICE_ACCOUNT,
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "containers": [],
        }
        if settings.api_server_from_host is not None:
            pod_spec["hostNetwork"] = True
        if settings.nodes:
            host_access.require_nodes(pod_spec, settings.nodes)
            host_access.tolerate_scheduling_taints(pod_spec)
    checks = {Part.WHOLE: "", Part.CLUSTER: "cluster-level checks of the ", Part.NODE: "node-level checks of the "}
    config: dict[str, Any] = {
        "driver": DAEMONSET_DRIVER if node else protocol.JOB_DRIVER,
        "plugin-name": settings.plugin_name,
        "result-format": protocol.MANUAL_FORMAT,
        "result-files": [protocol.RESULTS_FILE],
        "description": (
            f"dra-conformance {__version__}: {checks[settings.part]}DRA driver conformance of the driver the "
            f"profile {settings.profile.name} describes, on cluster {settings.cluster_name}"
        ),
    }
    if node:
        config["order"] = NODE_PART_ORDER
    return {
        "sonobuoy-config": config,
        "spec": container,
        "podSpec": pod_spec,
        "config-map": profile_files(settings.profile),
    }


def rbac_documents(namespace: str = protocol.DEFAULT_NAMESPACE) -> list[dict[str, Any]]:
    """Sonobuoy's namespace, the plugin's ServiceAccount, and the ClusterRole of rights.py bound to it."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            # The Pod Security level Sonobuoy gives the namespace it creates (pkg/config/config.go,
            # DefaultNamespacePSAEnforceLevel), so that its aggregator runs as it would in its own.
            "metadata": {"name": namespace, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}},
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT, "namespace": namespace, "labels": LABELS},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": CLUSTER_ROLE, "labels": LABELS},
            "rules": rights.cluster_role_rules(rights.needed_rights()),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": CLUSTER_ROLE, "labels": LABELS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CLUSTER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}],
        },
    ]


# Sonobuoy's aggregator lists the nodes to know which results a DaemonSet plugin owes it (one per node its pod
# spec selects); without that right (`--aggregator-permissions namespaceAdmin` grants none outside its namespace) it
# ignores DaemonSet plugins. This grants that one read, and nothing about claims.
AGGREGATOR_NODE_READER = "dra-conformance-sonobuoy-aggregator-nodes"
AGGREGATOR_SERVICE_ACCOUNT = "sonobuoy-serviceaccount"


def aggregator_node_reader(namespace: str = protocol.DEFAULT_NAMESPACE) -> list[dict[str, Any]]:
    """A ClusterRole reading nodes, bound to Sonobuoy's aggregator in `namespace`: what the node part needs of it."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": AGGREGATOR_NODE_READER, "labels": LABELS},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": AGGREGATOR_NODE_READER, "labels": LABELS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": AGGREGATOR_NODE_READER},
            "subjects": [{"kind": "ServiceAccount", "name": AGGREGATOR_SERVICE_ACCOUNT, "namespace": namespace}],
        },
    ]


# The rolling-update check (suites/kubelet/test_rolling_update.py) reads and patches the driver's DaemonSet (its update
# strategy for the rollout, then back), which kube/rights.py does not declare for the kubelet suite: the node part
# gets exactly that, in the driver's namespace only (a pod's ServiceAccount is in its namespace, so the profile's
# serviceAccount names the namespace of the DaemonSet's pods).
DRIVER_ROLLOUT_ROLE = "dra-conformance-sonobuoy-rollout"


def driver_rollout_role(driver_namespace: str, namespace: str = protocol.DEFAULT_NAMESPACE) -> list[dict[str, Any]]:
    """A Role reading and patching DaemonSets in `driver_namespace`, bound to the plugins' ServiceAccount."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": DRIVER_ROLLOUT_ROLE, "namespace": driver_namespace, "labels": LABELS},
            "rules": [{"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get", "patch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": DRIVER_ROLLOUT_ROLE, "namespace": driver_namespace, "labels": LABELS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": DRIVER_ROLLOUT_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}],
        },
    ]


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the files of the ConfigMap) as literal blocks, readable as the files they are."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def _dump(document: dict[str, Any]) -> str:
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=120)


def render_plugin(settings: PluginSettings) -> str:
    """The plugin file, with a header saying how to run it."""
    document = plugin_definition(settings)
    if settings.part is not Part.WHOLE:
        return (
            f"# Sonobuoy {protocol.SONOBUOY_VERSION} plugin {settings.plugin_name}: the {settings.part}-level checks "
            f"of dra-conformance on cluster {settings.cluster_name}, one\n# part of `dra-conformance sonobuoy run` "
            "(which applies the RBAC, runs both parts and merges their verdicts).\n"
        ) + _dump(document)
    header = (
        f"# Sonobuoy {protocol.SONOBUOY_VERSION} plugin: dra-conformance on cluster {settings.cluster_name}.\n"
        f"# Its ServiceAccount and RBAC first (the namespace too, hence the skipped preflight check):\n"
        f"#   dra-conformance sonobuoy-plugin --rbac --namespace {settings.namespace} | kubectl apply -f -\n"
        f"#   sonobuoy run --namespace {settings.namespace} --plugin THIS_FILE "
        f"--skip-preflight=existingnamespace --aggregator-permissions namespaceAdmin --wait\n"
        f"# (namespaceAdmin: Sonobuoy's own default, clusterAdmin, lets its aggregator read every namespace's\n"
        f"# ResourceClaims, which the suite's read-exposure check reports as a reader beyond the allowlist)\n"
        f"#   sonobuoy results $(sonobuoy retrieve --namespace {settings.namespace})\n"
    )
    return header + _dump(document)


def render_rbac(namespace: str | None = None) -> str:
    """The RBAC manifest (several documents) to apply before `sonobuoy run`."""
    namespace = namespace or protocol.DEFAULT_NAMESPACE
    if not DNS_LABEL.match(namespace):
        raise UsageError(f"--namespace {namespace!r} is no namespace name (a DNS label)")
    header = (
        "# The dra-conformance Sonobuoy plugin's ServiceAccount and the rights the bundled suites need\n"
        "# (dra_conformance/kube/rights.py, the same rules as ci-clusterrole.yaml). Apply before `sonobuoy run`.\n"
    )
    return header + "---\n".join(_dump(document) for document in rbac_documents(namespace))


def settings_from(
    profile: Path | None,
    cluster_name: str | None,
    image: str | None,
    namespace: str | None,
    run_args: Sequence[str] = (),
    api_server_from_host: str | None = None,
    nodes: Sequence[str] = (),
    part: str = Part.WHOLE,
    kubelet_root: str | None = None,
    node_label: str | None = None,
) -> PluginSettings:
    """Settings from the command line; a missing profile or cluster name is one line (exit 2)."""
    if profile is None:
        raise UsageError("sonobuoy-plugin needs --profile PATH: the driver profile of the driver installed there")
    if cluster_name is None:
        raise UsageError(
            "sonobuoy-plugin needs --cluster-name NAME: in a pod every cluster's API server is "
            "https://kubernetes.default.svc, so the fleet report tells clusters apart by this name"
        )
    settings = PluginSettings(
        profile=profile,
        cluster_name=cluster_name,
        image=image or DEFAULT_IMAGE,
        namespace=namespace or protocol.DEFAULT_NAMESPACE,
        run_args=tuple(run_args),
        api_server_from_host=api_server_from_host,
        nodes=tuple(nodes),
        part=Part(part),
        kubelet_root=PurePosixPath(kubelet_root) if kubelet_root else DEFAULT_KUBELET_ROOT,
        node_label=parse_node_label(node_label) if node_label is not None else None,
    )
    check_settings(settings)
    return settings


def parse_node_label(text: str) -> tuple[str, str]:
    """`KEY=VALUE` as (key, value); anything else is one line."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise UsageError(f"--node-label {text!r}: expected KEY=VALUE, a label the driver's nodes carry")
    return key.strip(), value.strip()
