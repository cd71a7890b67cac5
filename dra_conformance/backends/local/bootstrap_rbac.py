"""The API server's default RBAC objects, recorded at one start and written at the next before its hook runs.

kube-apiserver writes its default roles and bindings (label kubernetes.io/bootstrapping=rbac-defaults) in a
post-start hook that waits a whole second before its first try (pkg/registry/rbac/rest, `wait.Poll`), then creates
about 140 objects one by one; /readyz, which the controller-manager and the scheduler start after, waits for it.
The objects depend on the API server's binary only: recorded once per binary (in the build cache), they are written
concurrently as soon as the API answers, during the hook's idle second, and the hook then only reconciles them, as
on any restart of an API server: it finds each as it would have written it, and the cluster ends as every other does.
Should the hook start while they are being written (a loaded machine), each side keeps what the other wrote first:
the writes here skip AlreadyExists, and the hook reconciles again at once on it (component-helpers
auth/rbac/reconciliation, reconcile_role.go).

Not earlier than /readyz: the controller-manager's own start polls /healthz once a second, and /healthz waits for
the same hooks, so a controller-manager started before them lost up to a second.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

LABEL_SELECTOR = "kubernetes.io/bootstrapping=rbac-defaults"
API_VERSION = "rbac.authorization.k8s.io/v1"
# Kinds in the order they are written: roles before the bindings that name them.
KINDS = ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")
# Fields the API server sets; a recorded object keeps what its creator wrote.
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink")
# Concurrent creates: the API server is still starting on 2 cores; more only queue.
WRITERS = 8


def record_path(directory: Path, kube_binary: Path) -> Path:
    """Where in `directory` the default RBAC objects of `kube_binary` are recorded (named by its cache directory)."""
    return directory / f"{kube_binary.parent.name}.json"


def _listers(rbac: client.RbacAuthorizationV1Api) -> dict[str, Callable[..., Any]]:
    return {
        "ClusterRole": rbac.list_cluster_role,
        "Role": rbac.list_role_for_all_namespaces,
        "ClusterRoleBinding": rbac.list_cluster_role_binding,
        "RoleBinding": rbac.list_role_binding_for_all_namespaces,
    }


def as_recorded(item: dict[str, Any]) -> dict[str, Any]:
    """`item` without what the API server sets, and an aggregated role without the rules its controller fills in."""
    metadata = {k: v for k, v in item["metadata"].items() if k not in SERVER_SET}
    body = {**item, "metadata": metadata}
    if body.get("aggregationRule"):
        body.pop("rules", None)  # the aggregation controller fills them in, as on any start
    return body


def listed(api_client: client.ApiClient) -> dict[str, list[dict[str, Any]]]:
    """The cluster's default RBAC objects by kind, as a record keeps them (no field the API server sets)."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    found: dict[str, list[dict[str, Any]]] = {}
    for kind, lister in _listers(rbac).items():
        items = lister(label_selector=LABEL_SELECTOR).items
        found[kind] = [
            as_recorded({**api_client.sanitize_for_serialization(item), "apiVersion": API_VERSION, "kind": kind})
            for item in items
        ]
    return found


@dataclass(frozen=True)
class BootstrapRbac:
    """The record of one API server binary's default RBAC objects at `path`."""

    path: Path

    def recorded(self) -> dict[str, list[dict[str, Any]]] | None:
        """The recorded objects by kind, or None without a usable record."""
        try:
            raw = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(raw, dict) or set(raw) != set(KINDS):
            return None
        return raw

    def record(self, api_client: client.ApiClient) -> None:
        """Record the default RBAC objects the API server wrote (once its /readyz answered)."""
        found = listed(api_client)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(f".{uuid.uuid4().hex}.partial")  # concurrent starts each write a whole file
        partial.write_text(json.dumps(found, indent=1, sort_keys=True))
        partial.replace(self.path)

    def seed(self, api_client: client.ApiClient, objects: dict[str, list[dict[str, Any]]]) -> None:
        """Write every recorded object (those the hook wrote first are left as they are)."""
        rbac = client.RbacAuthorizationV1Api(api_client)
        creators: dict[str, Callable[[dict[str, Any]], Any]] = {
            "ClusterRole": lambda body: rbac.create_cluster_role(body),
            "Role": lambda body: rbac.create_namespaced_role(body["metadata"]["namespace"], body),
            "ClusterRoleBinding": lambda body: rbac.create_cluster_role_binding(body),
            "RoleBinding": lambda body: rbac.create_namespaced_role_binding(body["metadata"]["namespace"], body),
        }

        def create(kind: str, body: dict[str, Any]) -> None:
            try:
                creators[kind](body)
            except ApiException as error:
                if error.status != 409:  # AlreadyExists: the hook was first
                    raise

        with ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="bootstrap-rbac") as writers:
            for kind in KINDS:
                list(writers.map(lambda body, kind=kind: create(kind, body), objects[kind]))
