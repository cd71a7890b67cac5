"""Options and fixtures of the rollback rehearsal (suites/rollback).

`--dra-rollback-phase all` (the default) runs every phase in one run, and the suite makes the change and the
rollback itself. A single phase (`--dra-rollback-phase before|after_change|after_rollback`) needs the state file the
user names with `--dra-rollback-state`; between phases the staging team changes the cluster, or lets the suite do it
with `--dra-rollback-drive`.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import allure
import pytest
from kubernetes import client

from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import UsageError
from dra_conformance.kube.namespaces import NamespaceReaper, create_namespace
from dra_conformance.metrics import api as metrics_api
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.plugin.exits import refuse
from dra_conformance.plugin.options import option_or
from dra_conformance.rollback import metrics_rehearsal as metrics_rehearsal_mode
from dra_conformance.rollback.extended_resource import (
    ADVERTISED_DEVICES,
    ExtendedResourceRehearsal,
    RehearsalSetup,
    choose_nodes,
)
from dra_conformance.rollback.metrics_rehearsal import MetricsRehearsal, MetricsRehearsalSetup
from dra_conformance.rollback.report import render_markdown, write_report
from dra_conformance.rollback.state import DEFAULT_REHEARSAL, PHASES, Phase, PhaseRecord, RehearsalState
from dra_conformance.timeouts import Timeouts

ALL_PHASES = "all"
DEFAULT_RESOURCE = "example.com/gpu"
STATE_FILE = "rollback-state.json"


def pytest_addoption(parser: pytest.Parser) -> None:
    """The rehearsal's options."""
    group = parser.getgroup("dra-conformance-rollback")
    group.addoption(
        "--dra-rollback-phase",
        choices=(ALL_PHASES, *(str(p) for p in PHASES)),
        default=None,
        help="rollback rehearsal phase to run (default all, in one run, the suite changing and rolling back)",
    )
    group.addoption(
        "--dra-rollback-state",
        type=Path,
        default=None,
        help="rehearsal state file a later phase compares against (needed with a single --dra-rollback-phase)",
    )
    group.addoption(
        "--dra-rollback-drive",
        action="store_true",
        help="with a single phase: the suite makes the change (after_change) or the rollback (after_rollback)",
    )
    group.addoption(
        "--dra-rollback-resource",
        default=None,
        help=f"extended resource the device plugin serves and DRA takes over (default {DEFAULT_RESOURCE})",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the phase marker; a single phase without a state file is a usage error."""
    config.addinivalue_line("markers", "rollback_phase(name): the rollback rehearsal phase a test runs")
    phase = option_or(config, "--dra-rollback-phase", ALL_PHASES)
    if phase == ALL_PHASES:
        return
    path = config.getoption("--dra-rollback-state")
    if path is None:
        refuse(
            UsageError(f"--dra-rollback-phase {phase} needs --dra-rollback-state FILE (the state earlier phases wrote)")
        )
    try:
        state = RehearsalState.load(path)
        index = PHASES.index(Phase(phase))
        if index > 0:
            state.require_any(Phase(phase), PHASES[index - 1])
    except UsageError as error:
        refuse(error)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With a single phase chosen, deselect the other phases' tests."""
    chosen = option_or(config, "--dra-rollback-phase", ALL_PHASES)
    if chosen == ALL_PHASES:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("rollback_phase")
        (drop if marker is not None and marker.args[0] != chosen else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@dataclass
class Rehearsal:
    """The rehearsal a phase test works on: its state, the engine once set up, and whether the suite drives."""

    state: RehearsalState
    run_dir: Path
    drive: bool
    single_phase: bool
    # The extended resource the device plugin serves and DRA takes over (`--dra-rollback-resource`).
    resource: str = DEFAULT_RESOURCE
    engine: ExtendedResourceRehearsal | None = None
    # The metrics v1 -> v1beta1 rehearsal's engine (suites/rollback/test_metrics_rollback.py), once set up.
    metrics: MetricsRehearsal | None = None

    def record(self, record: PhaseRecord) -> None:
        """Keep a phase's record in the state file and refresh the report."""
        self.state.records[record.phase] = record
        self.state.save()
        summary = write_report(self.state, self.run_dir)
        allure.attach(render_markdown(summary), "rollback report", allure.attachment_type.TEXT)


def _rehearsal_of_run(pytestconfig: pytest.Config, run_dir: Path, name: str) -> Rehearsal:
    """Rehearsal `name` as this run's options ask: one phase against the named state file, or every phase at once.

    A single phase's file was checked when the run was configured; with every phase, the file is the run's own.
    """
    single = option_or(pytestconfig, "--dra-rollback-phase", ALL_PHASES) != ALL_PHASES
    state = RehearsalState.load(pytestconfig.getoption("--dra-rollback-state") or run_dir / STATE_FILE, name)
    drive = not single or pytestconfig.getoption("--dra-rollback-drive")
    resource = option_or(pytestconfig, "--dra-rollback-resource", DEFAULT_RESOURCE)
    return Rehearsal(state, run_dir, drive=drive, single_phase=single, resource=resource)


@pytest.fixture(scope="module")
def rehearsal(
    pytestconfig: pytest.Config,
    run_dir: Path,
    api_client: client.ApiClient,
    timeouts: Timeouts,
    namespace_reaper: NamespaceReaper,
) -> Iterator[Rehearsal]:
    """The rehearsal of this run; with every phase in one run, torn down at the end whatever happened."""
    found = _rehearsal_of_run(pytestconfig, run_dir, DEFAULT_REHEARSAL)
    try:
        yield found
    finally:
        if not found.single_phase and found.engine is not None and Phase.AFTER_ROLLBACK not in found.state.records:
            finish(found, timeouts, namespace_reaper)


def set_up(
    rehearsal: Rehearsal,
    api_client: client.ApiClient,
    driver: DriverUnderTest,
    resource: str,
    run_id: str,
    timeouts: Timeouts,
    cluster: ClusterInfo,
) -> ExtendedResourceRehearsal:
    """Start a rehearsal: choose its nodes (among `cluster`'s), make its namespace, advertise where it must."""
    if rehearsal.state.records and Phase.AFTER_ROLLBACK not in rehearsal.state.records:
        refuse(
            UsageError(
                f"rollback state file {rehearsal.state.path} holds a rehearsal not rolled back yet (phases: "
                f"{', '.join(rehearsal.state.records)}); run after_rollback or name a new file"
            )
        )
    rehearsal.state.records.clear()
    chosen = choose_nodes(api_client, driver.name, resource, (*cluster.nodes, *cluster.real_nodes))
    if isinstance(chosen, str):
        pytest.skip(f"not applicable: the rollback rehearsal {chosen}")
    plugin_node, dra_node, advertise = chosen
    if advertise and not _may_patch_node_status(api_client, plugin_node):
        # rights.py leaves `patch nodes/status` out (a power of the local backend): a least-privilege identity, as
        # the Sonobuoy plugin's, has no device plugin to stand in for, which is no fault of the driver.
        pytest.skip(
            f"not applicable: the rollback rehearsal needs a device plugin advertising {resource}; none does here, "
            f"and standing in for one on fake node {plugin_node} takes patch nodes/status, which this identity "
            f"does not hold (a power of the local backend, not among the suites' rights)"
        )
    namespace = f"dra-rollback-{secrets.token_hex(3)}"
    create_namespace(api_client, namespace, run_id, timeouts.namespace_ready)
    setup = RehearsalSetup(resource, driver.name, namespace, plugin_node, dra_node, advertise)
    engine = ExtendedResourceRehearsal(api_client, setup, timeouts)
    if advertise:
        engine.advertise(plugin_node, ADVERTISED_DEVICES)
    rehearsal.engine = engine
    return engine


def _may_patch_node_status(api_client: client.ApiClient, node: str) -> bool:
    attributes = {"verb": "patch", "resource": "nodes", "subresource": "status", "name": node}
    review = client.AuthorizationV1Api(api_client).create_self_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
    )
    return bool(review.status.allowed)


def resume(rehearsal: Rehearsal, api_client: client.ApiClient, timeouts: Timeouts) -> ExtendedResourceRehearsal:
    """The engine of a rehearsal an earlier phase (maybe an earlier run) set up."""
    if rehearsal.engine is None:
        before = rehearsal.state.require(Phase.AFTER_CHANGE, Phase.BEFORE)
        rehearsal.engine = ExtendedResourceRehearsal(api_client, RehearsalSetup(**before.facts["setup"]), timeouts)
    return rehearsal.engine


def finish(rehearsal: Rehearsal, timeouts: Timeouts, reaper: NamespaceReaper) -> list[str]:
    """Delete the rehearsal's workloads, a class the suite created, and its namespace; what would not go."""
    engine = rehearsal.engine
    if engine is None:
        return []
    changed = rehearsal.state.records.get(Phase.AFTER_CHANGE)
    created = changed.facts.get("created_class") if changed else None
    left = engine.teardown()
    if created:
        engine.delete_class(created)
    reaper.delete(engine.setup.namespace)
    rehearsal.engine = None
    return left


@pytest.fixture(scope="module")
def metrics_rehearsal(
    pytestconfig: pytest.Config,
    run_dir: Path,
    timeouts: Timeouts,
    namespace_reaper: NamespaceReaper,
) -> Iterator[Rehearsal]:
    """The metrics v1 -> v1beta1 rehearsal of this run, its own part of the state file.

    With every phase in one run, a rehearsal that stopped half-way serves v1 again and is torn down at the end.
    """
    found = _rehearsal_of_run(pytestconfig, run_dir, metrics_rehearsal_mode.REHEARSAL)
    try:
        yield found
    finally:
        if not found.single_phase and found.metrics is not None and Phase.AFTER_ROLLBACK not in found.state.records:
            finish_metrics(found, namespace_reaper, restore=True)


def set_up_metrics(
    rehearsal: Rehearsal,
    api_client: client.ApiClient,
    metrics_client: client.ApiClient,
    run_id: str,
    timeouts: Timeouts,
    slo: float,
    scope: metrics_api.SampleScope,
) -> MetricsRehearsal:
    """Start the metrics rehearsal: a namespace of its own for the consumer target."""
    records = rehearsal.state.records
    if records and Phase.AFTER_ROLLBACK not in records:
        refuse(
            UsageError(
                f"rollback state file {rehearsal.state.path} holds a metrics rehearsal not rolled back yet (phases: "
                f"{', '.join(records)}); run after_rollback or name a new file"
            )
        )
    records.clear()
    reason = metrics_rehearsal_mode.not_applicable(metrics_client)
    if reason is not None:
        pytest.skip(f"not applicable: {reason}")
    namespace = f"dra-rollback-metrics-{secrets.token_hex(3)}"
    create_namespace(api_client, namespace, run_id, timeouts.namespace_ready)
    rehearsal.metrics = MetricsRehearsal(
        api_client, metrics_client, MetricsRehearsalSetup(namespace), timeouts, slo, scope
    )
    return rehearsal.metrics


def resume_metrics(
    rehearsal: Rehearsal,
    api_client: client.ApiClient,
    metrics_client: client.ApiClient,
    timeouts: Timeouts,
    slo: float,
    scope: metrics_api.SampleScope,
) -> MetricsRehearsal:
    """The metrics rehearsal an earlier phase (maybe an earlier run) set up."""
    if rehearsal.metrics is None:
        before = rehearsal.state.require(Phase.AFTER_CHANGE, Phase.BEFORE)
        setup = MetricsRehearsalSetup(**before.facts["setup"])
        rehearsal.metrics = MetricsRehearsal(api_client, metrics_client, setup, timeouts, slo, scope)
    return rehearsal.metrics


def finish_metrics(rehearsal: Rehearsal, reaper: NamespaceReaper, *, restore: bool) -> list[str]:
    """Delete the consumer target's namespace; with `restore`, serve v1 again if the rehearsal left it removed."""
    engine = rehearsal.metrics
    if engine is None:
        return []
    left = []
    before = rehearsal.state.records.get(Phase.BEFORE)
    if restore and before is not None and engine.restore_if_removed(before):
        left.append("metrics.k8s.io/v1 was left removed; served again by the suite's teardown")
    reaper.delete(engine.setup.namespace)
    rehearsal.metrics = None
    return left
