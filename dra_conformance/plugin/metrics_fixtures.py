"""Fixtures for the Metrics API checks: a suite-identified client, the SLO, availability, the watch, the adapter.

Availability is read once, up front, and shared by the metrics checks (they run on one xdist worker, group
"metrics"): a version unavailable then is judged by the availability check, and the checks that need its samples
end at once as blocked (`metrics.version-available-for-samples`) instead of each waiting its deadline.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_conformance.errors import UsageError
from dra_conformance.metrics import api as metrics_api
from dra_conformance.metrics import watch as metrics_watch_mode
from dra_conformance.metrics.adapter import MetricsAdapter
from dra_conformance.metrics.verdict import VERDICT_JSON, VERDICT_MARKDOWN, render_markdown
from dra_conformance.model.cluster import BackendCapability, ClusterInfo
from dra_conformance.model.findings import Obligations
from dra_conformance.plugin import stash
from dra_conformance.plugin.exits import refuse
from dra_conformance.plugin.options import option_or
from dra_conformance.timeouts import Timeouts

# The harness obligation a check breaks when the versions it reads samples from are not usable.
SAMPLES_BLOCKED = "metrics.version-available-for-samples"


def pytest_addoption(parser: pytest.Parser) -> None:
    """--dra-metrics-freshness-slo, --dra-metrics-watch."""
    group = parser.getgroup("dra-conformance-metrics")
    group.addoption(
        "--dra-metrics-freshness-slo",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"p95 sample age above which autoscaling must hold (default {metrics_api.FRESHNESS_SLO:g})",
    )
    group.addoption(
        "--dra-metrics-watch",
        default=None,
        metavar="DURATION",
        help="sample Metrics API availability and lag every "
        f"{metrics_watch_mode.WATCH_INTERVAL:g} s for DURATION (30s, 10m, 24h) and put the figures in the verdict; "
        "widening needs 24h",
    )


def pytest_configure(config: pytest.Config) -> None:
    """A --dra-metrics-watch that does not parse ends the run in one line."""
    value = config.getoption("--dra-metrics-watch")
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
def freshness_slo(conformance_run: None, pytestconfig: pytest.Config) -> float:
    """The freshness SLO in seconds."""
    return float(option_or(pytestconfig, "--dra-metrics-freshness-slo", metrics_api.FRESHNESS_SLO))


@pytest.fixture(scope="session")
def metrics_availability(metrics_client: client.ApiClient, timeouts: Timeouts) -> metrics_api.Availability:
    """Each version's availability, read once and shared by every metrics check of the run.

    Read when the first metrics check needs it, within the availability deadline (a pipeline still turning
    Available is given it).
    """
    return metrics_api.read_availability(metrics_client, timeouts.metrics_available)


@pytest.fixture(scope="session")
def metrics_scope(cluster: ClusterInfo) -> metrics_api.SampleScope:
    """The samples the metrics checks judge: a few of the cluster's nodes and the Running pods on them."""
    return metrics_api.SampleScope.of_cluster(cluster.real_nodes, cluster.nodes)


@pytest.fixture(scope="session")
def metrics_samples(
    metrics_client: client.ApiClient,
    metrics_availability: metrics_api.Availability,
    metrics_scope: metrics_api.SampleScope,
    timeouts: Timeouts,
) -> metrics_api.SampleGate:
    """Whether checks can read samples of a version (see `metrics_api.SampleGate`), shared by the run's checks."""
    return metrics_api.SampleGate(metrics_client, metrics_availability, metrics_scope, timeouts.metrics_first_sample)


@pytest.fixture
def need_samples(metrics_samples: metrics_api.SampleGate, obligations: Obligations) -> Callable[[Sequence[str]], None]:
    """`need_samples(versions)`: go on if their samples can be read, else end the check at once as blocked."""

    def need(versions: Sequence[str]) -> None:
        __tracebackhide__ = True
        reason = metrics_samples.blocked(versions)
        if reason is not None:
            obligations.fail(SAMPLES_BLOCKED, reason, f"{metrics_api.GROUP} {', '.join(versions)}")

    return need


@pytest.fixture(scope="session")
def metrics_watch(
    pytestconfig: pytest.Config, metrics_client: client.ApiClient, metrics_samples: metrics_api.SampleGate
) -> metrics_watch_mode.WatchSummary | None:
    """The watch `--dra-metrics-watch` asks for, run once when a check first needs it; None without the option.

    It starts once the preferred version has its first node samples (a pipeline warming up is not unavailable yet);
    one unavailable at the availability read, or that never gets there, is watched all the same, and the watch
    shows it unavailable.
    """
    value = pytestconfig.getoption("--dra-metrics-watch")
    if value is None:
        return None
    served = list(metrics_samples.availability.served)
    if served:
        # measured by the watch itself: every tick of a pipeline with no samples is unavailable
        metrics_samples.blocked([metrics_api.preferred_version(served)])
    return metrics_watch_mode.watch(metrics_client, metrics_watch_mode.parse_duration(value), metrics_samples.scope)


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
