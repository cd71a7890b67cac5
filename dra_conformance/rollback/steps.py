"""The steps a rollback rehearsal's phase tests take, and the `Rehearsal` they work on.

A phase test (suites/rollback) sets its rehearsal up, resumes one an earlier phase (maybe an earlier run) set up,
or finishes it; the plugin's fixtures (`rehearsal`, `metrics_rehearsal`) hand it the `Rehearsal` of this run, as
its options ask, and finish what a run of every phase left half-way.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import allure
import pytest
from kubernetes import client

from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import UsageError
from dra_conformance.exits import refuse
from dra_conformance.kube.namespaces import NamespaceReaper, create_namespace
from dra_conformance.metrics import samples as metrics_sampling
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.rollback import metrics_rehearsal as metrics_rehearsal_mode
from dra_conformance.rollback.extended_resource import (
    ADVERTISED_DEVICES,
    ExtendedResourceRehearsal,
    RehearsalSetup,
    choose_nodes,
)
from dra_conformance.rollback.metrics_rehearsal import MetricsRehearsal, MetricsRehearsalSetup
from dra_conformance.rollback.report import render_markdown, write_report
from dra_conformance.rollback.state import Phase, PhaseRecord, RehearsalState
from dra_conformance.timeouts import Timeouts

DEFAULT_RESOURCE = "example.com/gpu"


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


def set_up_metrics(
    rehearsal: Rehearsal,
    api_client: client.ApiClient,
    metrics_client: client.ApiClient,
    run_id: str,
    timeouts: Timeouts,
    slo: float,
    scope: metrics_sampling.SampleScope,
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
    scope: metrics_sampling.SampleScope,
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
