"""The kubelet's own record of DRA calls, read from its /metrics through the API server's node proxy.

The kubelet measures every gRPC call it makes to a DRA driver in `dra_grpc_operations_duration_seconds`
(labels driver_name, method_name, grpc_status_code; buckets from 0.1 s to 40 s, exponential, 15 of them) and counts
claims in use per driver in `dra_resource_claims_in_use` (k8s.io/kubernetes pkg/kubelet/metrics/metrics.go, 1.37).
The figures are cumulative since the kubelet started, so a run's figures are the difference of two readings, one
at its start and one at its end; a check that slows or fails calls on purpose (the kubelet-side interposer) takes
its own two readings, and its difference is taken out, so the run's figures are the driver's own.

A percentile of a histogram is estimated as Prometheus' histogram_quantile does: linear within the bucket the rank
falls in. With 0.1 s as the lowest bucket, a p95 under 0.1 s reads as "within 0.1 s", never as a precise figure.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

GRPC_DURATION = "dra_grpc_operations_duration_seconds"
CLAIMS_IN_USE = "dra_resource_claims_in_use"
PREPARE = "NodePrepareResources"
UNPREPARE = "NodeUnprepareResources"
OK = "OK"
# One read of a kubelet's /metrics through the API server: the kubelet answers at once; ten seconds bound a hung one.
READ_TIMEOUT = 10.0


@dataclass
class CallHistogram:
    """One driver's calls of one method: cumulative bucket counts by upper bound, and counts by gRPC status code."""

    buckets: dict[float, float] = field(default_factory=dict)
    codes: dict[str, float] = field(default_factory=dict)

    @property
    def count(self) -> int:
        """Calls in all."""
        return round(sum(self.codes.values()))

    def minus(self, earlier: CallHistogram) -> CallHistogram:
        """The calls made after `earlier` was read (counts only grow while the kubelet runs)."""
        return CallHistogram(
            {bound: count - earlier.buckets.get(bound, 0.0) for bound, count in self.buckets.items()},
            {code: count - earlier.codes.get(code, 0.0) for code, count in self.codes.items()},
        )

    def quantile(self, q: float) -> float | None:
        """The `q` quantile (0..1) as histogram_quantile estimates it; None without calls."""
        bounds = sorted(self.buckets)
        total = self.buckets.get(math.inf, 0.0)
        if not bounds or total <= 0:
            return None
        rank = q * total
        lower, below = 0.0, 0.0
        for bound in bounds:
            count = self.buckets[bound]
            if count >= rank:
                if math.isinf(bound):
                    return lower  # beyond the highest finite bucket: its bound is all that is known
                inside = count - below
                return lower + (bound - lower) * ((rank - below) / inside if inside > 0 else 1.0)
            lower, below = bound, count
        return lower

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (bounds as strings: +Inf is not a JSON number)."""
        return {"buckets": {repr(b): c for b, c in self.buckets.items()}, "codes": dict(self.codes)}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> CallHistogram:
        """The inverse of `to_json`."""
        return cls(
            {float(b): float(c) for b, c in raw["buckets"].items()}, {k: float(v) for k, v in raw["codes"].items()}
        )


@dataclass
class KubeletDraCalls:
    """A kubelet's DRA calls by (driver, method), and claims in use by driver."""

    calls: dict[tuple[str, str], CallHistogram] = field(default_factory=dict)
    claims_in_use: dict[str, float] = field(default_factory=dict)

    def minus(self, earlier: KubeletDraCalls) -> KubeletDraCalls:
        """The calls since `earlier`; claims in use stay as now (a gauge)."""
        empty = CallHistogram()
        calls = {key: hist.minus(earlier.calls.get(key, empty)) for key, hist in self.calls.items()}
        return KubeletDraCalls(calls, dict(self.claims_in_use))

    def plus(self, other: KubeletDraCalls) -> KubeletDraCalls:
        """Both readings' calls together (for summing several nodes or several excluded windows)."""
        merged: dict[tuple[str, str], CallHistogram] = {}
        for key in {*self.calls, *other.calls}:
            a, b = self.calls.get(key, CallHistogram()), other.calls.get(key, CallHistogram())
            merged[key] = CallHistogram(
                {bound: a.buckets.get(bound, 0.0) + b.buckets.get(bound, 0.0) for bound in {*a.buckets, *b.buckets}},
                {code: a.codes.get(code, 0.0) + b.codes.get(code, 0.0) for code in {*a.codes, *b.codes}},
            )
        in_use = {
            d: self.claims_in_use.get(d, 0.0) + other.claims_in_use.get(d, 0.0)
            for d in {*self.claims_in_use, *other.claims_in_use}
        }
        return KubeletDraCalls(merged, in_use)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for run records."""
        return {
            "calls": [{"driver": d, "method": m, **h.to_json()} for (d, m), h in sorted(self.calls.items())],
            "claims_in_use": dict(self.claims_in_use),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> KubeletDraCalls:
        """The inverse of `to_json`."""
        calls = {(c["driver"], c["method"]): CallHistogram.from_json(c) for c in raw["calls"]}
        return cls(calls, {k: float(v) for k, v in raw["claims_in_use"].items()})


def parse(text: str) -> KubeletDraCalls:
    """The DRA figures of one kubelet's /metrics text (every other metric is ignored)."""
    buckets: dict[tuple[str, str], dict[float, float]] = defaultdict(lambda: defaultdict(float))
    codes: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    in_use: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == GRPC_DURATION:
            for sample in family.samples:
                # The kubelet labels the full gRPC path (/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/<Method>).
                method = sample.labels.get("method_name", "").rsplit("/", 1)[-1]
                key = (sample.labels.get("driver_name", ""), method)
                if sample.name.endswith("_bucket"):
                    buckets[key][float(sample.labels["le"])] += sample.value
                elif sample.name.endswith("_count"):
                    codes[key][sample.labels.get("grpc_status_code", "")] += sample.value
        elif family.name == CLAIMS_IN_USE:
            for sample in family.samples:
                in_use[sample.labels.get("driver_name", "")] = sample.value
    calls = {key: CallHistogram(dict(buckets[key]), dict(codes.get(key, {}))) for key in buckets}
    return KubeletDraCalls(calls, in_use)


def read(api_client: client.ApiClient, node: str) -> tuple[KubeletDraCalls | None, str]:
    """The node's kubelet DRA figures through `nodes/proxy`, or None and why they cannot be read."""
    try:
        text = client.CoreV1Api(api_client).connect_get_node_proxy_with_path(
            node, "metrics", _request_timeout=READ_TIMEOUT
        )
    except ApiException as error:
        if error.status == 403:
            return None, f"no right to get nodes/proxy (the kubelet's /metrics of {node}): {error.reason}"
        return None, f"the kubelet's /metrics of {node} through the API server: HTTP {error.status} {error.reason}"
    except OSError as error:
        return None, f"the kubelet's /metrics of {node} through the API server: {error}"
    return parse(str(text)), ""


@dataclass(frozen=True)
class MethodFigures:
    """One method's figures for one driver, as the kubelet measured them."""

    count: int
    p50: float | None
    p95: float | None
    # Calls by gRPC status code.
    codes: dict[str, int]

    @property
    def errors(self) -> int:
        """Calls that did not end OK."""
        return sum(n for code, n in self.codes.items() if code != OK)


def figures(calls: KubeletDraCalls, driver: str) -> dict[str, MethodFigures]:
    """Prepare and unprepare figures of `driver` (methods it was never called for are left out)."""
    found = {}
    for (name, method), hist in sorted(calls.calls.items()):
        if name != driver or hist.count <= 0:
            continue
        codes = {code: round(n) for code, n in sorted(hist.codes.items()) if round(n) > 0}
        found[method] = MethodFigures(hist.count, hist.quantile(0.5), hist.quantile(0.95), codes)
    return found


def describe_seconds(value: float | None, lowest_bucket: float = 0.1) -> str:
    """A kubelet figure in words: within the lowest bucket is all a histogram says of a fast call."""
    if value is None:
        return "no calls"
    return f"<= {lowest_bucket:g} s" if value <= lowest_bucket else f"{value:.2f} s"


# Run records of windows whose kubelet-observed calls are not the driver's own doing (see `KubeletWindow`).
EXCLUDED_RECORDS = "kubelet-excluded"


@dataclass(frozen=True)
class KubeletRun:
    """A run's kubelet-observed DRA calls on the real nodes, less the windows of checks that faulted calls."""

    nodes: tuple[str, ...]
    calls: KubeletDraCalls
    # "check on node" for each window taken out.
    excluded: tuple[str, ...] = ()


class KubeletWindow:
    """Two readings of some nodes' kubelets, at the start and at the end of a window (a run, or one check)."""

    def __init__(self, api_client: client.ApiClient, nodes: tuple[str, ...]) -> None:
        """Read the kubelets of `nodes` through `api_client`."""
        self.api_client, self.nodes = api_client, nodes
        self.started: dict[str, KubeletDraCalls] = {}
        self.ended: dict[str, KubeletDraCalls] = {}
        self.missing = "" if nodes else "no node of the cluster is served by a real kubelet (kwok nodes run none)"

    def _read_all(self) -> dict[str, KubeletDraCalls]:
        readings = {}
        for node in self.nodes:
            reading, why = read(self.api_client, node)
            if reading is None:
                self.missing = self.missing or why
                return {}
            readings[node] = reading
        return readings

    def start(self) -> KubeletWindow:
        """The first reading."""
        if not self.missing:
            self.started = self._read_all()
        return self

    def finish(self) -> None:
        """The second reading."""
        if not self.missing:
            self.ended = self._read_all()

    def calls(self) -> KubeletDraCalls | None:
        """The calls between the two readings, summed over the nodes; None where a reading is missing."""
        if self.missing or not self.ended:
            return None
        total = KubeletDraCalls()
        for node, end in self.ended.items():
            total = total.plus(end.minus(self.started.get(node, KubeletDraCalls())))
        return total

    def record(self, check: str) -> dict[str, Any] | None:
        """The window as a run record that takes it out of the run's figures (None where it could not be read)."""
        calls = self.calls()
        if calls is None:
            return None
        return {"check": check, "nodes": list(self.nodes), "calls": calls.to_json()}

    def run(self, excluded: list[dict[str, Any]]) -> tuple[KubeletRun | None, str]:
        """The run's figures less the `excluded` windows' records, or None and why they are missing."""
        calls = self.calls()
        if calls is None:
            return None, self.missing or "the kubelets were not read at the end of the run"
        taken: list[str] = []
        for entry in excluded:
            window = KubeletDraCalls.from_json(entry["calls"])
            calls = calls.minus(KubeletDraCalls(window.calls, {}))
            taken.append(f"{entry['check']} on {', '.join(entry['nodes'])}")
        return KubeletRun(self.nodes, calls, tuple(taken)), ""
