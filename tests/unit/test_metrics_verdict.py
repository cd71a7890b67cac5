"""The verdict follows the operator's decision table; quantities and the audit inventory parse correctly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dra_conformance.metrics import api as metrics_api
from dra_conformance.metrics.api import DECISIONS, Evidence, verdict

HEALTHY = {"v1": "True/Passed", "v1beta1": "True/Passed"}


@pytest.mark.parametrize(
    ("evidence", "expected"),
    [
        (Evidence(available=HEALTHY, lag_p95=10.0, new_sample_seen=True), [DECISIONS[3]]),
        (Evidence(available={"v1": "missing", "v1beta1": "True/Passed"}), [DECISIONS[0], DECISIONS[3]]),
        (Evidence(available={"v1": "False/FailedDiscoveryCheck"}), [DECISIONS[0], DECISIONS[3]]),
        (Evidence(available=HEALTHY, lag_p95=61.0), [DECISIONS[1], DECISIONS[3]]),
        (Evidence(available=HEALTHY, new_sample_seen=False), [DECISIONS[1], DECISIONS[3]]),
        (Evidence(available=HEALTHY, v1beta1_only_consumers=["hpa"]), [DECISIONS[2], DECISIONS[3]]),
        (Evidence(available={"v1": "missing"}, lag_p95=120.0, v1beta1_only_consumers=["hpa"]), list(DECISIONS[:4])),
    ],
    ids=["all-good", "v1-missing", "v1-unavailable", "lag-over-slo", "no-new-sample", "v1beta1-consumers", "all-bad"],
)
def test_verdict_follows_the_decision_table(evidence: Evidence, expected: list[str]) -> None:
    """Without a watch (--metrics-watch) nothing shows 24 h of stable availability: widening is always held."""
    assert verdict(evidence) == expected


@pytest.mark.parametrize("server", ["v1.37.2", "v1.36.0", "v1.37.0-rc.1"])
def test_on_a_control_plane_up_to_1_37_keep_serving_v1beta1_even_with_no_consumer_seen(server: str) -> None:
    evidence = Evidence(available=HEALTHY, lag_p95=10.0, new_sample_seen=True, server_version=server)
    assert verdict(evidence) == [DECISIONS[2], DECISIONS[3]]
    rule = evidence.hpa_needs_v1beta1()
    assert rule is not None and "HPA controller" in rule and server in rule


def test_a_newer_control_plane_leaves_the_decision_to_the_consumers_seen() -> None:
    evidence = Evidence(available=HEALTHY, lag_p95=10.0, new_sample_seen=True, server_version="v1.38.0")
    assert evidence.hpa_needs_v1beta1() is None and verdict(evidence) == [DECISIONS[3]]
    assert "safe to move consumers to v1" not in verdict(evidence)  # not before 24 h of stable availability


def test_quantities_parse_into_millicores_and_bytes() -> None:
    assert metrics_api.parse_cpu("250m") == 250 and metrics_api.parse_cpu("2") == 2000
    assert metrics_api.parse_cpu("1500000n") == 1.5
    assert metrics_api.parse_memory("64Mi") == 64 * 2**20 and metrics_api.parse_memory("1G") == 1e9


def test_inventory_counts_resource_reads_by_consumer_and_skips_the_suite(tmp_path: Path) -> None:
    def event(agent: str, version: str, resource: str | None = "nodes", code: int = 200) -> str:
        reference = {"apiGroup": "metrics.k8s.io", "apiVersion": version} | ({"resource": resource} if resource else {})
        return json.dumps(
            {"user": {"username": "u"}, "userAgent": agent, "objectRef": reference, "responseStatus": {"code": code}}
        )

    log = tmp_path / "audit.log"
    log.write_text(
        "\n".join(
            [
                event("kubectl/v1.37.2 (linux/amd64)", "v1"),
                event("kube-controller-manager/v1.37.2 (linux/amd64)/horizontal-pod-autoscaler", "v1beta1"),
                event(f"{metrics_api.SUITE_USER_AGENT} python", "v1beta1"),
                event("kubectl/v1.37.2", "v1beta1", resource=None),  # discovery, not a metrics read
                event("curl/8", "v1beta1", code=403),  # denied, not consumption
            ]
        )
        + "\n"
    )
    inventory = metrics_api.consumer_inventory(log)
    assert inventory == {"u (kube-controller-manager)": ["v1beta1"], "u (kubectl)": ["v1"]}, inventory
    assert metrics_api.v1beta1_only(inventory) == ["u (kube-controller-manager)"]
