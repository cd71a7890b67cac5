"""The driver as its vendor ships it, on the real node: image archives imported, manifests applied as they are.

The manifests (a rendered chart) go through server-side apply with the discovery-backed dynamic client, so any kind
the API server serves installs (admission policies included, which are then in force for the whole run), not only
the kinds the suites create. The only changes made to them are the transformations the profile declares
(`install.transform`), each printed as one line naming the object and what changed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from dra_conformance.driver.profile import InstallSpec, Transforms
from dra_conformance.errors import UsageError
from dra_conformance.kube import host_access
from dra_conformance.kube.pods import describe_pod, start_failure

# The field manager of the objects the backend applies for the vendor.
FIELD_MANAGER = "dra-conformance-install"
# Kinds whose objects carry a pod template at spec.template.spec (what the transformations change).
POD_TEMPLATE_KINDS = frozenset({"DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "Job"})
# Kinds other objects live in or depend on, applied first (in this order), the rest in file order.
FIRST_KINDS = ("Namespace", "CustomResourceDefinition")


def load_manifests(files: tuple[Path, ...]) -> list[dict[str, Any]]:
    """Every document of `files`, in order; a document without apiVersion, kind or name is one line."""
    documents: list[dict[str, Any]] = []
    for path in files:
        for index, document in enumerate(yaml.safe_load_all(path.read_text())):
            if not document:
                continue
            if not isinstance(document, dict) or not all(
                (document.get("apiVersion"), document.get("kind"), (document.get("metadata") or {}).get("name"))
            ):
                raise UsageError(f"{path}: document {index + 1} is not a Kubernetes object (apiVersion, kind, name)")
            documents.append(document)
    return documents


def _object_name(document: dict[str, Any]) -> str:
    metadata = document["metadata"]
    namespace = metadata.get("namespace")
    return f"{document['kind']} {namespace + '/' if namespace else ''}{metadata['name']}"


def transform(
    documents: list[dict[str, Any]], transforms: Transforms, real_nodes: tuple[str, ...], api_server: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """The documents with the declared transformations applied, and one line per change made."""
    changed, lines = [], []
    for original in documents:
        document = copy.deepcopy(original)
        if document["kind"] in POD_TEMPLATE_KINDS:
            pod = document.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
            name = _object_name(document)
            if transforms.pin_to_real_nodes:
                host_access.require_nodes(pod, real_nodes)
                lines.append(
                    f"{name}: required node affinity {host_access.HOSTNAME_LABEL} In {list(real_nodes)} "
                    "(install.transform.pinToRealNodes)"
                )
            if transforms.api_server_from_host:
                variables = host_access.reach_api_server_from_host(pod, api_server)
                shown = " ".join(f"{key}={value}" for key, value in variables.items())
                lines.append(f"{name}: hostNetwork true, {shown} (install.transform.apiServerFromHost)")
        changed.append(document)
    return changed, lines


def apply_order(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Namespaces (and CRDs) first, then the rest in file order."""
    first = [d for kind in FIRST_KINDS for d in documents if d["kind"] == kind]
    return first + [d for d in documents if d["kind"] not in FIRST_KINDS]


def apply(api_client: client.ApiClient, documents: list[dict[str, Any]]) -> None:
    """Server-side apply each document through API discovery: any kind the API server serves."""
    dynamic = DynamicClient(api_client)
    for document in apply_order(documents):
        try:
            resource = dynamic.resources.get(api_version=document["apiVersion"], kind=document["kind"])
        except ResourceNotFoundError:
            dynamic.resources.invalidate_cache()  # a CRD applied just before: discover again, once
            try:
                resource = dynamic.resources.get(api_version=document["apiVersion"], kind=document["kind"])
            except ResourceNotFoundError:
                raise UsageError(
                    f"install: the API server does not serve kind {document['kind']} ({document['apiVersion']}) of "
                    f"{_object_name(document)}"
                ) from None
        namespace = document["metadata"].get("namespace") if resource.namespaced else None
        if resource.namespaced and namespace is None:
            namespace = "default"
        resource.server_side_apply(
            body=document, namespace=namespace, field_manager=FIELD_MANAGER, force_conflicts=True
        )


@dataclass(frozen=True)
class Installed:
    """What was applied: the objects (after transformation) and the lines describing the transformations."""

    documents: list[dict[str, Any]]
    transformations: list[str]

    @property
    def pod_namespaces(self) -> tuple[str, ...]:
        """Namespaces of the objects with pod templates (where the driver's pods appear)."""
        found = {d["metadata"].get("namespace", "default") for d in self.documents if d["kind"] in POD_TEMPLATE_KINDS}
        return tuple(sorted(found))


def install(
    api_client: client.ApiClient,
    spec: InstallSpec,
    real_nodes: tuple[str, ...],
    echo: Callable[[str], None],
) -> Installed:
    """Apply the profile's manifests (transformed as declared, each change printed) to the cluster."""
    documents, lines = transform(
        load_manifests(spec.manifests), spec.transforms, real_nodes, str(api_client.configuration.host)
    )
    for line in lines:
        echo(f"install: transform {line}")
    apply(api_client, documents)
    echo(f"install: applied {len(documents)} objects from {len(spec.manifests)} manifest files (server-side apply)")
    return Installed(documents, lines)


def pod_failure(core: client.CoreV1Api, namespaces: tuple[str, ...], node: str) -> str | None:
    """Why a pod of the installed driver on `node` will not run (crash loop, missing image), else None."""
    for namespace in namespaces:
        for pod in core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node}").items:
            reason = start_failure(pod)
            if reason is not None:
                return f"{describe_pod(pod)}: {reason}"
    return None


def missing_images(images: tuple[Path, ...]) -> list[Path]:
    """The archives of `images` that do not exist."""
    return [path for path in images if not path.is_file()]
