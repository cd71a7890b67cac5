"""Run-wide hooks: the run id and report locations, the cluster preflight, the cluster's end, the run report.

One cluster per run, shared by all xdist workers: the controller (or the only process) owns it. When the command
line names the cluster (`--dra-cluster`, as `dra-conformance run` always does), the controller starts or attaches to
it while pytest configures, before collection and before any worker starts; the backend's start includes the
preflight, so an unusable cluster ends the run in one line with exit code 2 and nothing written. Then the
controller asks whether the run's identity holds every right the bundled suites need (`kube.rights`; the existing
backend's start asks already, so it can refuse before it reads the cluster): if not, the run ends the same way,
naming every missing right at once, unless `--dra-allow-partial` is given and no right every suite needs is among
them; then the checks of the suites that need a missing right are skipped at collection, as not applicable. The
workers get the cluster's description and the missing rights, and never repeat the checks. Without
`--dra-cluster`, the first test that needs the cluster starts the local one, under a file lock. A local cluster has
owners: every run that starts or attaches to it holds it (`backends.local.owners`), the controller releases it at
session end, and the supervisor stops it when its last owner has released it or exited, unless
`--dra-keep-cluster` (or `cluster up`) kept it.

All of this happens only in a run that asks for DRA conformance (see `plugin.opt_in`); in any other run the
plugin only fixes a run id no one reads.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from dra_conformance import paths
from dra_conformance.backends.base import ClusterBackend
from dra_conformance.backends.registry import make_backend
from dra_conformance.driver.profile import load_profile
from dra_conformance.errors import ConformanceError, UsageError
from dra_conformance.exits import refuse
from dra_conformance.kube.preflight import RightsCheck, check_rights
from dra_conformance.kube.rights import describe_missing, missing_from_json, missing_to_json, skip_reasons, suite_of
from dra_conformance.kubelet.latency import RECORD_KIND as LATENCY_RECORDS
from dra_conformance.kubelet.latency import summarize_latencies
from dra_conformance.metrics.verdict import RECORD_KIND as VERDICT_RECORDS
from dra_conformance.metrics.verdict import summarize_verdict
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.findings import RECORD_KIND as ADVISORY_RECORDS
from dra_conformance.model.records import Summarizer
from dra_conformance.plugin import stash
from dra_conformance.plugin.opt_in import REPORT_ATTRIBUTE, asked_before_collection, uses_the_plugin
from dra_conformance.plugin.options import cluster_named, suite_config_from
from dra_conformance.plugin.rbac_fixtures import load_matrix, load_read_allowlist
from dra_conformance.plugin.run_claim import claim_cluster, release_cluster
from dra_conformance.plugin.scenario_fixtures import load_catalog
from dra_conformance.rbac.matrix import RECORD_KIND as MATRIX_RECORDS
from dra_conformance.rbac.matrix import summarize_cells
from dra_conformance.rbac.read_exposure import RECORD_KIND as READ_EXPOSURE_RECORDS
from dra_conformance.rbac.read_exposure import summarize_exposure
from dra_conformance.report.advisories import summarize_advisories
from dra_conformance.report.writer import write_report

# Record kind -> summarizer, in the order the sections are printed at the end of the run.
SUMMARIZERS: dict[str, Summarizer] = {
    LATENCY_RECORDS: summarize_latencies,
    MATRIX_RECORDS: summarize_cells,
    READ_EXPOSURE_RECORDS: summarize_exposure,
    VERDICT_RECORDS: summarize_verdict,
    ADVISORY_RECORDS: summarize_advisories,
}
# The plugin name of a controller's `LateOptIn`.
LATE_OPT_IN = "dra-conformance-late-opt-in"


def _new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _raise_keyboard_interrupt(_signum: int, _frame: object) -> None:
    # pytest turns KeyboardInterrupt into an orderly session end, which stops the cluster this run started.
    raise KeyboardInterrupt


def _after_the_reports(_signum: int, _frame: object) -> None:
    print("dra-conformance: SIGTERM while the verdict and reports are written: the run ends once they are", flush=True)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Fix the run id; in a run whose command line asks for DRA conformance, opt in (see `plugin.opt_in`).

    Then the controller checks a cluster the command line names, and points JUnit and Allure output at
    reports/<run-id>/, before the terminal, JUnit and Allure plugins configure.
    """
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None:
        run_id, owner_pid, asked = workerinput["dra_run_id"], workerinput["dra_owner_pid"], workerinput["dra_opted_in"]
    else:
        run_id, owner_pid, asked = _new_run_id(), os.getpid(), asked_before_collection(config)
    config.stash[stash.RUN_ID] = run_id
    config.stash[stash.OWNER_PID] = owner_pid
    if not asked:
        if workerinput is None:
            config.pluginmanager.register(LateOptIn(config), LATE_OPT_IN)
        return
    opt_in(config)
    if starts_nothing(config):
        return  # listing tests or options writes no reports and starts nothing
    if workerinput is None:
        if cluster_named(config):
            # Before the terminal, JUnit and Allure plugins configure: a refusal is one line and writes nothing.
            try:
                backend = backend_of(config)
                claim_cluster(config, backend)  # one run per local cluster: refused (or waits) before it attaches
                cluster = config.stash[stash.CLUSTER] = backend.start()
                check_identity(config, cluster, getattr(backend, "rights", None))
            except ConformanceError as error:
                release_cluster(config)
                refuse(error)
        # Only a path: JUnit creates the directory when it writes.
        if not config.option.xmlpath:
            config.option.xmlpath = str(config.stash[stash.RUN_DIR] / "junit.xml")
    if hasattr(config.option, "allure_report_dir") and not config.option.allure_report_dir:
        config.option.allure_report_dir = str(config.stash[stash.RUN_DIR] / "allure-results")


def opt_in(config: pytest.Config) -> None:
    """Make this process part of a DRA conformance run (once): check its inputs, fix its report directory.

    A bad option, profile, catalog or matrix ends the run in one line. A worker takes the cluster and the missing
    rights the controller found; the controller (or the only process) turns SIGTERM into an orderly end.
    """
    if stash.opted_in(config):
        return
    suite = suite_config_from(config)
    try:
        profile = load_profile(config.getoption("--dra-profile") or paths.reference_driver_profile())
    except UsageError as error:
        refuse(error)
    config.stash[stash.PROFILE] = profile
    load_catalog(config)
    load_matrix(config)
    load_read_allowlist(config)
    reports = config.getoption("--dra-reports-dir") or Path(str(config.rootpath)) / "reports"
    config.stash[stash.RUN_DIR] = reports / config.stash[stash.RUN_ID]
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None:
        if workerinput.get("dra_cluster") is not None:
            config.stash[stash.CLUSTER] = ClusterInfo.from_json(workerinput["dra_cluster"])
        if workerinput.get("dra_missing_rights"):
            config.stash[stash.MISSING_RIGHTS] = missing_from_json(workerinput["dra_missing_rights"])
    elif not starts_nothing(config):
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    config.stash[stash.SUITE_CONFIG] = suite  # last: its presence marks an opted-in process


@pytest.fixture(scope="session")
def conformance_run(pytestconfig: pytest.Config) -> None:
    """Opts the run in to DRA conformance; every fixture of the plugin requests it, directly or through another.

    So a test that uses any of them asks for the run, and `plugin.opt_in` finds it in the test's fixture closure.
    """
    opt_in(pytestconfig)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Opt in where a collected test lives in the bundled suites or uses one of the plugin's fixtures."""
    if not stash.opted_in(session.config) and any(uses_the_plugin(item) for item in session.items):
        opt_in(session.config)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """In an opted-in xdist worker, mark each report: the controller may not know yet (see `LateOptIn`)."""
    report = yield
    if stash.is_worker(item.config) and stash.opted_in(item.config):
        setattr(report, REPORT_ATTRIBUTE, True)
    return report


class LateOptIn:
    """In a controller not opted in while configuring: opts in at the first report of an opted-in xdist worker."""

    def __init__(self, config: pytest.Config) -> None:
        """Watch the reports of the run configured by `config`."""
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Before the other plugins see the report."""
        if getattr(report, REPORT_ATTRIBUTE, False):
            opt_in(self.config)


def check_identity(config: pytest.Config, cluster: ClusterInfo, known: object = None) -> None:
    """Refuse an identity that lacks rights the suites need; with --dra-allow-partial, note them for collection.

    `known` is the backend's own answer where its start asked already (a `RightsCheck`); else the rights are asked
    for here. The refusal names every missing right at once; one that every suite needs is never partial.
    """
    if isinstance(known, RightsCheck):
        rights = known
    else:
        context = config.stash[stash.SUITE_CONFIG].context if cluster.backend == "existing" else None
        rights = check_rights(cluster.kubeconfig, context)
    if not rights.missing:
        return
    if rights.fatal or not config.getoption("--dra-allow-partial"):
        raise rights.refusal()
    config.stash[stash.MISSING_RIGHTS] = rights.missing


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, as not applicable, every check of a suite that needs a right the identity lacks (--dra-allow-partial)."""
    missing = config.stash.get(stash.MISSING_RIGHTS, None)
    if not missing:
        return
    reasons = skip_reasons(missing)
    for item in items:
        reason = reasons.get(suite_of(item.path) or "")
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


def starts_nothing(config: pytest.Config) -> bool:
    """Whether this invocation only lists or explains (collect-only, help, fixtures): then nothing starts."""
    options = config.option
    return bool(
        options.collectonly or options.help or options.version or options.showfixtures or options.show_fixtures_per_test
    )


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Hand each worker the controller's run id, pid (the cluster's owner), opt-in, cluster and missing rights."""
    config = node.config
    node.workerinput["dra_run_id"] = config.stash[stash.RUN_ID]
    node.workerinput["dra_owner_pid"] = config.stash[stash.OWNER_PID]
    node.workerinput["dra_opted_in"] = stash.opted_in(config)
    cluster = config.stash.get(stash.CLUSTER, None)
    node.workerinput["dra_cluster"] = None if cluster is None else cluster.to_json()
    node.workerinput["dra_missing_rights"] = missing_to_json(config.stash.get(stash.MISSING_RIGHTS, {}))


def backend_of(config: pytest.Config) -> ClusterBackend:
    """The run's cluster backend; a local cluster started through it belongs to the run's owner process."""
    suite = config.stash[stash.SUITE_CONFIG]
    return make_backend(suite, owner_pid=None if suite.keep_cluster else config.stash[stash.OWNER_PID])


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Say which cluster and which report directory this run uses."""
    if not stash.opted_in(config):
        return []
    suite = config.stash[stash.SUITE_CONFIG]
    where = f", kubeconfig {suite.kubeconfig}" if suite.kubeconfig else ""
    lines = [f"dra-conformance: run {config.stash[stash.RUN_ID]}, backend {suite.backend}{where}"]
    missing = config.stash.get(stash.MISSING_RIGHTS, None)
    if missing:
        lines.append(
            f"dra-conformance: --dra-allow-partial: the suite's identity lacks {describe_missing(missing)}; "
            "the checks of those suites are skipped as not applicable"
        )
    return lines


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Write the run report (reports/<run-id>/) from every worker's records and print its sections."""
    if stash.is_worker(config) or stash.RUN_DIR not in config.stash or config.getoption("collectonly"):
        return
    allure_dir = getattr(config.option, "allure_report_dir", None)
    sections = write_report(config.stash[stash.RUN_DIR], SUMMARIZERS, Path(allure_dir) if allure_dir else None)
    for section in sections:
        terminalreporter.section(section.title)
        for line in section.lines:
            terminalreporter.line(line)
        for line in section.alerts:
            terminalreporter.line(line, red=True)


def _keeps_cluster(config: pytest.Config) -> bool:
    return bool(config.stash[stash.SUITE_CONFIG].keep_cluster or config.getoption("--dra-keep-cluster-for-next-run"))


def cluster_ends_with_run(config: pytest.Config) -> bool:
    """Whether the cluster stops when this run ends: it holds it alone, and nobody asked to keep it."""
    return not _keeps_cluster(config) and backend_of(config).ends_with(config.stash[stash.OWNER_PID])


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In the controller: stop the cluster if this run started it (workers never stop it).

    From here the run writes its verdict and reports: a SIGTERM now waits for them instead of cutting them off (a
    KeyboardInterrupt raised inside the terminal summary escapes pytest and loses summary.json; the checks are over,
    so finishing the files takes seconds).
    """
    if signal.getsignal(signal.SIGTERM) is _raise_keyboard_interrupt:
        signal.signal(signal.SIGTERM, _after_the_reports)
    config = session.config
    if stash.is_worker(config) or not stash.opted_in(config):
        return
    release_cluster(config)
    if _keeps_cluster(config):
        return
    try:
        backend_of(config).release(config.stash[stash.OWNER_PID])
    except ConformanceError as error:
        config.get_terminal_writer().line(f"dra-conformance: {error}", red=True)
