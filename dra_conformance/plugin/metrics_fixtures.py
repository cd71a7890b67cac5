"""Fixtures for the Metrics API checks: a suite-identified client, the SLO, and control of the reference adapter."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from dra_conformance.backends.base import BackendCapability, ClusterInfo
from dra_conformance.metrics import api as metrics_api
from dra_conformance.metrics.adapter import MetricsAdapter
from dra_conformance.timeouts import Timeouts


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


@pytest.fixture
def metrics_adapter(
    cluster: ClusterInfo, metrics_client: client.ApiClient, timeouts: Timeouts
) -> Iterator[MetricsAdapter]:
    """The local backend's reference metrics adapter, restored to healthy after the test."""
    if BackendCapability.REFERENCE_METRICS_ADAPTER not in cluster.capabilities:
        pytest.skip(f"not applicable: backend {cluster.backend} does not run the reference metrics adapter")
    adapter = MetricsAdapter(Path(cluster.details["metrics.control_socket"]), metrics_client, timeouts)
    yield adapter
    adapter.restore()
