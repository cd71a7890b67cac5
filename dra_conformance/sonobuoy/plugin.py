"""`dra-conformance sonobuoy-plugin`: the Sonobuoy plugin definition that runs the suite in-cluster, and its RBAC.

The plugin is a Job (one pod) whose container runs `dra-conformance sonobuoy-entry` with the driver profile
mounted from the plugin's ConfigMap. The pod runs as a ServiceAccount of its own, bound to a ClusterRole with
exactly the rights `dra_conformance/kube/rights.py` declares (the rights the preflight asks for and
`ci-clusterrole.yaml` grants), not Sonobuoy's own account (cluster-admin by default). Sonobuoy reads one document
per plugin file, so the ServiceAccount and its RBAC are a second manifest, applied before `sonobuoy run`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from dra_conformance import __version__
from dra_conformance.driver.profile import load_profile
from dra_conformance.errors import UsageError
from dra_conformance.kube import host_access, rights
from dra_conformance.sonobuoy import protocol

PLUGIN_NAME = "dra-conformance"
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
LABELS = {"app.kubernetes.io/name": "dra-conformance", "app.kubernetes.io/component": "sonobuoy-plugin"}
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
    # The nodes the plugin's pod may run on, whatever they are tainted with for scheduling (none: any Linux node).
    nodes: tuple[str, ...] = field(default=())


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


def container_args(settings: PluginSettings) -> list[str]:
    """The entry's arguments: the mounted profile, the cluster's name, then the run's arguments."""
    mounted = protocol.CONFIG_DIR / settings.profile.name
    return [
        "--profile",
        str(mounted),
        "--cluster-name",
        settings.cluster_name,
        *settings.run_args,
    ]


def plugin_definition(settings: PluginSettings) -> dict[str, Any]:
    """The plugin definition Sonobuoy v0.57.4 reads (`sonobuoy run --plugin FILE`), as a document."""
    check_settings(settings)
    container: dict[str, Any] = {
        "name": "plugin",
        "image": settings.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", FALLBACK_SCRIPT, "dra-conformance-sonobuoy-entry"],
        "args": container_args(settings),
    }
    # Sonobuoy uses this instead of its default pod spec: the suite's own ServiceAccount, and a Job's restart
    # policy (the entry runs once and always leaves a done file, whatever the run did).
    pod_spec: dict[str, Any] = {
        "serviceAccountName": SERVICE_ACCOUNT,
        "restartPolicy": "Never",
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "containers": [],
    }
    if settings.api_server_from_host is not None:
        # Sonobuoy puts `container` into the pod's containers (its worker gets the same variables).
        on_host: dict[str, Any] = {"containers": [container]}
        host_access.reach_api_server_from_host(on_host, settings.api_server_from_host)
        pod_spec["hostNetwork"] = on_host["hostNetwork"]
    if settings.nodes:
        host_access.require_nodes(pod_spec, settings.nodes)
        host_access.tolerate_scheduling_taints(pod_spec)
    return {
        "sonobuoy-config": {
            "driver": protocol.JOB_DRIVER,
            "plugin-name": PLUGIN_NAME,
            "result-format": protocol.MANUAL_FORMAT,
            "result-files": [protocol.RESULTS_FILE],
            "description": (
                f"dra-conformance {__version__}: DRA driver conformance of the driver the profile "
                f"{settings.profile.name} describes, on cluster {settings.cluster_name}"
            ),
        },
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
    )
    check_settings(settings)
    return settings
