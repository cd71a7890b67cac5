"""Client-side latencies of kubelet-plugin calls: recorded per call, summarized once per run."""

from __future__ import annotations

from typing import Any

from dra_conformance.kubelet.client import CallResult
from dra_conformance.model.records import RunRecords, Section
from dra_conformance.model.stats import percentile

RECORD_KIND = "latency"


class LatencyLog:
    """Records the latency of each call in the run's records."""

    def __init__(self, records: RunRecords) -> None:
        """Append to `records`."""
        self.records = records

    def record(self, method: str, result: CallResult) -> CallResult:
        """Remember one call's latency and hand the result back."""
        self.records.add(RECORD_KIND, {"method": method, "latency": result.latency})
        return result


def latency_figures(entries: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """count, p50, p95 and max per method."""
    samples: dict[str, list[float]] = {}
    for entry in entries:
        samples.setdefault(entry["method"], []).append(entry["latency"])
    figures = {}
    for method, values in sorted(samples.items()):
        p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
        figures[method] = {"count": len(values), "p50": p50, "p95": p95, "max": max(values)}
    return figures


def summarize_latencies(entries: list[dict[str, Any]]) -> Section | None:
    """The run's kubelet-plugin call latencies (p50, p95), for the terminal, a JSON file and Allure."""
    figures = latency_figures(entries)
    if not figures:
        return None
    return Section(
        title="kubelet-plugin call latency (client side)",
        lines=[
            f"{method}: n={f['count']:.0f} p50={f['p50'] * 1000:.1f} ms p95={f['p95'] * 1000:.1f} ms "
            f"max={f['max'] * 1000:.1f} ms"
            for method, f in figures.items()
        ],
        artifact="protocol-latency.json",
        document=figures,
        environment={
            f"latency.{method}.p{q}": f"{f[f'p{q}'] * 1000:.1f}ms" for method, f in figures.items() for q in (50, 95)
        },
    )
