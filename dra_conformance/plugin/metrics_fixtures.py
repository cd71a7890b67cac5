"""Fixtures for the Metrics API checks: a suite-identified client, the SLO, availability, the watch, the adapter.

Availability is read once, up front, and shared by the metrics checks (they run on one xdist worker, group
"metrics"): a version unavailable then is judged by the availability check, and the checks that need its samples
end at once as blocked (`metrics.version-available-for-samples`) instead of each waiting its deadline.

The controller also watches availability for the whole run (`metrics.run_watch`): an outage it sees, outside the
checks that change the metrics API on purpose, is printed when noticed and makes the metrics verdict "fix first:
<version> unavailable since <T>".
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_conformance.errors import ConformanceError, ReportsFull, UsageError
from dra_conformance.exits import refuse
from dra_conformance.kube.client import client_from_kubeconfig
from dra_conformance.metrics import availability as version_availability
from dra_conformance.metrics import decisions as metrics_decisions
from dra_conformance.metrics import evidence as metrics_evidence
from dra_conformance.metrics import reads as metrics_reads
from dra_conformance.metrics import run_watch, sample_gate
from dra_conformance.metrics import samples as metrics_sampling
from dra_conformance.metrics import watch as metrics_watch_mode
from dra_conformance.metrics.adapter import MetricsAdapter
from dra_conformance.metrics.verdict import RECORD_KIND, VERDICT_JSON, VERDICT_MARKDOWN, render_markdown
from dra_conformance.model.cluster import BackendCapability, ClusterInfo
from dra_conformance.model.findings import Obligations
from dra_conformance.model.records import RunRecords
from dra_conformance.plugin import stash
from dra_conformance.plugin.options import option_or
from dra_conformance.timeouts import Timeouts

# The harness obligation a check breaks when the versions it reads samples from are not usable.
SAMPLES_BLOCKED = "metrics.version-available-for-samples"
# The records file of the controller's own entries (workers write theirs under their xdist name, "main" without).
CONTROLLER_RECORDS = "controller"
# Set on every report of a check that changes the metrics API on purpose: the run's watch excuses its time.
CHANGES_METRICS_API = "changes_metrics_api"
# The checks that change the metrics API on purpose besides those using `metrics_adapter` (its fault switches), by
# (file under suites/, test name prefix): the metrics suite's rollback check deletes and restores v1's APIService,
# and every phase of the metrics API rollback rehearsal removes, observes or restores it.
CHANGING_CHECKS = (
    ("metrics/test_metrics_api.py", "test_rollback_leaves_no_v1_apiservice"),
    ("rollback/test_metrics_rollback.py", "test_"),
)
RUN_WATCH_PLUGIN = "dra-conformance-metrics-run-watch"


def pytest_addoption(parser: pytest.Parser) -> None:
    """--dra-metrics-freshness-slo, --dra-metrics-watch."""
    group = parser.getgroup("dra-conformance-metrics")
    group.addoption(
        "--dra-metrics-freshness-slo",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"p95 sample age above which autoscaling must hold (default {metrics_evidence.FRESHNESS_SLO:g})",
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
    """A --dra-metrics-watch that does not parse ends the run in one line; the controller gets the run's watch."""
    value = config.getoption("--dra-metrics-watch")
    if value is not None:
        try:
            metrics_watch_mode.parse_duration(value)
        except UsageError as error:
            refuse(error)
    if not stash.is_worker(config):
        config.pluginmanager.register(RunWatchPlugin(config), RUN_WATCH_PLUGIN)


def changes_metrics_api(nodeid: str, fixturenames: Sequence[str]) -> bool:
    """Whether a check changes the metrics API on purpose (`CHANGING_CHECKS`, or it uses `metrics_adapter`)."""
    if "metrics_adapter" in fixturenames:
        return True
    path, _, name = nodeid.partition("::")
    under = path.rpartition("suites/")[2] if "suites/" in path else ""
    return any(under == file and name.startswith(prefix) for file, prefix in CHANGING_CHECKS)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Mark each report of a check that changes the metrics API on purpose (it reaches the controller with it)."""
    report = yield
    if changes_metrics_api(item.nodeid, getattr(item, "fixturenames", ())):
        report.user_properties = [*report.user_properties, (CHANGES_METRICS_API, "1")]
    return report


class RunWatchPlugin:
    """In the controller: the Metrics API's availability probed for the whole run (`metrics.run_watch`)."""

    def __init__(self, config: pytest.Config) -> None:
        """Watch for the run configured by `config`."""
        self.config = config
        self.watch: run_watch.RunAvailabilityWatch | None = None
        self.api: client.ApiClient | None = None
        # Checks that change the metrics API on purpose: (first start, last stop, still running) by node id.
        self.changing: dict[str, tuple[float, float, bool]] = {}
        self._lock = threading.Lock()

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Where the run named its cluster, start probing."""
        cluster = self.config.stash.get(stash.CLUSTER, None)
        if cluster is None or self.config.getoption("collectonly") or stash.SUITE_CONFIG not in self.config.stash:
            return
        suite = self.config.stash[stash.SUITE_CONFIG]
        try:
            # No retries: a probe that times out is one unavailable probe, not four reads of READ_TIMEOUT each.
            admin = client_from_kubeconfig(
                cluster.kubeconfig, suite.context if cluster.backend == "existing" else None, retries=0
            )
        except (ConformanceError, OSError, ValueError) as error:
            self._say(f"metrics availability not watched over the run: {error}")
            return
        self.api = metrics_reads.suite_client(admin)
        admin.close()
        self.watch = run_watch.RunAvailabilityWatch(self.api, self.excused, self.notice)
        self.watch.start()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Note when checks that change the metrics API on purpose run (setup to teardown)."""
        if (CHANGES_METRICS_API, "1") not in report.user_properties:
            return
        with self._lock:
            start, stop, _ = self.changing.get(report.nodeid, (report.start, report.stop, True))
            self.changing[report.nodeid] = (min(start, report.start), max(stop, report.stop), report.when != "teardown")

    def excused(self) -> list[run_watch.Window]:
        """The windows of those checks so far; one still running lasts until now."""
        now = metrics_reads.utc_now()
        with self._lock:
            return [
                (datetime.fromtimestamp(start, UTC), now if running else datetime.fromtimestamp(stop, UTC))
                for start, stop, running in self.changing.values()
            ]

    def notice(self, outage: run_watch.Outage) -> None:
        """The live line, once per outage, when it is confirmed."""
        self._say(
            f"metrics verdict: {metrics_decisions.FIX_FIRST}: {outage.describe()}; "
            f"noticed {outage.noticed:%H:%M:%S} UTC (the metrics API's own verdict: it never decides the driver's)"
        )

    def _say(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"dra-conformance: {line}", yellow=True)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Stop probing, and record what the watch saw for the metrics verdict (written at the terminal summary)."""
        if self.watch is None:
            return
        probes = self.watch.stop()
        if self.api is not None:
            self.api.close()
        if not stash.opted_in(self.config) or stash.RUN_DIR not in self.config.stash:
            return
        with self._lock:
            excused = [
                (datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(stop, UTC))
                for start, stop, _ in self.changing.values()
            ]
        entry = run_watch.run_watch_entry(probes, excused, self.watch.started, self.watch.error)
        try:
            RunRecords(self.config.stash[stash.RUN_DIR], CONTROLLER_RECORDS).add(RECORD_KIND, entry)
        except ReportsFull as error:
            self._say(str(error))


@pytest.fixture(scope="session")
def metrics_client(api_client: client.ApiClient) -> Iterator[client.ApiClient]:
    """An admin client whose user agent names this suite (left out of the consumer inventory)."""
    with metrics_reads.suite_client(api_client) as api:
        yield api


@pytest.fixture
def freshness_slo(conformance_run: None, pytestconfig: pytest.Config) -> float:
    """The freshness SLO in seconds."""
    return float(option_or(pytestconfig, "--dra-metrics-freshness-slo", metrics_evidence.FRESHNESS_SLO))


@pytest.fixture(scope="session")
def metrics_availability(metrics_client: client.ApiClient, timeouts: Timeouts) -> version_availability.Availability:
    """Each version's availability, read once and shared by every metrics check of the run.

    Read when the first metrics check needs it, within the availability deadline (a pipeline still turning
    Available is given it).
    """
    return version_availability.read_availability(metrics_client, timeouts.metrics_available)


@pytest.fixture(scope="session")
def metrics_scope(cluster: ClusterInfo) -> metrics_sampling.SampleScope:
    """The samples the metrics checks judge: a few of the cluster's nodes and the Running pods on them."""
    return metrics_sampling.SampleScope.of_cluster(cluster.real_nodes, cluster.nodes)


@pytest.fixture(scope="session")
def metrics_samples(
    metrics_client: client.ApiClient,
    metrics_availability: version_availability.Availability,
    metrics_scope: metrics_sampling.SampleScope,
    timeouts: Timeouts,
) -> sample_gate.SampleGate:
    """Whether checks can read samples of a version (see `sample_gate.SampleGate`), shared by the run's checks."""
    return sample_gate.SampleGate(metrics_client, metrics_availability, metrics_scope, timeouts.metrics_first_sample)


@pytest.fixture
def need_samples(metrics_samples: sample_gate.SampleGate, obligations: Obligations) -> Callable[[Sequence[str]], None]:
    """`need_samples(versions)`: go on if their samples can be read, else end the check at once as blocked."""

    def need(versions: Sequence[str]) -> None:
        __tracebackhide__ = True
        reason = metrics_samples.blocked(versions)
        if reason is not None:
            obligations.fail(SAMPLES_BLOCKED, reason, f"{metrics_reads.GROUP} {', '.join(versions)}")

    return need


@pytest.fixture(scope="session")
def metrics_watch(
    pytestconfig: pytest.Config, metrics_client: client.ApiClient, metrics_samples: sample_gate.SampleGate
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
        metrics_samples.blocked([metrics_reads.preferred_version(served)])
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
