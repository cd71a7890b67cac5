"""Nightly summaries for the fleet history's tests and its demonstration.

The canary gate's rules, the metrics verdict's evidence and a flake record worded as the plugin writes them
(canary/rules.py, report/flakes.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tests.unit.fleet_summaries import summary


def latency_rule(name: str, dra: float | None, baseline: float | None, slo: float) -> dict[str, Any]:
    """An `allocation p95` / `pod-ready p95` rule: judged against the baseline when one was measured, else the SLO."""
    if baseline is not None:
        limit = round(max(baseline * 1.25, baseline + 0.25), 3)
        threshold = f"<= {limit} s (device-plugin p95 {baseline} s + max(25%, 0.25 s))"
    else:
        limit, threshold = slo, f"<= {slo} s (configured SLO)"
    if dra is None:
        return {"rule": name, "figure": "no data", "threshold": threshold, "result": "no data", "why": "no rehearsal"}
    result = "pass" if dra <= limit else "hold"
    return {
        "rule": name,
        "figure": f"DRA p95 {dra} s (8 canary pods, 0 never Ready)",
        "threshold": threshold,
        "result": result,
        "why": "",
    }


def night(
    *,
    cluster: str,
    finished_at: datetime,
    verdict: str = "certified",
    allocation: float | None = 0.2,
    allocation_baseline: float | None = 0.12,
    ready: float | None = 1.4,
    ready_baseline: float | None = 1.2,
    prepare: float | None = 0.3,
    errors: int | None = 0,
    freshness: float | None = 12.0,
    flaky: int | None = None,
    gate: str = "pass",
    driver: str = "gpu.example.com",
) -> dict[str, Any]:
    """One night's summary.json; a figure given as None is absent from it (no data), as in a run that lacked it."""
    document = summary(verdict=verdict, cluster=cluster, finished_at=finished_at.isoformat(), driver=driver)
    rules = [
        latency_rule("allocation p95", allocation, allocation_baseline, 1.0),
        latency_rule("pod-ready p95", ready, ready_baseline, 5.0),
    ]
    if errors is not None:
        rules.append(
            {
                "rule": "errors against budget",
                "figure": f"status-writer denials {errors}, status update errors 0 (of 198 status writes by "
                f"system:serviceaccount:d:d); allocation timeouts 0",
                "threshold": "<= 0 in total (error budget)",
                "result": "pass" if errors == 0 else "hold",
                "why": "",
            }
        )
    prepare_figure = (
        "no data; suite client-side: no prepare in this run"
        if prepare is None
        else f"kubelet p95 {prepare:.2f} s (n=25 on real-node-0); suite client-side p95 108.6 ms (n=77, fake nodes)"
    )
    rules.append(
        {
            "rule": "kubelet-observed prepare p95",
            "figure": prepare_figure,
            "threshold": "<= 2.0 s (configured SLO)",
            "result": "no data" if prepare is None else "pass",
            "why": "",
        }
    )
    document["canary_gate"] = {
        "state": gate,
        "rules": rules,
        "policy": {
            "tolerance_ratio": 0.25,
            "tolerance_seconds": 0.25,
            "allocation_slo": 1.0,
            "ready_slo": 5.0,
            "prepare_slo": 2.0,
            "error_budget": 0,
        },
    }
    if freshness is not None:
        document["metrics_verdict"] = {
            "decisions": ["keep serving v1beta1 alongside v1 (dual-serve)"],
            "evidence": {"lag_p50": freshness / 2, "lag_p95": freshness, "slo": 60.0},
        }
    if flaky is not None:
        document["flake_record"] = {
            "runs": 3,
            "missing_runs": 0,
            "tests": {},
            "flaky": [f"t.py::flaky_{n}" for n in range(flaky)],
            "failing": [],
            "stable": 200 - flaky,
        }
    else:
        document["flake_record"] = {"state": "one run", "why": "pass rates per test come from `run --repeat N`"}
    return document
