"""The default fake DRA driver of a local cluster: one process per node, like a DaemonSet pod.

Each process authenticates with a token of the `fake-dra` ServiceAccount bound to a pod on its node, so the API
server sees the node-name claim, exactly as for a real DaemonSet pod. RBAC comes from the driver's own
deploy/rbac.yaml, the same file real clusters use.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from dra_conformance.backends.local.control_plane import ProcessSpec
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.driver.endpoint import DriverEndpoint
from dra_conformance.driver.reference import DEFAULT_DRIVER, driver_argv
from dra_conformance.kube import kinds, kubeconfig
from dra_conformance.kube.identities import request_token, token_holder_pod

NAMESPACE = "fake-dra"
SERVICE_ACCOUNT = "fake-dra"
# Devices per node of the default driver: enough for both xdist workers' claims at once.
DEVICES_PER_NODE = 8
# Long enough for a cluster left up over a working day; the token dies with its pod anyway.
DRIVER_TOKEN_LIFETIME = 24 * 3600


def kubelet_root(layout: ClusterLayout, node: str) -> Path:
    """Per-node plugin directory. Unix socket paths are limited to 107 bytes, so it sits in a short temp path."""
    return runtime_dir(layout) / node


def runtime_dir(layout: ClusterLayout) -> Path:
    """Short temp directory holding every node's kubelet root of this cluster (removed with the cluster)."""
    digest = hashlib.sha256(str(layout.root.resolve()).encode()).hexdigest()[:8]
    return Path(tempfile.gettempdir()) / f"dra-conformance-{digest}"


def apply_rbac(api_client: client.ApiClient, rbac_file: Path) -> None:
    """Create the driver's namespace, ServiceAccount and least-privilege RBAC (existing objects are kept)."""
    dynamic = DynamicClient(api_client)
    for document in yaml.safe_load_all(rbac_file.read_text()):
        resource = kinds.resource(dynamic, document["apiVersion"], document["kind"])
        try:
            resource.create(body=document, namespace=document["metadata"].get("namespace"))
        except ApiException as error:
            if error.status != 409:
                raise


def deploy(
    api_client: client.ApiClient,
    layout: ClusterLayout,
    nodes: tuple[str, ...],
    rbac_file: Path,
    server: str,
    ca_pem: bytes,
) -> tuple[list[DriverEndpoint], list[ProcessSpec]]:
    """Set up identities for the default driver on every node and return its endpoints and processes."""
    apply_rbac(api_client, rbac_file)
    endpoints, specs = [], []
    for node in nodes:
        pod = client.CoreV1Api(api_client).create_namespaced_pod(
            NAMESPACE, token_holder_pod(NAMESPACE, SERVICE_ACCOUNT, node, f"fake-dra-{node}")
        )
        token = request_token(
            api_client,
            NAMESPACE,
            SERVICE_ACCOUNT,
            bound_pod=(pod.metadata.name, pod.metadata.uid),
            lifetime=DRIVER_TOKEN_LIFETIME,
        )
        path = kubeconfig.write(
            layout.config / f"fake-dra-{node}.kubeconfig",
            kubeconfig.render(server, ca_pem, user=f"fake-dra@{node}", token=token),
        )
        endpoint = DriverEndpoint(DEFAULT_DRIVER, node, kubelet_root(layout, node))
        node_dir = layout.root / "nodes" / node
        argv = driver_argv(
            endpoint,
            kubeconfig=path,
            state_dir=node_dir / "fake-dra",
            cdi_dir=node_dir / "cdi",
            devices=DEVICES_PER_NODE,
        )
        endpoints.append(endpoint)
        specs.append(
            ProcessSpec(f"fake-dra-{node}", argv, str(layout.component_log(f"fake-dra-{node}")), critical=False)
        )
    return endpoints, specs
