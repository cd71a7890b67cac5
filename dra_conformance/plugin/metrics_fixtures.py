"""Fixtures for the Metrics API checks: a suite-identified client, the SLO, the watch, the reference adapter."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_conformance.backends.base import BackendCapability, ClusterInfo
from dra_conformance.errors import UsageError, WaitTimeout
from dra_conformance.metrics import api as metrics_api
from dra_conformance.metrics import watch as metrics_watch_mode
from dra_conformance.metrics.adapter import MetricsAdapter
from dra_conformance.metrics.verdict import VERDICT_JSON, VERDICT_MARKDOWN, render_markdown
from dra_conformance.plugin import stash
from dra_conformance.plugin.exits import refuse
from dra_conformance.timeouts import Timeouts


def pytest_addoption(parser: pytest.Parser) -> None:
    """--metrics-freshness-slo, --metrics-watch."""
    group = parser.getgroup("dra-conformance")
    group.addoption(
        "--metrics-freshness-slo",
        type=float,
        default=metrics_api.FRESHNESS_SLO,
        metavar="SECONDS",
        help=f"p95 sample age above which autoscaling must hold (default {metrics_api.FRESHNESS_SLO:g})",
    )
    group.addoption(
        "--metrics-watch",
        default=None,
        metavar="DURATION",
        help="sample Metrics API availability and lag every "
        f"{metrics_watch_mode.WATCH_INTERVAL:g} s for DURATION (30s, 10m, 24h) and put the figures in the verdict; "
        "widening needs 24h",
    )


def pytest_configure(config: pytest.Config) -> None:
    """A --metrics-watch that does not parse ends the run in one line."""
    value = config.getoption("--metrics-watch")
    if value is not None:
        try:
            metrics_watch_mode.parse_duration(value)
        except UsageError as error:
            refuse(error)


@pytest.fixture(scope="session")
def metrics_client(api_client: client.ApiClient) -> Iterator[client.ApiClient]:
    """An admin client whose user agent names this suite (left out of the consumer inventory)."""
    with metrics_api.suite_client(api_client) as api:
        yield api


@pytest.fixture
def freshness_slo(pytestconfig: pytest.Config) -> float:
    """The freshness SLO in seconds."""
    return float(pytestconfig.getoption("--metrics-freshness-slo"))


@pytest.fixture(scope="session")
def metrics_watch(
    pytestconfig: pytest.Config, metrics_client: client.ApiClient, timeouts: Timeouts
) -> metrics_watch_mode.WatchSummary | None:
    """The watch `--metrics-watch` asks for, run once when a check first needs it; None without the option.

    It starts once the pipeline has its first node samples (a pipeline warming up is not unavailable yet); one that
    never gets there is watched all the same, and the watch shows it unavailable.
    """
    value = pytestconfig.getoption("--metrics-watch")
    if value is None:
        return None
    try:
        metrics_api.wait_first_samples(metrics_client, timeouts.metrics_first_sample)
    except WaitTimeout:
        pass  # measured by the watch itself: every tick of a pipeline with no samples is unavailable
    return metrics_watch_mode.watch(metrics_client, metrics_watch_mode.parse_duration(value))


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


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Beside the verdict's JSON the run report has written (session hooks, earlier), its Markdown for people."""
    if stash.is_worker(config) or stash.RUN_DIR not in config.stash:
        return
    verdict = config.stash[stash.RUN_DIR] / VERDICT_JSON
    if not verdict.exists():
        return
    try:
        markdown = render_markdown(json.loads(verdict.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as error:
        terminalreporter.line(f"dra-conformance: {VERDICT_MARKDOWN} not written: {error!r}", red=True)
        return
    (verdict.parent / VERDICT_MARKDOWN).write_text(markdown)
