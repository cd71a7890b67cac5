"""Every version of a driver's ResourceSlices on one node, as a watch delivers them.

A check that judges how a pool changes (a republish) needs what a consumer saw at each step, not only the end
state: the slices listed at the start, then each ADDED, MODIFIED or DELETED event, oldest first.
"""

from __future__ import annotations

import threading
from typing import Any

from kubernetes import client, watch

from dra_conformance.kube.builders import RESOURCE_API

# One LIST of slices the API server answers from its watch cache.
LIST_TIMEOUT = 10.0
# How long one watch request lasts on the server: longer than any check that watches.
WATCH_SECONDS = 120

# (event type, slice): "LISTED" for the slices listed at the start, then the watch's ADDED, MODIFIED, DELETED.
SliceVersion = tuple[str, dict[str, Any]]
# The watch events that carry a slice.
WATCH_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED"})


class SliceHistory:
    """Every version of a driver's slices on one node: those listed at the start, then each one the watch delivers."""

    def __init__(self, api_client: client.ApiClient, driver: str, node: str) -> None:
        """Watch the slices of `driver` bound to `node` once started."""
        self.custom = client.CustomObjectsApi(api_client)
        self.selector = f"spec.driver={driver},spec.nodeName={node}"
        self.versions: list[SliceVersion] = []
        self.error = ""
        self._lock = threading.Lock()
        self._watch = watch.Watch()

    def listed(self) -> dict[str, Any]:
        """The slices a LIST answers now (unlike the watch, never behind): the List object."""
        group, version = RESOURCE_API.split("/")
        found: dict[str, Any] = self.custom.list_cluster_custom_object(
            group, version, "resourceslices", field_selector=self.selector, _request_timeout=LIST_TIMEOUT
        )
        return found

    def start(self) -> SliceHistory:
        """List the slices, then watch from the list's resourceVersion in a daemon thread."""
        listed = self.listed()
        self.versions = [("LISTED", item) for item in listed["items"]]
        threading.Thread(
            target=self._run, args=(listed["metadata"]["resourceVersion"],), name="slice-watch", daemon=True
        ).start()
        return self

    def _run(self, resource_version: str) -> None:
        group, version = RESOURCE_API.split("/")
        try:
            for event in self._watch.stream(
                self.custom.list_cluster_custom_object,
                group,
                version,
                "resourceslices",
                field_selector=self.selector,
                resource_version=resource_version,
                timeout_seconds=WATCH_SECONDS,
            ):
                kind = str(event["type"])
                if kind not in WATCH_EVENTS:  # an ERROR (e.g. the resourceVersion expired) ends what was seen
                    self.error = f"{kind}: {event['object']}"
                    return
                with self._lock:
                    self.versions.append((kind, event["object"]))
        except Exception as error:  # a broken watch is reported: the check then saw too little
            self.error = f"{type(error).__name__}: {error}"

    def stop(self) -> None:
        """End the watch."""
        self._watch.stop()

    def snapshot(self) -> list[SliceVersion]:
        """The versions seen so far, oldest first."""
        with self._lock:
            return list(self.versions)

    def current(self) -> list[dict[str, Any]]:
        """The slices that exist after the last version seen (deleted ones left out)."""
        return list(replay(self.snapshot()).values())

    def taints_of(self, device: str) -> list[dict[str, Any]] | None:
        """The taints `device` has in the latest version of the slice listing it (None: no slice lists it)."""
        for kind, item in reversed(self.snapshot()):
            for listed in item["spec"].get("devices") or []:
                if listed["name"] == device and kind != "DELETED":
                    return list(listed.get("taints") or [])
        return None


def replay(versions: list[SliceVersion]) -> dict[str, dict[str, Any]]:
    """The slices by name that exist once every version in `versions` has been applied in order."""
    existing: dict[str, dict[str, Any]] = {}
    for kind, item in versions:
        name = item["metadata"]["name"]
        if kind == "DELETED":
            existing.pop(name, None)
        else:
            existing[name] = item
    return existing
