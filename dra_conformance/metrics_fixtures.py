"""Fixtures for the Metrics API checks: a suite-identified client, the SLO, and control of the reference adapter."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_conformance import metrics_api, waits
from dra_conformance.backends.base import ClusterInfo
from dra_conformance.plugin import RUN_DIR_KEY
from dra_conformance.timeouts import Timeouts
from dra_conformance.unix_http import unix_json_request

# Control requests are local and answered at once.
CONTROL_TIMEOUT = 5.0
HEALTHY: dict[str, Any] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    """--metrics-freshness-slo."""
    parser.getgroup("dra-conformance").addoption(
        "--metrics-freshness-slo",
        type=float,
        default=metrics_api.FRESHNESS_SLO,
        metavar="SECONDS",
        help=f"p95 sample age above which autoscaling must hold (default {metrics_api.FRESHNESS_SLO:g})",
    )


@pytest.fixture(scope="session")
def metrics_client(api_client: client.ApiClient) -> Iterator[client.ApiClient]:
    """An admin client whose user agent names this suite (left out of the consumer inventory)."""
    with metrics_api.suite_client(api_client) as api:
        yield api


@pytest.fixture
def freshness_slo(pytestconfig: pytest.Config) -> float:
    """The freshness SLO in seconds."""
    return float(pytestconfig.getoption("--metrics-freshness-slo"))


def nudge_availability(api: client.ApiClient, version: str) -> None:
    """Touch the Service behind <version>.metrics.k8s.io so the aggregator re-probes it now, not at its 30 s resync."""
    service = client.ApiregistrationV1Api(api).read_api_service(f"{version}.{metrics_api.GROUP}").spec.service
    client.CoreV1Api(api).patch_namespaced_service(
        service.name, service.namespace, {"metadata": {"annotations": {"dra-conformance.io/nudge": str(time.time())}}}
    )


def wait_available(api: client.ApiClient, versions: dict[str, bool], timeout: float) -> dict[str, str]:
    """Nudge and wait until each version's APIService is (True) or is not (False) Available."""
    for version in versions:
        nudge_availability(api, version)

    def state() -> dict[str, str]:
        return {v: metrics_api.apiservice_condition(api, v) for v in versions}

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
    metrics_api.wait_answering(api, versions, timeout)
    metrics_api.wait_discovered(api, versions, timeout)


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
        wait_serving(self.api, metrics_api.VERSIONS, self.timeouts.metrics_available)


@pytest.fixture
def metrics_adapter(
    cluster: ClusterInfo, metrics_client: client.ApiClient, timeouts: Timeouts
) -> Iterator[MetricsAdapter]:
    """The local backend's reference metrics adapter, restored to healthy after the test."""
    if "fake-metrics" not in cluster.capabilities:
        pytest.skip(f"backend {cluster.backend} does not run the reference metrics adapter")
    adapter = MetricsAdapter(Path(cluster.details["metrics.control_socket"]), metrics_client, timeouts)
    yield adapter
    adapter.restore()


VERDICT_FILE = "metrics-verdict.json"


def record_verdict(run_dir: Path, evidence: metrics_api.Evidence, decisions: list[str]) -> None:
    """Write the run's verdict with its evidence (the last evaluation wins)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    document = {"decisions": decisions, "evidence": json.loads(evidence.to_json())}
    (run_dir / VERDICT_FILE).write_text(json.dumps(document, indent=2))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Print the Metrics API verdict of the run, if the metrics suite computed one."""
    if hasattr(config, "workerinput") or RUN_DIR_KEY not in config.stash:
        return
    path = config.stash[RUN_DIR_KEY] / VERDICT_FILE
    if not path.exists():
        return
    document = json.loads(path.read_text())
    terminalreporter.section("metrics API verdict")
    for decision in document["decisions"]:
        terminalreporter.line(f"- {decision}")
    evidence = document["evidence"]
    terminalreporter.line(
        f"  available: {evidence['available']}; sample age p50/p95: {evidence['lag_p50']}/"
        f"{evidence['lag_p95']} s (SLO {evidence['slo']} s); v1beta1-only consumers: "
        f"{evidence['v1beta1_only_consumers']}; details: {path}"
    )
