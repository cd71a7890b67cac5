"""Run-wide hooks: the run id and report locations, the cluster preflight, the cluster's end, the run report.

One cluster per run, shared by all xdist workers: the controller (or the only process) owns it. When the command
line names the cluster (`--cluster`, as `dra-conformance run` always does), the controller starts or attaches to
it and runs the preflight before any worker starts; otherwise the first test that needs it starts it, under a
file lock. The supervisor stops a local cluster when its owner exits, and the controller stops it at session end
unless `--keep-cluster` is given.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from dra_conformance.backends.base import ClusterBackend
from dra_conformance.backends.registry import make_backend
from dra_conformance.errors import ConformanceError
from dra_conformance.kube.preflight import check_cluster
from dra_conformance.kubelet.latency import RECORD_KIND as LATENCY_RECORDS
from dra_conformance.kubelet.latency import summarize_latencies
from dra_conformance.metrics.verdict import RECORD_KIND as VERDICT_RECORDS
from dra_conformance.metrics.verdict import summarize_verdict
from dra_conformance.plugin import stash
from dra_conformance.plugin.options import cluster_named, suite_config_from
from dra_conformance.rbac.matrix import RECORD_KIND as MATRIX_RECORDS
from dra_conformance.rbac.matrix import summarize_cells
from dra_conformance.report.writer import Summarizer, write_report

# Preflight failed: the cluster cannot run the suites (the same code as an interrupted run).
EXIT_CLUSTER_UNUSABLE = 2
# Record kind -> summarizer, in the order the sections are printed at the end of the run.
SUMMARIZERS: dict[str, Summarizer] = {
    LATENCY_RECORDS: summarize_latencies,
    MATRIX_RECORDS: summarize_cells,
    VERDICT_RECORDS: summarize_verdict,
}


def _new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _raise_keyboard_interrupt(_signum: int, _frame: object) -> None:
    # pytest turns KeyboardInterrupt into an orderly session end, which stops the cluster this run started.
    raise KeyboardInterrupt


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Validate options, fix the run id, and point JUnit and Allure output at reports/<run-id>/."""
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None:
        run_id, owner_pid = workerinput["dra_run_id"], workerinput["dra_owner_pid"]
    else:
        run_id, owner_pid = _new_run_id(), os.getpid()
    config.stash[stash.RUN_ID] = run_id
    config.stash[stash.OWNER_PID] = owner_pid
    config.stash[stash.SUITE_CONFIG] = suite_config_from(config)
    reports = config.getoption("--reports-dir") or Path(str(config.rootpath)) / "reports"
    run_dir = reports / run_id
    config.stash[stash.RUN_DIR] = run_dir
    if config.getoption("collectonly"):
        return  # listing tests writes no reports and starts nothing
    if workerinput is None:
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        run_dir.mkdir(parents=True, exist_ok=True)
        if not config.option.xmlpath:
            config.option.xmlpath = str(run_dir / "junit.xml")
    if hasattr(config.option, "allure_report_dir") and not config.option.allure_report_dir:
        config.option.allure_report_dir = str(run_dir / "allure-results")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Hand the controller's run id and pid to each xdist worker (the pid owns the cluster)."""
    node.workerinput["dra_run_id"] = node.config.stash[stash.RUN_ID]
    node.workerinput["dra_owner_pid"] = node.config.stash[stash.OWNER_PID]


def backend_of(config: pytest.Config) -> ClusterBackend:
    """The run's cluster backend; a local cluster started through it belongs to the run's owner process."""
    suite = config.stash[stash.SUITE_CONFIG]
    return make_backend(suite, owner_pid=None if suite.keep_cluster else config.stash[stash.OWNER_PID])


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Preflight, in the controller only, when the cluster is named: an unusable cluster ends the run in one line."""
    config = session.config
    if stash.is_worker(config) or config.getoption("collectonly") or not cluster_named(config):
        return
    suite = config.stash[stash.SUITE_CONFIG]
    try:
        info = backend_of(config).start()
        check_cluster(info.kubeconfig, suite.context if info.backend == "existing" else None)
    except ConformanceError as error:
        pytest.exit(f"dra-conformance: {error}", returncode=EXIT_CLUSTER_UNUSABLE)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Say which cluster and which report directory this run uses."""
    if stash.SUITE_CONFIG not in config.stash:
        return []
    suite = config.stash[stash.SUITE_CONFIG]
    where = f", kubeconfig {suite.kubeconfig}" if suite.kubeconfig else ""
    return [f"dra-conformance: run {config.stash[stash.RUN_ID]}, backend {suite.backend}{where}"]


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


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In the controller: stop the cluster if this run started it (workers never stop it)."""
    config = session.config
    if stash.is_worker(config) or stash.SUITE_CONFIG not in config.stash:
        return
    if config.stash[stash.SUITE_CONFIG].keep_cluster:
        return
    try:
        backend_of(config).release(config.stash[stash.OWNER_PID])
    except ConformanceError as error:
        config.get_terminal_writer().line(f"dra-conformance: {error}", red=True)
