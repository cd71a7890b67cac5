"""Watching the cluster's control plane for the whole run, so that its faults are never blamed on the driver.

A daemon thread asks the API server's `/readyz` (which includes etcd) every POLL_INTERVAL, and reads the leader
leases of kube-scheduler and kube-controller-manager where the cluster elects leaders (a lease not renewed within
LEASE_STALE means that component is gone). Every stretch of time in which one of them was unhealthy is a `Fault`;
a check that failed or errored within a fault (or within FAULT_MARGIN of it) could not judge the driver.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from dra_conformance.kube.client import raw_request

# One probe a second: a fault shorter than that cannot fail a check's API call that has retries.
POLL_INTERVAL = 1.0
# /readyz answers in milliseconds on a healthy API server; two seconds without an answer is a fault.
PROBE_TIMEOUT = 2.0
# Leader election renews every 2 s and gives up after 10 s (kube defaults); 20 s without a renewal is a lost leader.
LEASE_STALE = timedelta(seconds=20)
# A check's failure up to this long after a fault ended is still attributed to it (retries, watches re-opening).
FAULT_MARGIN = timedelta(seconds=10)
LEADER_LEASES = ("kube-scheduler", "kube-controller-manager")
NOT_FOUND, FORBIDDEN = 404, 403


@dataclass
class Fault:
    """One component unhealthy from `since` until `until` (None: still unhealthy when the watch stopped)."""

    component: str
    since: datetime
    detail: str
    until: datetime | None = None

    def overlaps(self, start: datetime, stop: datetime) -> bool:
        """Whether the fault (with its margin) touches [start, stop]."""
        if self.since > stop:
            return False
        return self.until is None or start <= self.until + FAULT_MARGIN

    def describe(self) -> str:
        """'kube-apiserver unreachable from 12:00:01 to 12:00:40 (Connection refused)'."""
        until = f"to {self.until:%H:%M:%S}" if self.until else "until the end of the run"
        return f"{self.component} unhealthy from {self.since:%H:%M:%S} {until} ({self.detail})"


class ClusterHealthWatch:
    """Records control-plane faults while it runs."""

    def __init__(self, api_client: client.ApiClient) -> None:
        """Probe through `api_client` once started."""
        self.api_client = api_client
        self.leases = client.CoordinationV1Api(api_client)
        self.faults: list[Fault] = []
        self._open: dict[str, Fault] = {}
        # Leader leases this cluster has and lets us read (checked once, at start).
        self._watched_leases: list[str] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        # Why the watch stopped early, where it did (then faults after that moment went unseen).
        self.error = ""
        # When each component was last seen healthy: a fault starts right after it.
        self._last_healthy: dict[str, datetime] = {}

    def start(self) -> None:
        """Start probing now."""
        for name in LEADER_LEASES:
            try:
                self.leases.read_namespaced_lease(name, "kube-system", _request_timeout=PROBE_TIMEOUT)
                self._watched_leases.append(name)
            except ApiException as error:
                if error.status not in (NOT_FOUND, FORBIDDEN):
                    raise
        threading.Thread(target=self._run, name="cluster-health-watch", daemon=True).start()

    def stop(self) -> list[Fault]:
        """Stop probing; every fault seen, the open ones without an end."""
        self._stopped.set()
        with self._lock:
            return list(self.faults)

    def overlapping(self, start: datetime, stop: datetime) -> list[Fault]:
        """The faults that touch [start, stop]."""
        with self._lock:
            return [fault for fault in self.faults if fault.overlaps(start, stop)]

    def _run(self) -> None:
        while not self._stopped.wait(POLL_INTERVAL):
            now = datetime.now(UTC)
            try:
                self._note("kube-apiserver", self._readyz(), now)
                for name in self._watched_leases:
                    self._note(name, self._lease_problem(name, now), now)
            except Exception as error:  # a bug of the watch itself is not a fault of the cluster: stop watching
                self.error = f"cluster health not watched after {now:%H:%M:%S}: {type(error).__name__}: {error}"
                return

    def _readyz(self) -> str:
        try:
            status, body = raw_request(self.api_client, "GET", "/readyz", timeout=PROBE_TIMEOUT)
        except (HTTPError, OSError) as error:  # connection refused, timeouts, TLS: all mean unreachable
            return f"unreachable: {type(error).__name__}: {str(error)[:200]}"
        return "" if status == 200 else f"/readyz answered {status}: {body.decode(errors='replace')[:200]}"

    def _lease_problem(self, name: str, now: datetime) -> str:
        try:
            lease = self.leases.read_namespaced_lease(name, "kube-system", _request_timeout=PROBE_TIMEOUT)
        except Exception:  # the API server's own fault is recorded by /readyz
            return ""
        renewed = lease.spec.renew_time
        if renewed is None or now - renewed > LEASE_STALE:
            return f"leader lease not renewed since {renewed}"
        return ""

    def _note(self, component: str, problem: str, now: datetime) -> None:
        with self._lock:
            open_fault = self._open.get(component)
            if not problem:
                self._last_healthy[component] = now
            if problem and open_fault is None:
                # It failed some time after the last probe that found it healthy: a check that failed in between
                # (before this probe noticed) met the fault too.
                fault = Fault(
                    component, self._last_healthy.get(component, now - timedelta(seconds=POLL_INTERVAL)), problem
                )
                self._open[component] = fault
                self.faults.append(fault)
            elif not problem and open_fault is not None:
                open_fault.until = now
                del self._open[component]
