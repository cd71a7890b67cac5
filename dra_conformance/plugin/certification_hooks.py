"""Collecting every test's outcome in the controller and writing the certification summary at the end of the run.

The controller also gathers the canary gate's inputs (see `dra_conformance.canary`): the run's window, the Events it
watches while the run goes on, and at the end the audit log and the rollback rehearsal's report or state file.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Generator
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_conformance import __version__, paths
from dra_conformance.canary import rules as canary_rules
from dra_conformance.canary.audit import gather_audit
from dra_conformance.canary.events import AllocationTimeoutWatch
from dra_conformance.canary.inputs import PROVOKED_RECORDS, EventFacts, Inputs, provocations
from dra_conformance.driver.answers import DriverAnswerWatch, Silence, answer_watch
from dra_conformance.errors import ConformanceError, HarnessFault, ReportsFull, SuiteForbidden
from dra_conformance.kube.client import client_from_kubeconfig
from dra_conformance.kube.cluster_health import ClusterHealthWatch, Fault
from dra_conformance.kube.preflight import REQUEST_TIMEOUT
from dra_conformance.kubelet.dra_metrics import EXCLUDED_RECORDS, KubeletWindow
from dra_conformance.kubelet.latency import RECORD_KIND as LATENCY_RECORDS
from dra_conformance.kubelet.latency import latency_figures
from dra_conformance.model.cluster import DriverProcesses
from dra_conformance.model.obligations import Basis, HarnessPreconditionFailed, ObligationFailed
from dra_conformance.model.records import read_records
from dra_conformance.plugin import stash
from dra_conformance.plugin.opt_in import in_the_suites
from dra_conformance.plugin.options import option_or
from dra_conformance.plugin.rollback_fixtures import STATE_FILE
from dra_conformance.plugin.session import backend_of
from dra_conformance.plugin.silence_citations import cite_silences
from dra_conformance.report import reports_space, summary_attribution
from dra_conformance.report.allure_tables import write_global_pages
from dra_conformance.report.certification import (
    PHASES,
    findings_of,
    merge,
    outcome_of,
    phase_reason,
    render_markdown,
    summarize,
    terminal_lines,
    write_summary,
)
from dra_conformance.report.fleet.identity import cluster_name
from dra_conformance.rollback.report import REPORT_JSON
from dra_conformance.rollback.report import summarize as summarize_rehearsal
from dra_conformance.rollback.state import Phase, RehearsalState
from dra_conformance.verdict import HARNESS_ERROR, WORKER_CRASH, CheckResult, Outcome, RunFacts, Selection

CAPABILITY_PROPERTY = "capabilities"
# Set on a report whose phase raised a registry obligation: its id, basis and capability.
OBLIGATION_PROPERTY = "obligation"
BASIS_PROPERTY = "obligation_basis"
OBLIGATION_CAPABILITY_PROPERTY = "obligation_capability"
# The harness obligation a refused request of the suite's own identity breaks (errors.SuiteForbidden).
SUITE_RIGHTS = SuiteForbidden.obligation
COLLECTOR_NAME = "dra-conformance-certification"
# The Allure group of checks that exercise no optional capability: what every driver must do.
EVERY_DRIVER = "every driver"


def pytest_addoption(parser: pytest.Parser) -> None:
    """The canary gate's tolerance, fallback SLOs and error budget."""
    group = parser.getgroup("dra-conformance-verdict")
    group.addoption(
        "--dra-canary-tolerance",
        type=float,
        default=None,
        help="how much worse than the device-plugin baseline the DRA p95s may be, as a fraction "
        f"(default {canary_rules.TOLERANCE_RATIO}; at least {canary_rules.TOLERANCE_SECONDS} s)",
    )
    group.addoption(
        "--dra-canary-allocation-slo",
        type=float,
        default=None,
        help=f"allocation p95 in seconds when no baseline was measured (default {canary_rules.ALLOCATION_SLO:g})",
    )
    group.addoption(
        "--dra-canary-ready-slo",
        type=float,
        default=None,
        help=f"pod-ready p95 in seconds when no baseline was measured (default {canary_rules.READY_SLO:g})",
    )
    group.addoption(
        "--dra-canary-prepare-slo",
        type=float,
        default=None,
        help=f"the kubelet-observed prepare p95 in seconds the gate allows (default {canary_rules.PREPARE_SLO:g})",
    )
    group.addoption(
        "--dra-canary-error-budget",
        type=int,
        default=None,
        help="status-writer denials, status update errors, allocation timeouts, and the kubelets' calls to the "
        "driver that did not end OK, the gate tolerates (default 0)",
    )
    group.addoption(
        "--dra-cluster-name",
        default=None,
        help="the cluster's name in summary.json and the fleet report (default: the kubeconfig context of an "
        "existing cluster, else <backend>/<state dir name>, e.g. local/local)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the capability marker, and in the controller the collector of outcomes.

    The collector is there from the start even in a run not opted in yet, so a run that opts in at collection
    (see `plugin.opt_in`) has every report; it acts only in an opted-in run.
    """
    config.addinivalue_line("markers", "capability(*names): the declared driver capabilities this check exercises")
    config.addinivalue_line(
        "markers",
        "provokes(what): this check makes the driver under test meet refusals on purpose, in the check's namespace; "
        "the canary gate excludes them from its error budget and lists them",
    )
    if not stash.is_worker(config):
        config.pluginmanager.register(OutcomeCollector(config), COLLECTOR_NAME)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Carry each check's capabilities in its user properties, which reach the controller with every report.

    The bundled suites' checks are also labelled for Allure by what they certify, not by file path: the report's
    tree groups them capability -> suite -> file (parentSuite, suite, subSuite), its behaviours view capability ->
    suite (epic, feature) -> the obligations each check verified (story, added as they are checked). In a run not
    opted in (yet), only tests of the bundled suites are labelled: a project's own `suites/` keeps its labels.
    """
    for item in items:
        names = sorted({name for marker in item.iter_markers("capability") for name in marker.args})
        if names:
            item.user_properties.append((CAPABILITY_PROPERTY, ",".join(names)))
        suite = CheckResult(item.nodeid, Outcome.PASSED).suite
        if "suites/" not in item.nodeid.split("::", 1)[0]:
            continue
        if not (stash.opted_in(config) or in_the_suites(item)):
            continue
        area = f"capability {names[0]}" if names else EVERY_DRIVER
        module = item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
        for label, value in (("parentSuite", area), ("suite", suite), ("subSuite", module)):
            item.add_marker(pytest.mark.allure_label(value, label_type=label))
        item.add_marker(pytest.mark.allure_label(*(names or [EVERY_DRIVER]), label_type="epic"))
        item.add_marker(pytest.mark.allure_label(suite, label_type="feature"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Name the registry obligation a phase broke in its report, so the verdict can tell failures from errors.

    No failure without an obligation: a phase that failed raising anything else breaks HARNESS_ERROR. A full
    reports dir fails every check after it the same way: each says so in its one line, not a traceback each.
    """
    report = yield
    error = call.excinfo.value if call.excinfo is not None else None
    full = reports_full_error(error)
    if report.failed and full is not None:
        report.longrepr = f"{type(full).__name__}: {full}"
    named = obligation_properties(error)
    if report.failed and not named:
        named = [(OBLIGATION_PROPERTY, HARNESS_ERROR), (BASIS_PROPERTY, str(Basis.HARNESS))]
    report.user_properties = [*report.user_properties, *named]
    return report


def reports_full_error(error: BaseException | None) -> ReportsFull | None:
    """The ReportsFull `error` is, or the first of a teardown's group of errors that are all ReportsFull."""
    if isinstance(error, BaseExceptionGroup):
        inner = [reports_full_error(e) for e in error.exceptions]
        return inner[0] if inner and all(inner) else None
    return error if isinstance(error, ReportsFull) else None


def obligation_properties(error: BaseException | None) -> list[tuple[str, str]]:
    """The report properties naming the registry obligation `error` broke (none for other errors).

    A limit of the suite (`HarnessFault`: a request of its own identity the API server refused, a relay to a
    driver's socket that broke) breaks the harness obligation it names: the check errors as the suite's problem,
    whatever obligation it was verifying. Errors of several finalizers at once (pytest's teardown ExceptionGroup)
    name the first of them that names one.
    """
    if isinstance(error, BaseExceptionGroup):
        return next((found for inner in error.exceptions if (found := obligation_properties(inner))), [])
    if isinstance(error, ObligationFailed | HarnessPreconditionFailed):
        obligation = error.obligation
        return [
            (OBLIGATION_PROPERTY, obligation.id),
            (BASIS_PROPERTY, str(obligation.basis)),
            (OBLIGATION_CAPABILITY_PROPERTY, obligation.capability or ""),
        ]
    if isinstance(error, HarnessFault):
        return [
            (OBLIGATION_PROPERTY, error.obligation),
            (BASIS_PROPERTY, str(Basis.HARNESS)),
            (OBLIGATION_CAPABILITY_PROPERTY, ""),
        ]
    return []


class OutcomeCollector:
    """Folds every phase report (the controller sees every worker's) into one result per test."""

    def __init__(self, config: pytest.Config) -> None:
        """Collect for the run configured by `config`."""
        self.config = config
        self.results: dict[str, CheckResult] = {}
        # The canary gate counts what happened within the run's window.
        self.started = datetime.now(UTC)
        self.ended: datetime | None = None
        self.watch: AllocationTimeoutWatch | None = None
        self.health: ClusterHealthWatch | None = None
        self.faults: list[Fault] = []
        # Whether each instance of the driver under test answers (`driver.answers`), and when it did not.
        self.answers: DriverAnswerWatch | None = None
        self.silences: list[Silence] = []
        self.spans: dict[str, tuple[float, float]] = {}
        # Per check, the (start, stop) of each phase that failed or errored: what a fault's window is held against.
        self.failing_spans: dict[str, list[tuple[float, float]]] = {}
        self.exits: list[dict[str, Any]] | None = None
        self.events: EventFacts | None = None
        self.events_missing = "no cluster was named when the run started (`dra-conformance run` names it)"
        self.cluster_version: str | None = None
        # The real nodes' kubelets, read at the start and the end of the run (the gate's kubelet rules).
        self.kubelets: KubeletWindow | None = None
        # What the run set out to check (the controller collects; with xdist, the first worker's collection).
        self.collected: list[str] | None = None
        self.deselected = 0
        self.stopped = ""

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Without xdist the controller collects: what it kept (after `-k`/`-m`) the run must account for."""
        if session.items:
            self.collected = [item.nodeid for item in session.items]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """With xdist every worker collects the same checks; the first answer is the selection."""
        if self.collected is None:
            self.collected = list(ids)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """Checks `-k`/`-m` left out: the run is a subset."""
        self.deselected += sum("suites/" in item.nodeid.split("::", 1)[0] for item in items)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Where the run named its cluster: watch Events (allocation timeouts), the control plane and the driver.

        The driver's watch (`driver.answers`) probes each instance of it this machine reaches, from here only: the
        controller, never an xdist worker.
        """
        cluster = self.config.stash.get(stash.CLUSTER, None)
        if cluster is None or self.config.getoption("collectonly"):
            return
        suite = self.config.stash[stash.SUITE_CONFIG]
        try:
            api = client_from_kubeconfig(cluster.kubeconfig, suite.context if cluster.backend == "existing" else None)
            version = client.VersionApi(api).get_code(_request_timeout=REQUEST_TIMEOUT)
            self.cluster_version = str(version.git_version)
            self.watch = AllocationTimeoutWatch(api)
            self.watch.start()
            self.health = ClusterHealthWatch(api)
            self.health.start()
            self.kubelets = KubeletWindow(api, tuple(cluster.real_nodes)).start()
        except Exception as error:  # the gate (and the cluster version) then say they have no data; the run goes on
            self.watch, self.events_missing = None, f"event watch did not start: {type(error).__name__}: {error}"
        if stash.PROFILE in self.config.stash:
            self.answers = answer_watch(cluster, self.config.stash[stash.PROFILE].driver)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Close the run's window and stop the Event watch, before the run stops its cluster.

        A run that ended before every collected check finished says so in its exit code, even where pytest's own
        would be 0 (a crashed xdist worker's checks are otherwise just missing).
        """
        if not stash.opted_in(self.config):
            return
        self.ended = datetime.now(UTC)
        if session.shouldstop:
            self.stopped = str(session.shouldstop)
        elif session.shouldfail:
            self.stopped = str(session.shouldfail)
        elif exitstatus == pytest.ExitCode.INTERRUPTED:
            self.stopped = "interrupted"
        finished = set(self.results)
        if exitstatus == pytest.ExitCode.OK and any(n not in finished for n in self._suite_checks()):
            self.stopped = self.stopped or "collected checks did not report (a crashed worker?)"
            session.exitstatus = pytest.ExitCode.INTERRUPTED
        if self.watch is not None:
            self.events, self.events_missing = self.watch.stop()
            self.watch = None
        if self.health is not None:
            self.faults = self.health.stop()
        if self.answers is not None:
            self.silences = self.answers.stop()
        if self.kubelets is not None:
            self.kubelets.finish()
        # Before the run stops its cluster: the supervisor's record of exits goes with it.
        self.exits = self.driver_exits()

    def _suite_checks(self) -> list[str]:
        return [nodeid for nodeid in self.collected or [] if "suites/" in nodeid.split("::", 1)[0]]

    def selection(self) -> Selection:
        """The run's selection of the bundled suites, and what it left out of them."""
        collected = self._suite_checks()
        bundled = sorted(p.name for p in paths.suites_dir().iterdir() if p.is_dir() and any(p.glob("test_*.py")))
        ran = {CheckResult(nodeid, Outcome.PASSED).suite for nodeid in collected}
        return Selection(
            collected=tuple(collected),
            deselected=self.deselected,
            suites_not_run=tuple(suite for suite in bundled if suite not in ran),
            stopped=self.stopped,
            filtered_by=" ".join(
                f"{flag} {expression!r}"
                for flag, expression in (("-k", self.config.option.keyword), ("-m", self.config.option.markexpr))
                if expression
            ),
        )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """One phase (setup, call, teardown) of one test."""
        properties = dict(report.user_properties)
        basis = str(properties.get(BASIS_PROPERTY, ""))
        reason = phase_reason(report)
        found = outcome_of(report.when, report.passed, report.skipped, reason, basis)
        if found is None:
            return
        if report.when not in PHASES:
            properties[OBLIGATION_PROPERTY] = WORKER_CRASH
        if found[0] in (Outcome.FAILED, Outcome.ERROR):
            # Which fault it met, if any, is decided at the end (`summary_attribution`): the fault may not be
            # recorded yet when the report of a check it broke arrives.
            self.failing_spans.setdefault(report.nodeid, []).append((report.start, report.stop))
        # When the check ran, for the silences of the driver it may have met (`silence_citations`).
        earlier = self.spans.get(report.nodeid, (report.start, report.stop))
        self.spans[report.nodeid] = (min(earlier[0], report.start), max(earlier[1], report.stop))
        capabilities = tuple(filter(None, str(properties.get(CAPABILITY_PROPERTY, "")).split(",")))
        obligation = (
            str(properties.get(OBLIGATION_PROPERTY, "")),
            str(properties.get(OBLIGATION_CAPABILITY_PROPERTY, "")),
        )
        traceback = report.longreprtext if obligation[0] == HARNESS_ERROR else ""
        self.results[report.nodeid] = merge(
            self.results.get(report.nodeid), report.nodeid, found, capabilities, obligation, traceback
        )

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Generator[None]:
        """After every other section, pytest's short test summary (`-ra`) included: the verdict, printed last.

        The outermost wrapper's code after its yield runs after every other implementation's, the terminal
        reporter's own wrapper (whose short test summary follows its yield) among them; only pytest's outcome line
        ("N passed in S s"), which CI tools parse, comes after.
        """
        try:
            return (yield)
        finally:
            self.summarize(terminalreporter)

    def summarize(self, terminalreporter: Any) -> None:
        """Write summary.{md,json} and print the verdict block."""
        config = self.config
        # The verdict is about the conformance suites; the project's own tests (tests/) say nothing about a driver.
        results = [r for r in self.results.values() if "suites/" in r.nodeid.split("::", 1)[0]]
        results = summary_attribution.attribute(
            results,
            self.failing_spans,
            summary_attribution.cluster_windows(self.faults),
            summary_attribution.exit_windows(self.exits or []),
        )
        results = cite_silences(results, self.silences, self.spans)
        if stash.RUN_DIR not in config.stash or stash.PROFILE not in config.stash or not results:
            return
        if config.getoption("collectonly"):
            return
        profile = config.stash[stash.PROFILE]
        suite = config.stash[stash.SUITE_CONFIG]
        cluster = config.stash.get(stash.CLUSTER, None)
        facts = RunFacts(
            suite_version=__version__,
            backend=suite.backend,
            cluster_version=self.cluster_version,
            driver=profile.driver,
            profile=profile.source.name,
            profile_digest=profile.digest,
            driver_version=profile.version,
            declared=tuple(sorted(str(c) for c in profile.capabilities)),
            extra={
                "cluster_health_watch": self.health.error or "watched" if self.health else "not watched",
                "driver_answer_watch": self.answers.watching() if self.answers else "not watched",
                **({"real_node_absent": why} if (why := self.real_node_absent()) else {}),
                "rerun": self.rerun_command(),
                "strictness": str(config.getoption("--dra-strictness") or profile.strictness),
            },
            cluster=self.cluster_name(),
            finished_at=(self.ended or datetime.now(UTC)).isoformat(timespec="seconds"),
            install_transforms=list(cluster.install_transforms) if cluster is not None else [],
        )
        run_dir = config.stash[stash.RUN_DIR]
        gate = self.canary_gate(run_dir, profile.identity.service_account.username, profile.driver)
        selection = self.selection()
        faults = [fault.describe() for fault in self.faults]
        silences = [silence.to_json() for silence in self.silences]
        # What the verdict is decided from, written too, for `dra-conformance verdict RUN` to decide again.
        findings = findings_of(results, facts, run_dir, selection, faults, self.exits, silences)
        summary = summarize(results, facts, run_dir, gate, selection, faults, self.exits, silences, findings)
        problem = write_summary(summary, run_dir, findings)  # a full disk: one line, printed after the verdict
        allure_dir = getattr(config.option, "allure_report_dir", None)
        if allure_dir and problem is None:
            # The verdict opens the HTML report: the whole summary is the run's first global attachment.
            try:
                write_global_pages(
                    Path(allure_dir), [(f"certification summary: {summary['verdict']}", render_markdown(summary))]
                )
            except OSError as error:
                if not reports_space.is_full(error):
                    raise
                problem = reports_space.full_line(Path(allure_dir), error)
        terminalreporter.section("certification summary")
        for line in terminal_lines(summary):
            terminalreporter.line(line, red=summary["verdict"] == "not certified")
        if problem is not None:
            terminalreporter.line(f"dra-conformance: {problem}", red=True)

    def rerun_command(self) -> str:
        """`dra-conformance run` with the flags that name this run's cluster and driver, for the "next" lines."""
        suite = self.config.stash[stash.SUITE_CONFIG]
        words = ["dra-conformance", "run"]
        if suite.backend != "local":
            words += ["--cluster", suite.backend]
            words += ["--kubeconfig", str(suite.kubeconfig)] if suite.kubeconfig else []
            words += ["--context", suite.context] if suite.context else []
        words += ["--profile", str(suite.profile)] if suite.profile else []
        words += ["--real-node"] if suite.real_node else []
        default = type(suite).real_nodes
        words += ["--real-nodes", str(suite.real_nodes)] if suite.real_node and suite.real_nodes != default else []
        return shlex.join(words)

    def cluster_name(self) -> str | None:
        """The run's cluster as the fleet report names it (None: no name given and no cluster attached)."""
        given = self.config.getoption("--dra-cluster-name")
        cluster = self.config.stash.get(stash.CLUSTER, None)
        if cluster is None:
            return given or None
        context = self.config.stash[stash.SUITE_CONFIG].context
        return cluster_name(given, cluster.backend, cluster.server, cluster.kubeconfig, context, cluster.details)

    def real_node_absent(self) -> str:
        """Why no node of the run's cluster is served by a real kubelet ("" where one is)."""
        cluster = self.config.stash.get(stash.CLUSTER, None)
        if cluster is None or cluster.real_nodes:
            return ""
        given = self.config.getoption("--dra-real-node-absent")
        if given:
            return str(given)
        if cluster.backend == "local":
            return "not asked for (--real-node)"
        return f"no node of this {cluster.backend} cluster is served by a real kubelet"

    def driver_exits(self) -> list[dict[str, Any]] | None:
        """Exits of the driver under test during the run, where the backend runs its processes (else None)."""
        if stash.CLUSTER not in self.config.stash:
            return None
        backend = backend_of(self.config)
        if not isinstance(backend, DriverProcesses):
            return None
        try:
            exits = backend.driver_exits(self.started.timestamp())
        except (ConformanceError, OSError, ValueError):
            return None
        return [{**asdict(e), "describe": e.describe()} for e in exits]

    def canary_gate(self, run_dir: Path, driver_user: str, driver: str) -> dict[str, Any]:
        """Gather the canary gate's inputs and evaluate it."""
        config = self.config
        rollback, namespace = _rehearsal(run_dir, config.getoption("--dra-rollback-state"))
        cluster = config.stash.get(stash.CLUSTER, None)
        audit, audit_missing = gather_audit(
            cluster.audit_log if cluster is not None else None,
            driver_user=driver_user,
            canary_namespace=namespace,
            since=self.started,
            until=self.ended or datetime.now(UTC),
            provoked=provocations(read_records(run_dir, PROVOKED_RECORDS)),
        )
        kubelet, kubelet_missing = (
            self.kubelets.run(read_records(run_dir, EXCLUDED_RECORDS))
            if self.kubelets is not None
            else (None, f"the kubelets were not read at the start of the run ({self.events_missing})")
        )
        inputs = Inputs(
            driver_user,
            rollback,
            audit,
            audit_missing,
            self.events,
            self.events_missing,
            driver=driver,
            kubelet=kubelet,
            kubelet_missing=kubelet_missing,
            client_latency=latency_figures(read_records(run_dir, LATENCY_RECORDS)),
        )
        policy = canary_rules.Policy(
            tolerance_ratio=option_or(config, "--dra-canary-tolerance", canary_rules.TOLERANCE_RATIO),
            allocation_slo=option_or(config, "--dra-canary-allocation-slo", canary_rules.ALLOCATION_SLO),
            ready_slo=option_or(config, "--dra-canary-ready-slo", canary_rules.READY_SLO),
            prepare_slo=option_or(config, "--dra-canary-prepare-slo", canary_rules.PREPARE_SLO),
            error_budget=option_or(config, "--dra-canary-error-budget", canary_rules.ERROR_BUDGET),
        )
        return canary_rules.evaluate(inputs, policy)


def _rehearsal(run_dir: Path, state_file: Path | None) -> tuple[dict[str, Any] | None, str | None]:
    """The rollback rehearsal's report (this run's, else from the state file) and its namespace, where one ran."""
    path = state_file or run_dir / STATE_FILE
    try:
        state = RehearsalState.load(path)
    except ConformanceError:
        state = None  # not a state file: the rollback suite refuses it itself; here it means no rehearsal
    report_file = run_dir / REPORT_JSON
    if report_file.is_file():
        report: dict[str, Any] | None = json.loads(report_file.read_text())
    else:
        report = summarize_rehearsal(state) if state is not None and state.records else None
    before = state.records.get(Phase.BEFORE) if state is not None else None
    namespace = before.facts.get("setup", {}).get("namespace") if before is not None else None
    return report, namespace
