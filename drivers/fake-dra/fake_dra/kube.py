"""The driver's API access: read claims, write its own status.devices entries, publish its ResourceSlice."""

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

    def read_slice(self, name: str) -> Manifest | None:
        """A ResourceSlice as a dict, or None if it does not exist."""
        try:
            response = self.resource.read_resource_slice(name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return dict(json.loads(response.data))

    def publish_slice(self, manifest: Manifest) -> None:
        """Create the slice, or replace the existing one of the same name."""
        name = manifest["metadata"]["name"]
        existing = self.read_slice(name)
        if existing is None:
            self.resource.create_resource_slice(manifest, _request_timeout=REQUEST_TIMEOUT)
            return
        manifest = {
            **manifest,
            "metadata": {**manifest["metadata"], "resourceVersion": existing["metadata"]["resourceVersion"]},
        }
        self.resource.replace_resource_slice(name, manifest, _request_timeout=REQUEST_TIMEOUT)

    def delete_slice(self, name: str) -> None:
        """Delete the slice; already gone is fine."""
        try:
            self.resource.delete_resource_slice(name, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as error:
            if error.status != 404:
                raise
