"""The driver's API access: read claims, write its own status.devices entries, publish its pool's ResourceSlices."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.api.resource_v1_api import ResourceV1Api
from kubernetes.client.exceptions import ApiException

from dra_wire.kube_json import CoreReader
from fake_dra.rate_limit import TokenBucket

Manifest = dict[str, Any]
API_VERSION = "resource.k8s.io/v1"
# One call to the API server from a driver; a slow server should fail the prepare, not hang it.
REQUEST_TIMEOUT = 10.0
# Slices of one pool written at once: a 1,000-device pool is eight 128-device slices, written in one round.
PUBLISH_WORKERS = 8


def api_client(kubeconfig: Path | None, connections: int) -> client.ApiClient:
    """Client from a kubeconfig, or the in-cluster configuration when none is given.

    `connections` sizes the connection pool: one per thread that may call at once, so concurrent prepares do not
    queue for a connection (the client's default is five per CPU).
    """
    configuration = client.Configuration()
    if kubeconfig is None:
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration, persist_config=False)
    configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)


def drain(response: Any) -> bytes:
    """Read a raw (`_preload_content=False`) response and hand its connection back to the pool.

    Without the release, urllib3 keeps a raw response's connection out of the pool, and the next request pays a
    new TLS handshake: under concurrent prepares that handshake was most of a prepare's time.
    """
    try:
        return bytes(response.data)
    finally:
        response.release_conn()


def denial(error: ApiException) -> str:
    """The API server's message for a failed request (e.g. the Forbidden text)."""
    try:
        return str(json.loads(error.body).get("message", error.body))
    except (TypeError, ValueError):
        return str(error.body or error.reason)


class DriverAPI:
    """Thin wrapper over the resource.k8s.io/v1 calls the driver makes, with JSON dicts in and out."""

    def __init__(self, api: client.ApiClient, driver_name: str, limit: TokenBucket | None = None) -> None:
        """Call the API server through `api`, within `limit` if given; status writes use `driver_name` as manager."""
        self.resource = ResourceV1Api(api)  # imported with this module: the launcher's children inherit it
        self.nodes = CoreReader(api, REQUEST_TIMEOUT)
        self.driver_name = driver_name
        self.limit = limit
        # Owner reference per node name, read once: a Node's UID does not change while the driver runs.
        self._node_owners: dict[str, Manifest | None] = {}

    def _admit(self) -> None:
        if self.limit is not None:
            self.limit.admit()

    def get_claim(self, namespace: str, name: str) -> Manifest:
        """The claim as a dict."""
        self._admit()
        response = self.resource.read_namespaced_resource_claim(
            name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
        )
        return dict(json.loads(drain(response)))

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
        self._admit()
        response = self.resource.patch_namespaced_resource_claim_status(
            meta["name"],
            meta["namespace"],
            body,
            field_manager=self.driver_name,
            force=True,
            _content_type="application/apply-patch+yaml",
            _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT,
        )
        drain(response)

    def list_slices(self, node: str) -> list[Manifest]:
        """Every ResourceSlice of this driver bound to `node` (its pool, plus any left over from earlier runs)."""
        self._admit()
        response = self.resource.list_resource_slice(
            field_selector=f"spec.driver={self.driver_name},spec.nodeName={node}",
            _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT,
        )
        return list(json.loads(drain(response))["items"])

    def publish_pool(self, node: str, manifests: list[Manifest], *, delete_first: bool = False) -> None:
        """Make `manifests` the node's slices, owned by its Node: create or replace each, then delete the others.

        Deleting only after every new slice is written keeps the pool complete at its highest generation as soon as
        the last write lands; slices left over (fewer devices now, or an older naming) are at a lower generation,
        which consumers ignore until they are gone. `delete_first` (the REPUBLISH_LEAVES_INCOMPLETE_POOL mutant)
        deletes every slice of the node before writing, so the pool is gone in between.
        """
        if delete_first:
            self.delete_pool(node)
        owner = self._node_owner(node)
        if owner is not None:
            manifests = [{**m, "metadata": {**m["metadata"], "ownerReferences": [owner]}} for m in manifests]
        existing = {item["metadata"]["name"]: item for item in self.list_slices(node)}
        current = {name: existing.pop(name, None) for name in (m["metadata"]["name"] for m in manifests)}
        with ThreadPoolExecutor(max_workers=min(len(manifests), PUBLISH_WORKERS) or 1) as writers:
            # list() re-raises the first failed write here.
            list(
                writers.map(
                    lambda manifest: self._write_slice(manifest, current[manifest["metadata"]["name"]]), manifests
                )
            )
        for name in existing:
            self.delete_slice(name)

    def _node_owner(self, node: str) -> Manifest | None:
        """The owner reference a slice of `node` carries; None when no such Node exists.

        The upstream kubeletplugin helper names the Node as owner too, so that garbage collection removes the slices
        with the Node.
        """
        if node not in self._node_owners:
            self._admit()
            found = self.nodes.get("/api/v1/nodes/{name}", name=node)
            uid = found["metadata"]["uid"] if found else None
            owner = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid, "controller": True}
            self._node_owners[node] = owner if uid else None
        return self._node_owners[node]

    def _write_slice(self, manifest: Manifest, current: Manifest | None) -> None:
        # The response (the whole slice) is not needed: skipping its conversion into model objects saves most of
        # the client-side time of a 128-device write.
        if current is None:
            self._admit()
            response = self.resource.create_resource_slice(
                manifest, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
        else:
            name = manifest["metadata"]["name"]
            version = current["metadata"]["resourceVersion"]
            replacement = {**manifest, "metadata": {**manifest["metadata"], "resourceVersion": version}}
            self._admit()
            response = self.resource.replace_resource_slice(
                name, replacement, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
        drain(response)

    def delete_pool(self, node: str) -> None:
        """Delete every slice of this driver on `node`, one by one: the RBAC grants delete, not deletecollection."""
        for item in self.list_slices(node):
            self.delete_slice(item["metadata"]["name"])

    def delete_slice(self, name: str) -> None:
        """Delete the slice; already gone is fine."""
        try:
            self._admit()
            self.resource.delete_resource_slice(name, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as error:
            if error.status != 404:
                raise
