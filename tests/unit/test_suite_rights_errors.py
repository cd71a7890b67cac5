"""Limits of the suite (a refused request of its own identity, a broken relay) are its errors, never findings."""

from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException

from dra_conformance.errors import HarnessFault, RelayUnavailable, ReportsFull, SuiteForbidden
from dra_conformance.metrics import samples as metrics_sampling
from dra_conformance.model.obligations import Basis, ObligationFailed, Registry
from dra_conformance.plugin.certification_hooks import (
    BASIS_PROPERTY,
    OBLIGATION_PROPERTY,
    SUITE_RIGHTS,
    obligation_properties,
    reports_full_error,
)
from dra_conformance.report.certification import outcome_of
from dra_conformance.verdict import Outcome

REFUSED = {"message": 'nodes.metrics.k8s.io "n" is forbidden: User "system:serviceaccount:s:d" cannot get resource'}


def test_a_refused_metrics_read_is_the_suites_own_and_names_the_rules_to_grant() -> None:
    with pytest.raises(SuiteForbidden, match=r"GET metrics.k8s.io/v1/nodes/n: .*forbidden.*ci-clusterrole.yaml"):
        metrics_sampling._raise_unless_ok(403, REFUSED, "metrics.k8s.io/v1/nodes/n")
    with pytest.raises(ApiException):
        metrics_sampling._raise_unless_ok(503, {"message": "service unavailable"}, "metrics.k8s.io/v1/nodes/n")


def test_a_refused_request_errors_the_check_on_the_harness_obligation_of_the_suites_rights() -> None:
    obligation = Registry.load()[SUITE_RIGHTS]
    assert obligation.basis == Basis.HARNESS, obligation
    properties = dict(obligation_properties(SuiteForbidden("GET x: forbidden")))
    assert (properties[OBLIGATION_PROPERTY], properties[BASIS_PROPERTY]) == (SUITE_RIGHTS, "harness"), properties
    found = outcome_of("call", False, False, "GET x: forbidden", properties[BASIS_PROPERTY])
    assert found is not None and found[0] == Outcome.ERROR, found


def test_an_obligation_failure_keeps_its_own_obligation() -> None:
    obligation = Registry.load()["metrics.served-version-serves-node-metrics"]
    properties = dict(obligation_properties(ObligationFailed(obligation, "broke")))
    assert properties[OBLIGATION_PROPERTY] == obligation.id and properties[BASIS_PROPERTY] == "contract", properties
    assert obligation_properties(ValueError("other")) == [], "the report hook names run.harness-error for these"


@pytest.mark.parametrize(
    "fault", [SuiteForbidden, RelayUnavailable, ReportsFull], ids=["suite-rights", "node-agent-relay", "reports-full"]
)
def test_every_limit_of_the_suite_errors_the_check_on_a_harness_obligation_of_the_registry(
    fault: type[HarnessFault],
) -> None:
    obligation = Registry.load()[fault.obligation]
    assert obligation.basis == Basis.HARNESS, obligation
    properties = dict(obligation_properties(fault("what broke")))
    assert (properties[OBLIGATION_PROPERTY], properties[BASIS_PROPERTY]) == (fault.obligation, "harness"), properties


def test_errors_of_several_finalizers_name_the_harness_obligation_one_of_them_broke() -> None:
    """A test's finalizers that fail together come as one group; a full reports disk breaks each of them at once."""
    group = ExceptionGroup("errors while tearing down", [ValueError("other"), ReportsFull("reports dir full: ...")])
    properties = dict(obligation_properties(group))
    assert (properties[OBLIGATION_PROPERTY], properties[BASIS_PROPERTY]) == (ReportsFull.obligation, "harness"), (
        properties
    )
    assert obligation_properties(ExceptionGroup("teardown", [ValueError("a"), KeyError("b")])) == []


def test_a_full_reports_dir_is_recognized_alone_or_as_a_teardowns_whole_group() -> None:
    full = ReportsFull("reports dir full: cannot record latency in /r/records/latency/gw0.jsonl (No space left)")
    other = RuntimeError("a finalizer's own bug")
    assert reports_full_error(full) is full
    assert reports_full_error(BaseExceptionGroup("teardown", [full, ReportsFull("again")])) is full
    assert reports_full_error(BaseExceptionGroup("teardown", [full, other])) is None, (
        "another error must keep its trace"
    )
    assert reports_full_error(other) is None and reports_full_error(None) is None
