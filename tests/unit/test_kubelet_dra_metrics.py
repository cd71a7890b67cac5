"""The kubelet's DRA call metrics: parsing, a window's difference, percentiles, and the canary gate's kubelet rules."""

from __future__ import annotations

import re

import pytest

from dra_conformance.canary.inputs import Inputs
from dra_conformance.canary.rules import Policy, evaluate
from dra_conformance.kubelet.dra_metrics import (
    PREPARE,
    UNPREPARE,
    KubeletDraCalls,
    KubeletRun,
    describe_seconds,
    figures,
    parse,
)

DRIVER = "gpu.example.com"
BOUNDS = ("0.1", "0.153", "0.235", "0.36", "0.553", "0.848", "1.3", "1.995", "3.06", "+Inf")


# How the kubelet labels a call: the full gRPC path of the method.
GRPC_SERVICE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"


def _histogram(method: str, code: str, cumulative: tuple[int, ...], driver: str = DRIVER) -> str:
    labels = f'driver_name="{driver}",grpc_status_code="{code}",method_name="{GRPC_SERVICE}{method}"'
    lines = [
        f'dra_grpc_operations_duration_seconds_bucket{{{labels},le="{bound}"}} {count}'
        for bound, count in zip(BOUNDS, cumulative, strict=True)
    ]
    lines.append(f"dra_grpc_operations_duration_seconds_count{{{labels}}} {cumulative[-1]}")
    lines.append(f"dra_grpc_operations_duration_seconds_sum{{{labels}}} 1.5")
    return "\n".join(lines)


def _exposition(*histograms: str, in_use: int = 2) -> str:
    return "\n".join(
        [
            "# HELP dra_grpc_operations_duration_seconds [ALPHA] Duration in seconds of the DRA gRPC operations",
            "# TYPE dra_grpc_operations_duration_seconds histogram",
            *histograms,
            "# HELP dra_resource_claims_in_use [ALPHA] The number of ResourceClaims that are currently in use",
            "# TYPE dra_resource_claims_in_use gauge",
            f'dra_resource_claims_in_use{{driver_name="{DRIVER}"}} {in_use}',
            "# HELP kubelet_running_pods [ALPHA] Number of pods",
            "# TYPE kubelet_running_pods gauge",
            "kubelet_running_pods 3",
            "",
        ]
    )


START = parse(_exposition(_histogram(PREPARE, "OK", (2, 2, 2, 2, 2, 2, 2, 2, 2, 2))))
END = parse(
    _exposition(
        _histogram(PREPARE, "OK", (10, 12, 12, 12, 12, 12, 12, 21, 22, 22)),
        _histogram(PREPARE, "Unavailable", (1, 1, 1, 1, 1, 1, 1, 1, 1, 1)),
        _histogram(UNPREPARE, "OK", (5, 5, 5, 5, 5, 5, 5, 5, 5, 5)),
        in_use=1,
    )
)


def test_the_run_counts_only_calls_made_after_the_first_reading() -> None:
    run = END.minus(START)
    found = figures(run, DRIVER)
    assert found[PREPARE].count == 21, found  # 20 more OK, 1 Unavailable
    assert found[PREPARE].codes == {"OK": 20, "Unavailable": 1}, found
    assert found[PREPARE].errors == 1, found
    assert found[UNPREPARE].count == 5, found
    assert run.claims_in_use == {DRIVER: 1.0}, "claims in use is a gauge: the end's value"


def test_percentiles_interpolate_within_the_bucket_as_histogram_quantile_does() -> None:
    found = figures(END.minus(START), DRIVER)[PREPARE]
    # 21 calls: 9 within 0.1 s, 2 more within 0.153 s, 9 between 1.3 and 1.995 s, 1 between 1.995 and 3.06 s.
    assert found.p50 == pytest.approx(0.1 + 0.053 * (10.5 - 9) / 2), found  # rank 10.5 of 21 in the 0.153 s bucket
    assert found.p95 == pytest.approx(1.3 + 0.695 * (19.95 - 11) / 9), found  # rank 19.95 in the 1.995 s bucket


def test_a_fast_call_reads_as_within_the_lowest_bucket() -> None:
    assert describe_seconds(0.04) == "<= 0.1 s"
    assert describe_seconds(1.5) == "1.50 s"
    assert describe_seconds(None) == "no calls"


def test_another_drivers_calls_are_not_the_driver_under_tests() -> None:
    other = parse(_exposition(_histogram(PREPARE, "OK", (3, 3, 3, 3, 3, 3, 3, 3, 3, 3), driver="other.example.com")))
    assert figures(other, DRIVER) == {}
    assert figures(other, "other.example.com")[PREPARE].count == 3


def test_records_round_trip_and_a_faulted_window_is_taken_out() -> None:
    run = END.minus(START)
    window = parse(_exposition(_histogram(PREPARE, "Unavailable", (1, 1, 1, 1, 1, 1, 1, 1, 1, 1))))
    assert KubeletDraCalls.from_json(run.to_json()) == run
    left = run.minus(KubeletDraCalls(window.calls, {}))
    assert figures(left, DRIVER)[PREPARE].codes == {"OK": 20}, figures(left, DRIVER)


def _gate(run: KubeletRun | None, missing: str = "") -> dict[str, dict[str, str]]:
    inputs = Inputs(
        "system:serviceaccount:ns:driver",
        driver=DRIVER,
        kubelet=run,
        kubelet_missing=missing,
        client_latency={PREPARE: {"count": 40, "p50": 0.004, "p95": 0.0096, "max": 0.02}},
    )
    rules = evaluate(inputs, Policy())["rules"]
    return {rule["rule"]: rule for rule in rules}


def test_the_gate_prints_the_kubelets_prepare_p95_beside_the_suites_and_holds_on_errors() -> None:
    rules = _gate(KubeletRun(("node-a",), END.minus(START)))
    prepare, errors = rules["kubelet-observed prepare p95"], rules["kubelet gRPC errors"]
    assert "kubelet p95 1." in prepare["figure"] and "suite client-side p95 9.6 ms" in prepare["figure"], prepare
    assert prepare["result"] == "pass", prepare
    assert errors["result"] == "hold" and "1 not OK of 26 calls" in errors["figure"], errors
    assert re.search(r"NodePrepareResources: \d+ OK, 1 \w+", errors["figure"]), f"codes as a phrase: {errors}"


def test_without_a_real_node_the_kubelet_rules_have_no_data_and_say_why() -> None:
    why = "no node of the cluster is served by a real kubelet (kwok nodes run none)"
    rules = _gate(None, why)
    for name in ("kubelet-observed prepare p95", "kubelet gRPC errors"):
        assert rules[name]["result"] == "no data" and rules[name]["why"] == why, rules[name]
