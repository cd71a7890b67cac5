"""Identities and targets for the authorization matrix, built once per worker and torn down afterwards."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from dra_conformance import paths
from dra_conformance.driver.identity import DriverIdentity
from dra_conformance.errors import ConformanceError
from dra_conformance.kube import builders, discovery
from dra_conformance.kube.builders import RESOURCE_API, Builder
from dra_conformance.kube.claims import device_statuses, ready_device_status
from dra_conformance.kube.csr import NodeCertificateError, certificate_client, node_client_certificate
from dra_conformance.kube.identities import request_token, token_client
from dra_conformance.kube.pki import CertificateAuthority
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim, allocate
from dra_conformance.metrics import reads as metrics_reads
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.rbac.matrix import CellResult, Row, access_review, request, request_json
from dra_conformance.timeouts import Timeouts

FIELD_MANAGER = "dra-conformance-rbac"
CLAIM_RULES = [
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims", "resourceclaimtemplates"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    }
]


def overprivileged_role(name: str, driver: str) -> dict[str, Any]:
    """The over-privileged driver ClusterRole from fixtures/rbac, for `driver`."""
    role: dict[str, Any] = yaml.safe_load(paths.overprivileged_driver_role().read_text().replace("{driver}", driver))
    return {**role, "metadata": {"name": name}}


class RbacEnvironment:
    """Two namespaces, a driver's slices and allocated claims on two nodes, and one API client per identity."""

    def __init__(
        self,
        admin: client.ApiClient,
        tracker: ResourceTracker,
        cluster: ClusterInfo,
        namespaces: tuple[str, str],
        timeouts: Timeouts,
    ) -> None:
        """Create everything in `namespaces` (the matrix's own, then the other tenant's); `close` removes it."""
        if len(cluster.nodes) < 2:
            raise ConformanceError("the authorization matrix needs two nodes")
        self.admin, self.tracker, self.timeouts = admin, tracker, timeouts
        self.namespace, self.tenant_namespace = namespaces
        self.node_a, self.node_b = cluster.nodes[:2]
        suffix = secrets.token_hex(3)
        self.driver = f"authz-{suffix}.example.com"
        self.other_driver = f"other-{suffix}.example.com"
        self.scratch = Path(tempfile.mkdtemp(prefix="dra-rbac-"))
        self.clients: dict[str, client.ApiClient] = {}
        self.home: dict[str, str] = {}
        self.slices: dict[str, str] = {}
        self.claims: dict[str, AllocatedClaim] = {}
        # Why an identity could not be set up, as observed (e.g. a node certificate request nobody signed).
        self.missing: dict[str, str] = {}
        # Node certificate requests, deleted on `close`.
        self._certificate_requests = ExitStack()
        self._create_targets()
        self._create_identities(cluster)

    # --- setup ----------------------------------------------------------------------------------------------

    def _create_targets(self) -> None:
        build = Builder(namespace=self.namespace, driver=self.driver)
        scope = f'device.attributes["{self.driver}"].scope'
        for node in (self.node_a, self.node_b):
            manifest = build.resource_slice(node, devices=1)
            manifest["spec"]["devices"][0]["attributes"]["scope"] = {"string": "node"}
            self.slices[node] = self.tracker.create(manifest)["metadata"]["name"]
        shared = build.resource_slice(self.node_a, devices=1, pool="shared")
        del shared["spec"]["nodeName"]
        shared["spec"]["allNodes"] = True
        shared["spec"]["devices"][0]["attributes"]["scope"] = {"string": "cluster"}
        self.tracker.create(shared)
        local = self.tracker.create(build.device_class(selectors=(f'{scope} == "node"',)))["metadata"]["name"]
        network = self.tracker.create(build.device_class(selectors=(f'{scope} == "cluster"',)))["metadata"]["name"]
        for target, device_class, node in (
            ("claim-on-a", local, self.node_a),
            ("claim-on-b", local, self.node_b),
            ("claim-no-node", network, self.node_a),
        ):
            self.claims[target] = allocate(
                self.tracker, build, self.admin, device_class, timeout=self.timeouts.pod_scheduled, node=node
            )

    def _service_account(self, namespace: str, name: str) -> None:
        self.tracker.create(builders.service_account(name, namespace))

    def _namespaced_editor(self, namespace: str, name: str) -> client.ApiClient:
        self._service_account(namespace, name)
        self.tracker.create(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": name, "namespace": namespace},
                "rules": CLAIM_RULES,
            }
        )
        self.tracker.create(builders.role_binding(name, namespace, name))
        return token_client(self.admin, request_token(self.admin, namespace, name))

    def _create_identities(self, cluster: ClusterInfo) -> None:
        driver = DriverIdentity(self.tracker, self.admin, self.namespace, self.driver)
        self.clients["driver-on-a"] = token_client(self.admin, driver.token_for(self.node_a))
        self.clients["driver-on-b"] = token_client(self.admin, driver.token_for(self.node_b))
        arbitrary = DriverIdentity(
            self.tracker,
            self.admin,
            self.namespace,
            self.driver,
            rbac=overprivileged_role,
            service_account="driver-arbitrary",
        )
        self.clients["driver-arbitrary"] = token_client(self.admin, arbitrary.token_for(self.node_a))

        role = f"{self.namespace}-controller"
        self._service_account(self.namespace, "controller")
        self.tracker.create(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": role},
                "rules": [
                    {
                        "apiGroups": ["resource.k8s.io"],
                        "resources": ["resourceclaims"],
                        "verbs": ["get", "list", "watch"],
                    },
                    {
                        "apiGroups": ["resource.k8s.io"],
                        "resources": ["resourceclaims/status", "resourceclaims/binding"],
                        "verbs": ["patch", "update"],
                    },
                ],
            }
        )
        self.tracker.create(builders.cluster_role_binding(role, self.namespace, "controller"))
        self.clients["controller"] = token_client(self.admin, request_token(self.admin, self.namespace, "controller"))

        self.clients["namespace-user"] = self._namespaced_editor(self.namespace, "user")
        self.clients["tenant"] = self._namespaced_editor(self.tenant_namespace, "tenant")
        self.home = {name: self.namespace for name in self.clients} | {"tenant": self.tenant_namespace}

        self._create_node_identity("node-a", self.node_a, cluster.pki_dir)

    def _create_node_identity(self, identity: str, node: str, pki_dir: Path | None) -> None:
        """A `system:node:<node>` client: issued by the cluster CA when this backend holds it, else by CSR."""
        if pki_dir is not None:
            ca = CertificateAuthority.load(pki_dir / "ca.crt", pki_dir / "ca.key")
            cert, key = ca.issue(f"system:node:{node}", organizations=["system:nodes"]).write(self.scratch, identity)
        else:
            try:
                issued = self._certificate_requests.enter_context(
                    node_client_certificate(
                        self.admin,
                        node,
                        self.scratch,
                        timeout=self.timeouts.node_certificate,
                        delete_timeout=self.timeouts.delete,
                    )
                )
            except NodeCertificateError as error:
                self.missing[identity] = f"identity {identity}: {error}"
                return
            cert, key = issued.cert_path, issued.key_path
        self.clients[identity] = certificate_client(self.admin, cert, key)
        self.home[identity] = self.namespace

    def persisted_writes(self) -> list[str]:
        """Claims whose status a matrix cell changed for real (every write is a dry-run, so this must be empty)."""
        changed = []
        for target, claim in self.claims.items():
            meta = claim.claim["metadata"]
            now = self.tracker.get(RESOURCE_API, "ResourceClaim", meta["name"], meta["namespace"])
            status = now.get("status") or {}
            if device_statuses(now) or status.get("allocation") != claim.claim["status"].get("allocation"):
                changed.append(f"{target}: {status}")
        return changed

    def close(self) -> None:
        """Close every client, delete node certificate requests, remove the scratch directory.

        The tracker removes the other objects.
        """
        try:
            for api in self.clients.values():
                api.close()
            self._certificate_requests.close()
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)

    # --- cells ----------------------------------------------------------------------------------------------

    def _own_node(self, identity: str) -> str:
        return self.node_b if identity == "driver-on-b" else self.node_a

    def _other_node(self, identity: str) -> str:
        return self.node_a if identity == "driver-on-b" else self.node_b

    def _claim_path(self, target: str, version: str) -> tuple[str, AllocatedClaim]:
        claim = self.claims[target]
        name = claim.claim["metadata"]["name"]
        return f"/apis/resource.k8s.io/{version}/namespaces/{self.namespace}/resourceclaims/{name}/status", claim

    def unavailable(self, identity: str) -> str:
        """Why this backend cannot act as `identity` ("" when it can): a limit of the backend, not of the driver."""
        if identity in self.clients:
            return ""
        if identity in self.missing:
            return self.missing[identity]
        if identity.startswith("node-"):
            return f"identity {identity} needs a system:node client certificate, and this backend holds no cluster CA"
        return f"identity {identity} is not available on this backend"

    def run(self, row: Row, version: str) -> CellResult:
        """Perform one cell as its identity; raises when the identity is unavailable on this backend."""
        api = self.clients.get(row.identity)
        if api is None:
            raise ConformanceError(f"identity {row.identity} is not available on this backend")
        if row.action.startswith("status-"):
            return self._status_write(api, row, version)
        if row.action == "claims-list":
            home = self.home[row.identity]
            other = self.tenant_namespace if home == self.namespace else self.namespace
            namespace = home if row.target == "own" else other
            result = request(api, "GET", f"/apis/resource.k8s.io/{version}/namespaces/{namespace}/resourceclaims")
            review = access_review(
                api, {"verb": "list", "group": "resource.k8s.io", "resource": "resourceclaims", "namespace": namespace}
            )
            return CellResult(result.outcome, result.status, result.message, review)
        if row.action.startswith("slice-"):
            node = self._own_node(row.identity) if row.target == "own" else self._other_node(row.identity)
            return self._slice_write(api, row, version, node)
        return self._metrics(api, row)

    def _status_write(self, api: client.ApiClient, row: Row, version: str) -> CellResult:
        path, claim = self._claim_path(row.target, version)
        meta = claim.claim["metadata"]
        result = claim.results[0]
        if row.action in ("status-devices", "status-devices-other-driver"):
            driver = self.driver if row.action == "status-devices" else self.other_driver
            body = {
                "apiVersion": f"resource.k8s.io/{version}",
                "kind": "ResourceClaim",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "status": {"devices": [self._status_entry(driver, result)]},
            }
            outcome = request(
                api,
                "PATCH",
                path,
                body=body,
                content_type="application/apply-patch+yaml",
                dry_run=True,
                query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            )
        elif row.action == "status-devices-update":
            current = request_json(
                self.admin, f"/apis/resource.k8s.io/{version}/namespaces/{self.namespace}/resourceclaims/{meta['name']}"
            )
            current["status"]["devices"] = [self._status_entry(self.driver, result)]
            outcome = request(api, "PUT", path, body=current, content_type="application/json", dry_run=True)
        elif row.action == "status-reserved-for":
            outcome = request(
                api,
                "PATCH",
                path,
                body={"status": {"reservedFor": []}},
                content_type="application/merge-patch+json",
                dry_run=True,
            )
        else:
            outcome = request(
                api,
                "PATCH",
                path,
                body={"status": {"allocation": None, "reservedFor": None}},
                content_type="application/merge-patch+json",
                dry_run=True,
            )
        review = access_review(
            api,
            {
                "verb": "update" if row.action == "status-devices-update" else "patch",
                "group": "resource.k8s.io",
                "resource": "resourceclaims",
                "subresource": "status",
                "namespace": self.namespace,
            },
        )
        return CellResult(outcome.outcome, outcome.status, outcome.message, review)

    @staticmethod
    def _status_entry(driver: str, result: dict[str, Any]) -> dict[str, Any]:
        return ready_device_status(
            driver, result["pool"], result["device"], reason="Probe", message="authorization matrix"
        )

    def _slice_write(self, api: client.ApiClient, row: Row, version: str, node: str) -> CellResult:
        base = f"/apis/resource.k8s.io/{version}/resourceslices"
        if row.action == "slice-create":
            body = {
                "apiVersion": f"resource.k8s.io/{version}",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{self.namespace}-probe-{node}"},
                "spec": {
                    "driver": self.driver,
                    "nodeName": node,
                    "devices": [],
                    "pool": {"name": f"probe-{node}", "generation": 1, "resourceSliceCount": 1},
                },
            }
            outcome = request(api, "POST", base, body=body, content_type="application/json", dry_run=True)
            verb = "create"
        elif row.action == "slice-update":
            current = request_json(self.admin, f"{base}/{self.slices[node]}")
            current["metadata"].setdefault("labels", {})["dra-conformance.io/probe"] = "update"
            outcome = request(
                api, "PUT", f"{base}/{self.slices[node]}", body=current, content_type="application/json", dry_run=True
            )
            verb = "update"
        else:
            outcome = request(api, "DELETE", f"{base}/{self.slices[node]}", dry_run=True)
            verb = "delete"
        review = access_review(api, {"verb": verb, "group": "resource.k8s.io", "resource": "resourceslices"})
        return CellResult(outcome.outcome, outcome.status, outcome.message, review)

    def _metrics(self, api: client.ApiClient, row: Row) -> CellResult:
        """NodeMetrics: a get of the identity's own node; PodMetrics: a list of its home namespace.

        Both the request and the access review name what they read, so neither grows with the cluster.
        """
        attributes = {"verb": "get", "group": "metrics.k8s.io", "resource": row.target}
        if row.target == "pods":
            attributes.update(verb="list", namespace=self.home[row.identity])
        else:
            attributes["name"] = self._own_node(row.identity)
        served = metrics_reads.served_versions(self.admin)
        allowed = access_review(api, attributes)
        if not served:
            return CellResult(
                "allow" if allowed else "deny",
                0,
                f"SelfSubjectAccessReview {attributes['verb']} {row.target}.metrics.k8s.io (API not served here)",
                allowed,
            )
        version = "v1" if "v1" in served else served[0]
        path = (
            f"/apis/metrics.k8s.io/{version}/namespaces/{attributes['namespace']}/pods"
            if row.target == "pods"
            else f"/apis/metrics.k8s.io/{version}/nodes/{attributes['name']}"
        )
        result = request(api, "GET", path)
        return CellResult(result.outcome, result.status, result.message, allowed)


def served_resource_versions(admin: client.ApiClient) -> list[str]:
    """Every served version of resource.k8s.io, preferred first."""
    return discovery.served_versions(admin, "resource.k8s.io")


__all__ = ["RESOURCE_API", "RbacEnvironment", "served_resource_versions"]
