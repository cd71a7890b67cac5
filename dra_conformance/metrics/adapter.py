"""Availability of the Metrics API versions, and control of the reference metrics adapter's faults."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from dra_conformance.kube import waits
from dra_conformance.metrics import availability as version_availability
from dra_conformance.metrics import reads as metrics_reads
from dra_conformance.timeouts import Timeouts
from dra_wire.unix_http import unix_json_request

# Control requests are local and answered at once.
CONTROL_TIMEOUT = 5.0
HEALTHY: dict[str, Any] = {}


def nudge_availability(api: client.ApiClient, version: str) -> None:
    """Touch the Service behind <version>.metrics.k8s.io so the aggregator re-probes it now, not at its 30 s resync."""
    service = client.ApiregistrationV1Api(api).read_api_service(f"{version}.{metrics_reads.GROUP}").spec.service
    client.CoreV1Api(api).patch_namespaced_service(
        service.name, service.namespace, {"metadata": {"annotations": {"dra-conformance.io/nudge": str(time.time())}}}
    )


def wait_available(api: client.ApiClient, versions: dict[str, bool], timeout: float) -> dict[str, str]:
    """Nudge and wait until each version's APIService is (True) or is not (False) Available."""
    for version in versions:
        nudge_availability(api, version)

    def state() -> dict[str, str]:
        return {v: version_availability.apiservice_condition(api, v) for v in versions}

    return waits.until(
        state,
        lambda now: all(now[v].startswith("True") == want for v, want in versions.items()),
        timeout=timeout,
        what=f"metrics APIServices available: {versions}",
        describe=str,
    )


def wait_serving(api: client.ApiClient, versions: tuple[str, ...], timeout: float) -> None:
    """After a change: wait until the versions are Available, answer through the proxy, and are discovered again.

    Each of the three follows the previous one asynchronously; a consumer that looks too early picks an older
    version or gets 503.
    """
    wait_available(api, dict.fromkeys(versions, True), timeout)
    version_availability.wait_answering(api, versions, timeout)
    version_availability.wait_discovered(api, versions, timeout)


class MetricsAdapter:
    """Switches the reference adapter's faults; `set` returns an undo."""

    def __init__(self, socket: Path, api: client.ApiClient, timeouts: Timeouts) -> None:
        """Control the adapter listening on `socket`."""
        self.socket, self.api, self.timeouts = socket, api, timeouts

    def set(self, faults: dict[str, Any]) -> Callable[[], None]:
        """Replace the adapter's faults."""
        unix_json_request(self.socket, "PUT", "/faults", faults, timeout=CONTROL_TIMEOUT)
        return self.restore

    def restore(self) -> None:
        """Back to healthy; wait until both APIServices are Available and both versions answer again."""
        unix_json_request(self.socket, "PUT", "/faults", HEALTHY, timeout=CONTROL_TIMEOUT)
        wait_serving(self.api, metrics_reads.VERSIONS, self.timeouts.metrics_available)
