"""`ResourceTracker`: creates objects for a test and deletes them afterwards, waiting until each one is gone.

Cleanup deletes several objects at once, newest first, and collects every error to report them together, so a
failed delete never hides another leftover and never masks the test's own failure.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError
from kubernetes.dynamic.resource import Resource

from dra_conformance.errors import ConformanceError, WaitTimeout
from dra_conformance.kube import kinds, waits

Manifest = dict[str, Any]
# Deletes in flight at once during cleanup. A test's objects are independent to the API server (a claim still in
# use waits for its pod under its own finalizer, whichever DELETE came first), and awaiting each one in turn made
# cleanup a chain of round trips: most of a scenario test's teardown.
CLEANUP_WORKERS = 4
# The content type of a `compact` create's body: a JSON string, which the client sends only under a YAML type.
YAML_CONTENT_TYPE = "application/yaml"


class CleanupError(ConformanceError):
    """One or more tracked objects could not be deleted; the message lists each one."""


@dataclass(frozen=True)
class TrackedObject:
    """What is needed to delete an object again."""

    api_version: str
    kind: str
    name: str
    namespace: str | None

    @classmethod
    def of(cls, obj: Manifest) -> TrackedObject:
        """Identify a manifest or an object read back from the API."""
        meta = obj["metadata"]
        return cls(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))

    def __str__(self) -> str:
        """`kind namespace/name` as an operator would write it."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}"


class ResourceTracker:
    """Creates objects through the dynamic client and deletes them, newest first and several at once, on `cleanup`."""

    def __init__(
        self,
        dynamic: DynamicClient,
        *,
        delete_timeout: float,
        keep: bool = False,
        log: Callable[[str], None] = lambda _message: None,
    ) -> None:
        """Track objects created through `dynamic`; `keep` leaves them in place for debugging."""
        self.dynamic = dynamic
        self.delete_timeout = delete_timeout
        self.keep = keep
        self.log = log
        self._objects: list[TrackedObject] = []
        self._lock = threading.Lock()

    def resource(self, api_version: str, kind: str) -> Resource:
        """The dynamic-client resource for a kind."""
        return kinds.resource(self.dynamic, api_version, kind)

    def create(self, manifest: Manifest, *, compact: bool = False) -> Manifest:
        """Create `manifest`, register it for cleanup, and return the created object as a dict.

        `compact` sends the manifest as compact JSON, as kubectl and client-go do, instead of the Python client's
        `json.dumps` with spaces. The API server keeps the bytes of an opaque config's parameters (a RawExtension)
        as sent, and re-encodes them compactly when it patches the object, so a claim whose parameters were sent
        with spaces then fails every status write with "status.allocation: field cannot be modified once set"
        (k8s.io/kubernetes v1.37.2): objects carrying opaque config are created compact.
        """
        resource = self.resource(manifest["apiVersion"], manifest["kind"])
        namespace = manifest["metadata"].get("namespace") if resource.namespaced else None
        if compact:  # JSON is YAML: the client sends a string body of a YAML content type as it is
            body = json.dumps(manifest, separators=(",", ":"))
            created = resource.create(body=body, namespace=namespace, content_type=YAML_CONTENT_TYPE).to_dict()
        else:
            created = resource.create(body=manifest, namespace=namespace).to_dict()
        tracked = TrackedObject(manifest["apiVersion"], manifest["kind"], created["metadata"]["name"], namespace)
        with self._lock:
            self._objects.append(tracked)
        self.log(f"created {tracked}")
        return dict(created)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Manifest:
        """Read an object as a dict."""
        return dict(self.resource(api_version, kind).get(name=name, namespace=namespace).to_dict())

    def delete(self, obj: Manifest | TrackedObject, *, wait: bool = True, grace_seconds: int | None = None) -> None:
        """Delete one object (background propagation), stop tracking it, and by default wait until it is gone.

        `grace_seconds` overrides a pod's own grace period (the builders' pods have `TEST_POD_GRACE_SECONDS`): with a
        grace period the pod is gone only once its kubelet finished it (containers stopped, claims unprepared); with
        0 the API server removes it at once, before that, which only a check about force deletion should do.
        """
        tracked = obj if isinstance(obj, TrackedObject) else TrackedObject.of(obj)
        with self._lock:
            self._objects = [known for known in self._objects if known != tracked]
        resource = self.resource(tracked.api_version, tracked.kind)
        body: dict[str, object] = {"propagationPolicy": "Background"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        try:
            resource.delete(name=tracked.name, namespace=tracked.namespace, body=body)
        except NotFoundError:
            pass
        if wait:
            self.wait_gone(tracked)

    def wait_gone(self, tracked: TrackedObject) -> None:
        """Wait until `tracked` returns NotFound, reporting its finalizers and deletion state if it lingers."""
        resource = self.resource(tracked.api_version, tracked.kind)

        def probe() -> Manifest | None:
            try:
                return dict(resource.get(name=tracked.name, namespace=tracked.namespace).to_dict())
            except NotFoundError:
                return None

        def describe(obj: Manifest | None) -> str:
            if obj is None:
                return "gone"
            meta = obj.get("metadata", {})
            return (
                f"{tracked} still present (deletionTimestamp={meta.get('deletionTimestamp')}, "
                f"finalizers={meta.get('finalizers')})"
            )

        waits.until(
            probe,
            lambda obj: obj is None,
            timeout=self.delete_timeout,
            what=f"{tracked} deleted",
            describe=describe,
        )

    def cleanup(self) -> None:
        """Delete every tracked object (newest first, several at once); raise one CleanupError listing all failures."""
        with self._lock:
            objects, self._objects = list(reversed(self._objects)), []
        if self.keep:
            for tracked in objects:
                self.log(f"keeping {tracked} (--dra-keep-resources)")
            return

        def delete(tracked: TrackedObject) -> str | None:
            try:
                self.delete(tracked)
            except (ApiException, WaitTimeout) as error:
                return f"{tracked}: {error}"
            return None

        with ThreadPoolExecutor(max_workers=CLEANUP_WORKERS, thread_name_prefix="cleanup") as deleters:
            failures = [failure for failure in deleters.map(delete, objects) if failure is not None]
        if failures:
            raise CleanupError("cleanup left objects behind:\n  " + "\n  ".join(failures))
