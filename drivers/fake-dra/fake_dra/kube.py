"""The driver's API access: read claims, write its own status.devices entries, publish its pool's ResourceSlices."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

Manifest = dict[str, Any]
API_VERSION = "resource.k8s.io/v1"
# One call to the API server from a driver; a slow server should fail the prepare, not hang it.
REQUEST_TIMEOUT = 10.0


def api_client(kubeconfig: Path | None) -> client.ApiClient:
    """Client from a kubeconfig, or the in-cluster configuration when none is given."""
    if kubeconfig is None:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    return config.new_client_from_config(config_file=str(kubeconfig), persist_config=False)


def denial(error: ApiException) -> str:
    """The API server's message for a failed request (e.g. the Forbidden text)."""
    try:
        return str(json.loads(error.body).get("message", error.body))
    except (TypeError, ValueError):
        return str(error.body or error.reason)


class DriverAPI:
    """Thin wrapper over the resource.k8s.io/v1 calls the driver makes, with JSON dicts in and out."""

    def __init__(self, api: client.ApiClient, driver_name: str) -> None:
        """Call the API server through `api`; status writes use `driver_name` as field manager."""
        self.resource = client.ResourceV1Api(api)
        self.driver_name = driver_name

    def get_claim(self, namespace: str, name: str) -> Manifest:
        """The claim as a dict."""
        response = self.resource.read_namespaced_resource_claim(
            name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
        )
        return dict(json.loads(response.data))

    def apply_device_status(self, claim: Manifest, entries: list[Manifest]) -> None:
        """Server-side apply of this driver's status.devices entries (an empty list removes them).

        status.devices is a map-list keyed by driver/pool/device/shareID, so applying only our entries under our
        own field manager leaves other drivers' entries alone. The UID makes the write a precondition on the
        exact claim that was prepared.
        """
        meta = claim["metadata"]
        body = {
            "apiVersion": API_VERSION,
            "kind": "ResourceClaim",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "status": {"devices": entries},
        }
        self.resource.patch_namespaced_resource_claim_status(
            meta["name"],
            meta["namespace"],
            body,
            field_manager=self.driver_name,
            force=True,
            _content_type="application/apply-patch+yaml",
            _request_timeout=REQUEST_TIMEOUT,
        )

    def list_slices(self, node: str) -> list[Manifest]:
        """Every ResourceSlice of this driver bound to `node` (its pool, plus any left over from earlier runs)."""
        response = self.resource.list_resource_slice(
            field_selector=f"spec.driver={self.driver_name},spec.nodeName={node}",
            _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT,
        )
        return list(json.loads(response.data)["items"])

    def publish_pool(self, node: str, manifests: list[Manifest]) -> None:
        """Make `manifests` the node's slices: create or replace each, then delete the node's other slices.

        Deleting only after every new slice is written keeps the pool complete at its highest generation as soon as
        the last write lands; slices left over (fewer devices now, or an older naming) are at a lower generation,
        which consumers ignore until they are gone.
        """
        existing = {item["metadata"]["name"]: item for item in self.list_slices(node)}
        for manifest in manifests:
            name = manifest["metadata"]["name"]
            current = existing.pop(name, None)
            if current is None:
                self.resource.create_resource_slice(manifest, _request_timeout=REQUEST_TIMEOUT)
                continue
            version = current["metadata"]["resourceVersion"]
            replacement = {**manifest, "metadata": {**manifest["metadata"], "resourceVersion": version}}
            self.resource.replace_resource_slice(name, replacement, _request_timeout=REQUEST_TIMEOUT)
        for name in existing:
            self.delete_slice(name)

    def delete_pool(self, node: str) -> None:
        """Delete every slice of this driver on `node`, one by one: the RBAC grants delete, not deletecollection."""
        for item in self.list_slices(node):
            self.delete_slice(item["metadata"]["name"])

    def delete_slice(self, name: str) -> None:
        """Delete the slice; already gone is fine."""
        try:
            self.resource.delete_resource_slice(name, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as error:
            if error.status != 404:
                raise
