"""The driver's API access: read claims, write its own status.devices entries, publish its pool's ResourceSlices."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.api.resource_v1_api import ResourceV1Api
from kubernetes.client.exceptions import ApiException

from dra_wire.kube_json import CoreReader, JsonClient
from fake_dra.rate_limit import TokenBucket

Manifest = dict[str, Any]
API_VERSION = "resource.k8s.io/v1"
CLAIM_PATH = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
APPLY_PATCH = "application/apply-patch+yaml"
# One call to the API server from a driver; a slow server should fail the prepare, not hang it.
REQUEST_TIMEOUT = 10.0
# How often, at most, the client runs its credential refresh hook. The hook re-sets the host, CA and token on every
# request, re-reading the proxy environment each time: an eighth of a prepare's GIL time under py-spy. The
# credentials it reloads are rotated long before they expire (a kubelet-projected token at 80% of its lifetime), so
# a check every few seconds is soon enough.
CREDENTIAL_CHECK_INTERVAL = 5.0
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
    refresh = configuration.refresh_api_key_hook
    if refresh is not None:
        configuration.refresh_api_key_hook = at_most_every(CREDENTIAL_CHECK_INTERVAL, refresh)
    return client.ApiClient(configuration)


ConfigurationHook = Callable[[client.Configuration], None]


def at_most_every(interval: float, hook: ConfigurationHook) -> ConfigurationHook:
    """`hook`, run only when `interval` seconds passed since it last ran (the first call always runs it)."""
    last_run: float | None = None

    def maybe_run(configuration: client.Configuration) -> None:
        nonlocal last_run
        now = time.monotonic()
        if last_run is None or now - last_run >= interval:
            last_run = now
            hook(configuration)

    return maybe_run


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
        # The prepare path's two calls (read the claim, apply its status) skip the generated methods' layers.
        self.json_api = JsonClient(api, REQUEST_TIMEOUT)
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
        return dict(self.json_api.request("GET", CLAIM_PATH, path_params={"namespace": namespace, "name": name}))

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
        self.json_api.request(
            "PATCH",
            CLAIM_PATH + "/status",
            body=body,
            content_type=APPLY_PATCH,
            query={"fieldManager": self.driver_name, "force": "true"},
            path_params={"namespace": meta["namespace"], "name": meta["name"]},
        )

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
