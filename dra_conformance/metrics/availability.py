"""Availability of each metrics.k8s.io version: its APIService's Available condition, and waits for it to serve.

The checks of a run share one read, up front; after a change, the waits follow a version until it answers through
the aggregator and aggregated discovery lists it again.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.kube import waits
from dra_conformance.metrics.reads import (
    GROUP,
    REQUEST_TIMEOUT,
    VERSIONS,
    aggregated_discovery_versions,
    get_status,
    served_versions,
    utc_now,
)

# The condition of a version that has no APIService (apiservice_condition), and the reason it is unavailable then.
MISSING = "missing"
NO_APISERVICE = "no APIService"
# How often the up-front availability read polls an APIService that is not Available yet.
AVAILABILITY_POLL = 1.0


@dataclass(frozen=True)
class VersionAvailability:
    """One version of metrics.k8s.io at a read: listed by discovery or not, and its APIService's Available condition."""

    version: str
    # Discovery lists it (the cluster claims to serve it).
    served: bool
    # "True/Passed", "False/FailedDiscoveryCheck", "missing" (no APIService) or "no Available condition".
    condition: str
    message: str = ""
    # When the condition last changed status (None without one).
    since: datetime.datetime | None = None

    @property
    def available(self) -> bool:
        """Its APIService is Available."""
        return self.condition.startswith("True")

    @property
    def registered(self) -> bool:
        """It has an APIService."""
        return self.condition != MISSING

    @property
    def reason(self) -> str:
        """Why it is not Available ("" when it is)."""
        return unavailable_reason(self.condition) or ""

    def settled(self, now: datetime.datetime, deadline: float) -> bool:
        """Whether waiting could not make it Available within `deadline`.

        It is Available, it has no APIService, or it has been unavailable longer than the deadline already (a
        pipeline warming up turns Available within it).
        """
        if self.available or not self.registered:
            return True
        return self.since is not None and (now - self.since).total_seconds() >= deadline

    def describe(self) -> str:
        """One line: "metrics.k8s.io/v1 unavailable (FailedDiscoveryCheck: <message>)"."""
        detail = f"{self.reason}: {self.message}" if self.message else self.reason
        return f"{GROUP}/{self.version} unavailable ({detail})"


def unavailable_reason(condition: str) -> str | None:
    """The reason in an Available condition as `apiservice_condition` writes it; None when it is True."""
    if condition.startswith("True"):
        return None
    if condition == MISSING:
        return NO_APISERVICE
    status, _, reason = condition.partition("/")
    return reason or status


def apiservice_state(
    api: client.ApiClient, version: str, *, served: bool = False, timeout: float | None = None
) -> VersionAvailability:
    """The `Available` condition of <version>.metrics.k8s.io, its message and since when it holds."""
    try:
        service = client.ApiregistrationV1Api(api).read_api_service(
            f"{version}.{GROUP}", _request_timeout=timeout or REQUEST_TIMEOUT
        )
    except ApiException as error:
        if error.status == 404:
            return VersionAvailability(version, served, MISSING)
        raise
    conditions = (service.status.conditions if service.status else None) or []
    condition = next((c for c in conditions if c.type == "Available"), None)
    if condition is None:
        return VersionAvailability(version, served, "no Available condition")
    since = condition.last_transition_time
    return VersionAvailability(
        version,
        served,
        f"{condition.status}/{condition.reason}",
        " ".join(str(condition.message or "").split()),
        since if isinstance(since, datetime.datetime) else None,
    )


def apiservice_condition(api: client.ApiClient, version: str) -> str:
    """The `Available` condition of <version>.metrics.k8s.io as "True/Passed", or "missing"."""
    return apiservice_state(api, version).condition


@dataclass(frozen=True)
class Availability:
    """Every version of metrics.k8s.io as read once, up front, for the checks of a run to share."""

    # What discovery lists, the preferred version first.
    served: tuple[str, ...]
    versions: dict[str, VersionAvailability]
    # Seconds the read waited for versions still turning Available.
    waited: float = 0.0

    def conditions(self) -> dict[str, str]:
        """Each version's Available condition ("True/Passed", "missing"), as the verdict's evidence holds them."""
        return {v: state.condition for v, state in self.versions.items()}

    def unavailable(self) -> list[VersionAvailability]:
        """Versions discovery lists or an APIService registers that are not Available."""
        return [s for s in self.versions.values() if (s.served or s.registered) and not s.available]

    def usable(self) -> list[str]:
        """Served versions that are Available, the one consumers prefer (v1) first."""
        ordered = sorted(self.served, key=lambda version: version != "v1")
        return [v for v in ordered if v in self.versions and self.versions[v].available]


def read_availability(
    api: client.ApiClient,
    deadline: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> Availability:
    """Each version's availability, once every served or registered one is Available or settled, or at `deadline`.

    A version that has been unavailable longer than `deadline` already is not waited for: nothing suggests it is
    warming up. The state at the deadline is returned, never an error: unavailability is what the checks judge.
    """
    start = clock()
    while True:
        served = served_versions(api)
        state = Availability(
            tuple(served),
            {v: apiservice_state(api, v, served=v in served) for v in VERSIONS},
            round(clock() - start, 3),
        )
        now = utc_now()
        if all(s.settled(now, deadline) for s in state.unavailable()) or clock() - start >= deadline:
            return state
        sleep(min(AVAILABILITY_POLL, max(0.0, deadline - (clock() - start))))


def wait_answering(
    api: client.ApiClient, versions: Iterable[str], timeout: float, *, max_interval: float = waits.POLL_MAX_INTERVAL
) -> None:
    """Wait until every version answers through the aggregator (its resource list, proxied to the implementation).

    The aggregator's proxy follows an APIService's Available condition through an informer, so right after the
    condition turns True it can still answer 503 for a moment. The resource list, not a NodeMetrics list: that
    would list every node of the cluster.
    """
    paths = {version: f"/apis/{GROUP}/{version}" for version in versions}
    waits.until(
        lambda: {v: get_status(api, p) for v, p in paths.items()},
        lambda codes: set(codes.values()) == {200},
        timeout=timeout,
        what=f"{GROUP} {sorted(paths)} answering through the aggregator",
        describe=str,
        max_interval=max_interval,
    )


def wait_discovered(api: client.ApiClient, versions: Iterable[str], timeout: float) -> None:
    """Wait until aggregated discovery lists every version as Current again.

    Discovery is refreshed asynchronously after an APIService recovers; a consumer that looks earlier picks an
    older version.
    """
    wanted = set(versions)
    waits.until(
        lambda: aggregated_discovery_versions(api),
        lambda listed: wanted <= set(listed),
        timeout=timeout,
        what=f"aggregated discovery listing {GROUP} {sorted(wanted)}",
        describe=str,
    )
