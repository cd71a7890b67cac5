"""Allocation timeouts during a run, for the canary gate: a watch on Events from the run's start to its end.

Events live in the namespaces of the checks, which the checks delete when they finish, and expire after an hour;
the audit log records that an Event was written but not its reason. So the controller watches them while the run
goes on, from the resourceVersion current at its start (older Events of a reused cluster are not this run's).
The watch runs in a daemon thread and only counts; a watch that breaks says so, and the gate then has no data
rather than a count of zero.
"""

from __future__ import annotations

import threading
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from dra_conformance.canary.inputs import EventFacts

# What the scheduler's FailedScheduling Event says when allocation timed out.
ALLOCATION_TIMEOUT = "timed out trying to allocate devices"
# One watch request lasts at most this long on the server; the loop then watches again from where it was.
WATCH_SECONDS = 60
FAILED_SCHEDULING = "FailedScheduling"
# Events are watched in every namespace (the checks' namespaces come and go), so the server selects the reason: the
# rest of a large cluster's Events (node, pod and controller chatter) is never sent.
REASON_SELECTOR = f"reason={FAILED_SCHEDULING}"
GONE = 410


class AllocationTimeoutWatch:
    """Counts the scheduler's "timed out trying to allocate devices" Events seen while it runs."""

    def __init__(self, api_client: client.ApiClient) -> None:
        """Watch through `api_client` once started."""
        # core/v1 reads the scheduler's events.k8s.io Events too (note as message, regarding as involvedObject);
        # the client's events.k8s.io model refuses the core Events that have no eventTime.
        self.events = client.CoreV1Api(api_client)
        self._watch = watch.Watch()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        # Event uid -> ("namespace/pod", occurrences so far): an Event series counts each occurrence once.
        self._seen: dict[str, tuple[str, int]] = {}
        self.error = ""

    def _resource_version(self) -> str:
        listed = self.events.list_event_for_all_namespaces(field_selector=REASON_SELECTOR, limit=1)
        return str(listed.metadata.resource_version)

    def start(self) -> None:
        """Start watching from now."""
        version = self._resource_version()
        threading.Thread(target=self._run, args=(version,), name="canary-event-watch", daemon=True).start()

    def _run(self, version: str) -> None:
        while not self._stopped.is_set():
            try:
                for item in self._watch.stream(
                    self.events.list_event_for_all_namespaces,
                    field_selector=REASON_SELECTOR,
                    resource_version=version,
                    timeout_seconds=WATCH_SECONDS,
                ):
                    version = item["object"].metadata.resource_version or version
                    if item["type"] in ("ADDED", "MODIFIED"):
                        self._see(item["object"])
            except ApiException as error:
                if error.status == GONE:  # the history moved on: go on from the current version
                    version = self._resource_version()
                    continue
                self._fail(f"event watch failed: {error.status} {error.reason}")
                return
            except Exception as error:  # connection errors of any kind: the count from here on is unknown
                self._fail(f"event watch failed: {type(error).__name__}: {error}")
                return

    def _fail(self, why: str) -> None:
        with self._lock:
            if not self._stopped.is_set():
                self.error = why

    def _see(self, event: Any) -> None:
        if event.reason != FAILED_SCHEDULING or ALLOCATION_TIMEOUT not in (event.message or ""):
            return
        where = f"{event.metadata.namespace}/{event.involved_object.name}"
        series = event.series.count if event.series is not None else None
        occurrences = series or event.count or 1
        with self._lock:
            if not self._stopped.is_set():
                known = self._seen.get(event.metadata.uid, (where, 0))[1]
                self._seen[event.metadata.uid] = (where, max(known, occurrences))

    def stop(self) -> tuple[EventFacts | None, str]:
        """Stop counting; the facts, or None and why the count is not complete."""
        with self._lock:
            self._stopped.set()
            seen, error = dict(self._seen), self.error
        self._watch.stop()
        if error:
            return None, error
        return EventFacts([where for where, n in seen.values() for _ in range(n)]), ""
