"""The driver under test on a local cluster: one process per fake node, as a DaemonSet would run it.

What runs comes from the driver profile (`run`): the reference driver's profile runs its Go build, a
vendor's profile runs the vendor's binary. Each process gets its own kubelet root (registration and plugin
sockets), CDI dir and data dir, and authenticates as the profile's ServiceAccount with a token bound to a pod on
its node, so the API server sees the node-name claim exactly as for a DaemonSet pod. The RBAC the profile names is
installed as it is.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from dra_conformance.backends.local.layout import REAL_NODE, STANDARD_KUBELET_ROOT, ClusterLayout
from dra_conformance.backends.local.process_plan import ProcessSpec
from dra_conformance.driver import confinement
from dra_conformance.driver.profile import BINARY_PLACEHOLDER, DriverProfile, ServiceAccountRef
from dra_conformance.errors import DriverStartError, UsageError
from dra_conformance.kube import builders, kinds, kubeconfig
from dra_conformance.kube.identities import request_token, token_holder_pod
from dra_conformance.model.driver import DriverEndpoint

# Long enough for a cluster left up over a working day; the token dies with its pod anyway.
DRIVER_TOKEN_LIFETIME = 24 * 3600


def kubelet_root(layout: ClusterLayout, node: str) -> Path:
    """Per-node plugin directory, where this machine sees it: a short temp path (socket paths take 107 bytes at most).

    Real node 0's is the standard /var/lib/kubelet, where its kubelet runs. A further real node's kubelet sees its
    own at that path too, in its mount namespace (`node_namespace`): this machine sees it in a directory whose
    path is as short (a rolling update's per-pod registration socket name alone is 62 bytes).
    """
    if node == REAL_NODE:
        return STANDARD_KUBELET_ROOT
    further = _further_real_node(node)
    if further is not None:
        return runtime_dir(layout).parent / f"dra-{runtime_tag(layout)}-n{further}"
    return runtime_dir(layout) / node


def runtime_tag(layout: ClusterLayout) -> str:
    """Six hex digits of the runtime directory's digest: unique per cluster, short enough for an interface name."""
    return runtime_dir(layout).name.rsplit("-", 1)[-1][:6]


def _further_real_node(node: str) -> int | None:
    """The index of real node `node` (`real-node-<i>`) where it is a further one (i >= 1)."""
    number = node.removeprefix("real-node-")
    return int(number) if node.startswith("real-node-") and number.isdigit() and int(number) >= 1 else None


def runtime_dir(layout: ClusterLayout) -> Path:
    """Short temp directory holding every node's kubelet root of this cluster (removed with the cluster)."""
    digest = hashlib.sha256(str(layout.root.resolve()).encode()).hexdigest()[:8]
    return Path(tempfile.gettempdir()) / f"dra-conformance-{digest}"


def kubeconfig_path(layout: ClusterLayout, node: str) -> Path:
    """The kubeconfig of the driver process on `node`."""
    return layout.config / f"driver-{node}.kubeconfig"


PROCESS_PREFIX = "driver-"


def process_name(node: str) -> str:
    """The supervisor's name of the driver process on `node`."""
    return f"{PROCESS_PREFIX}{node}"


def node_of_process(name: str) -> str | None:
    """The node a driver-under-test process serves, from its supervisor name; None for any other process."""
    return name.removeprefix(PROCESS_PREFIX) if name.startswith(PROCESS_PREFIX) else None


def object_ref(document: dict[str, Any]) -> dict[str, str]:
    """apiVersion, kind, name and namespace ("" when cluster-scoped) of a manifest: enough to delete it again."""
    metadata = document["metadata"]
    return {
        "apiVersion": document["apiVersion"],
        "kind": document["kind"],
        "name": metadata["name"],
        "namespace": metadata.get("namespace") or "",
    }


def apply_manifests(
    api_client: client.ApiClient, files: tuple[Path, ...], account: ServiceAccountRef
) -> list[dict[str, str]]:
    """Create the profile's namespace, its RBAC objects and its ServiceAccount (what already exists is kept).

    Returns every object but namespaces (which other tenants may share), as `object_ref`s.
    """
    namespace: dict[str, Any] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": account.namespace}}
    documents = [namespace]
    for path in files:
        documents += [document for document in yaml.safe_load_all(path.read_text()) if document]
    # The RBAC files usually create the ServiceAccount; a profile whose files do not still names one to run as.
    documents.append(builders.service_account(account.name, account.namespace))
    dynamic = DynamicClient(api_client)
    for document in documents:
        resource = kinds.resource(dynamic, document["apiVersion"], document["kind"])
        try:
            resource.create(body=document, namespace=document["metadata"].get("namespace"))
        except ApiException as error:
            if error.status != 409:
                raise
    return [object_ref(document) for document in documents if document["kind"] != "Namespace"]


@dataclass(frozen=True)
class DriverDeployment:
    """Where the driver's processes run and what the supervisor starts."""

    endpoints: list[DriverEndpoint]
    processes: list[ProcessSpec]
    # Per node, every build the profile names ("current" and its `run.versions`), for the rollback rehearsal.
    builds: dict[str, dict[str, ProcessSpec]] = field(default_factory=dict)
    # Per node, the directories the driver writes to (sockets, CDI specs, data, the profile's `createDirs`).
    directories: dict[str, tuple[Path, ...]] = field(default_factory=dict)
    # The objects installed for the driver's identity (RBAC, ServiceAccount, token-holder pods), as `object_ref`s.
    objects: list[dict[str, str]] = field(default_factory=list)
    # Per node, those of `directories` that did not exist before the deployment: the only ones a swap deletes.
    created: dict[str, tuple[Path, ...]] = field(default_factory=dict)

    def record(self, profile: DriverProfile) -> dict[str, Any]:
        """What `driver_swap` needs to remove this deployment again, as JSON (`identity_path`)."""
        return {
            "driver": profile.driver,
            "objects": self.objects,
            "directories": {node: [str(path) for path in paths] for node, paths in self.directories.items()},
            CREATED_KEY: {node: [str(path) for path in paths] for node, paths in self.created.items()},
        }


# The key of the identity record (`identity_path`) listing, per node, the directories the deployment created.
CREATED_KEY = "created"
# The build a profile's `run` describes; `run.versions` names the others (`previous`).
CURRENT_BUILD = "current"


def builds_path(layout: ClusterLayout) -> Path:
    """Where the rendered builds of the driver, per node, are kept for restarts with another build."""
    return layout.root / "driver-builds.json"


def identity_path(layout: ClusterLayout) -> Path:
    """Where the driver's identity objects and node directories are kept, for `driver_swap` to remove them."""
    return layout.root / "driver-identity.json"


def placeholder_values(
    profile: DriverProfile, endpoint: DriverEndpoint, layout: ClusterLayout, kubeconfig_path: Path
) -> dict[str, str]:
    """What the profile's placeholders stand for on one node."""
    return {
        "driver": profile.driver,
        "node": endpoint.node,
        "kubeconfig": str(kubeconfig_path),
        "kubelet_root": str(endpoint.kubelet_root),
        "registrar_dir": str(endpoint.registrar_dir),
        "plugins_dir": str(endpoint.plugins_dir),
        "socket_path": str(endpoint.plugins_dir / "dra.sock"),
        "cdi_dir": str(endpoint.cdi_dir),
        "data_dir": str(layout.root / "nodes" / endpoint.node / "driver-data"),
        "python": sys.executable,
        "devices": str(profile.devices.per_node),
    }


def node_identity(api_client: client.ApiClient, profile: DriverProfile, node: str) -> tuple[str, dict[str, str] | None]:
    """A token of the profile's ServiceAccount for the driver on `node`, and the pod it is bound to (if any)."""
    account = profile.identity.service_account
    bound_pod, holder_ref = None, None
    if profile.identity.node_bound_token:
        holder = token_holder_pod(account.namespace, account.name, node, f"{account.name}-{node}")
        pod = client.CoreV1Api(api_client).create_namespaced_pod(account.namespace, holder)
        bound_pod, holder_ref = (pod.metadata.name, pod.metadata.uid), object_ref(holder)
    token = request_token(
        api_client, account.namespace, account.name, bound_pod=bound_pod, lifetime=DRIVER_TOKEN_LIFETIME
    )
    return token, holder_ref


def deploy(
    api_client: client.ApiClient,
    layout: ClusterLayout,
    nodes: tuple[str, ...],
    profile: DriverProfile,
    binaries: Mapping[str, Path],
    *,
    server: str,
    ca_pem: bytes,
) -> DriverDeployment:
    """Install the profile's identity and return one process per node (started by the caller's supervisor)."""
    if profile.run is None:
        raise UsageError(
            f"{profile.source}: driver {profile.driver} has no `run` section: the local backend cannot run it"
        )
    account = profile.identity.service_account
    objects = apply_manifests(api_client, profile.identity.rbac, account)
    endpoints, processes = [], []
    builds: dict[str, dict[str, ProcessSpec]] = {}
    directories: dict[str, tuple[Path, ...]] = {}
    created: dict[str, tuple[Path, ...]] = {}
    # Each node's token (and the pod it is bound to) is minted at once: a start waits for these round trips.
    with ThreadPoolExecutor(max_workers=len(nodes) or 1, thread_name_prefix="driver-identity") as minting:
        identities = list(minting.map(lambda node: node_identity(api_client, profile, node), nodes))
    for node, (token, holder) in zip(nodes, identities, strict=True):
        endpoint = DriverEndpoint(
            profile.driver, node, kubelet_root(layout, node), layout.root / "nodes" / node / "cdi"
        )
        if holder is not None:
            objects.append(holder)
        path = kubeconfig.write(
            kubeconfig_path(layout, node),
            kubeconfig.render(server, ca_pem, user=f"{account.name}@{node}", token=token),
        )
        values = placeholder_values(profile, endpoint, layout, path)
        values.update({f"{BINARY_PLACEHOLDER}:{name}": str(binary) for name, binary in binaries.items()})
        own = (endpoint.registrar_dir, endpoint.plugins_dir.parent, Path(values["cdi_dir"]), Path(values["data_dir"]))
        requested = profile.run.directories(values)
        # Checked when the profile was read; again with the values filled in, before anything is created.
        confinement.check_rendered(requested, (*own, endpoint.kubelet_root, *profile.host_paths), profile.source)
        directories[node] = (*own, *requested)
        created[node] = confinement.make_directories(directories[node])
        name = process_name(node)
        argv = profile.run.process.argv(values)
        if shutil.which(argv[0]) is None:
            raise DriverStartError(f"driver {profile.driver} on {node}: command not found or not executable: {argv[0]}")
        templates = {CURRENT_BUILD: profile.run.process, **profile.run.versions}
        builds[node] = {
            build: ProcessSpec(
                name,
                template.argv(values),
                str(layout.component_log(name)),
                critical=False,
                # Some drivers let $KUBECONFIG override their flag: both name the driver's own identity.
                env={"KUBECONFIG": str(path), **template.environment(values)},
            )
            for build, template in templates.items()
        }
        processes.append(builds[node][CURRENT_BUILD])
        endpoints.append(endpoint)
    return DriverDeployment(endpoints, processes, builds, directories, objects, created)
