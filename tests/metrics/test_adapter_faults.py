"""Each fault of the reference metrics adapter makes the matching check fail or the matching verdict appear.

The last check makes v1 unavailable on a cluster of its own (the adapter frozen with SIGSTOP, as measured, or not
serving v1) and runs the metrics checks against it: they end in minutes with the verdict "fix first: v1
unavailable since <T>" (the run's watch), not after a first-sample wait per check.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client

from dra_conformance import paths
from dra_conformance.backends.registry import make_backend
from dra_conformance.config import SuiteConfig
from dra_conformance.kube.client import client_from_kubeconfig
from dra_conformance.metrics import availability as version_availability
from dra_conformance.metrics import decisions as metrics_decisions
from dra_conformance.metrics import evidence as metrics_evidence
from dra_conformance.metrics import reads as metrics_reads
from dra_conformance.metrics import sample_gate
from dra_conformance.metrics import samples as metrics_sampling
from dra_conformance.metrics.adapter import MetricsAdapter, wait_available
from dra_conformance.metrics.sample_gate import AVAILABILITY_CHECK
from dra_conformance.timeouts import Timeouts

pytestmark = pytest.mark.xdist_group("metrics")
# An injected staleness well past the default 60 s SLO.
STALE_SECONDS = 300
DEADLINES = Timeouts()
# `-k metrics` against an unavailable v1. Against a frozen adapter the unfixed suite ran 598 s before it was
# killed: six first-sample waits of 90 s, and a namespace whose deletion never finished. Now it waits, each once:
# the availability read for a version that turned unavailable less than its deadline ago (60 s), and the namespace
# reaper's delete deadline (60 s); the 17 checks, the rehearsal's pod and the HTML report take about a minute on 2
# busy cores: 180 s leaves that room threefold for a loaded machine, and the bound (300 s) stays below the unfixed
# run's first four waits.
# The inner run gets shorter availability and delete deadlines than the defaults (what it waits for is the same,
# each once), so the check costs CI half the time; the first-sample deadline it must not wait for stays the default.
INNER_DEADLINES = {"metrics-available": 20.0, "delete": 20.0}
UNAVAILABLE_RUN_BOUND = sum(INNER_DEADLINES.values()) + 180.0
# Past the bound the inner run is still let finish, so the failure can show where its time went.
UNAVAILABLE_RUN_TIMEOUT = 3 * UNAVAILABLE_RUN_BOUND


def _evidence(api: client.ApiClient, scope: metrics_sampling.SampleScope) -> metrics_evidence.Evidence:
    """The verdict's evidence as the suite builds it: one availability read, samples of a usable version only."""
    availability = version_availability.read_availability(api, 0.0)
    return metrics_evidence.point_in_time_evidence(api, availability, metrics_evidence.FRESHNESS_SLO, scope)


def test_stale_samples_break_the_slo_and_hold_autoscaling(
    metrics_adapter: MetricsAdapter,
    metrics_client: client.ApiClient,
    metrics_scope: metrics_sampling.SampleScope,
    timeouts: Timeouts,
) -> None:
    metrics_adapter.set({"staleSeconds": STALE_SECONDS})
    availability = version_availability.read_availability(metrics_client, timeouts.metrics_available)
    # Old samples are samples: nothing blocks the checks that read them, their age is what they judge.
    gate = sample_gate.SampleGate(metrics_client, availability, metrics_scope, timeouts.metrics_first_sample)
    assert gate.blocked(list(metrics_reads.VERSIONS)) is None, availability
    evidence = _evidence(metrics_client, metrics_scope)
    assert evidence.lag_p95 is not None and evidence.lag_p95 >= STALE_SECONDS, evidence.to_json()
    # a point-in-time read also holds widening (no 24 h watch), so the stale-lag decision leads, not stands alone
    assert metrics_decisions.verdict(evidence) == [metrics_decisions.DECISIONS[1], metrics_decisions.DECISIONS[3]], (
        evidence.to_json()
    )


def test_missing_samples_are_absent_not_zero(
    metrics_adapter: MetricsAdapter, metrics_client: client.ApiClient, metrics_scope: metrics_sampling.SampleScope
) -> None:
    before = metrics_sampling.samples(metrics_client, "v1", metrics_scope)
    metrics_adapter.set({"missingPods": ["fake-dra/"]})
    after = metrics_sampling.samples(metrics_client, "v1", metrics_scope)
    missing = sorted(set(before) - set(after))
    assert missing and all(key.startswith("pod/fake-dra/") for key in missing), f"missing: {missing}"
    assert not [k for k, s in after.items() if s.cpu_millicores == 0 and s.memory_bytes == 0]


def test_version_disagreement_is_reported_by_parity(
    metrics_adapter: MetricsAdapter, metrics_client: client.ApiClient, metrics_scope: metrics_sampling.SampleScope
) -> None:
    metrics_adapter.set({"v1UsageFactor": 2})
    differences = metrics_sampling.parity_differences(
        metrics_sampling.samples(metrics_client, "v1", metrics_scope),
        metrics_sampling.samples(metrics_client, "v1beta1", metrics_scope),
        0.05,
    )
    assert any("cpu" in d for d in differences), f"parity found: {differences}"


def test_serving_only_v1beta1_makes_the_v1_apiservice_unavailable_and_the_verdict_fix_it(
    metrics_adapter: MetricsAdapter,
    metrics_client: client.ApiClient,
    metrics_scope: metrics_sampling.SampleScope,
    api_client: client.ApiClient,
    timeouts: Timeouts,
) -> None:
    metrics_adapter.set({"served": ["v1beta1"]})
    state = wait_available(api_client, {"v1": False, "v1beta1": True}, timeouts.metrics_available)
    assert state["v1"].startswith("False/FailedDiscoveryCheck"), state
    evidence = _evidence(metrics_client, metrics_scope)
    assert metrics_decisions.verdict(evidence)[0] == "fix first: v1 unavailable (FailedDiscoveryCheck)", (
        evidence.to_json()
    )
    assert evidence.lag_p95 is not None, "v1beta1 still serves: the lag is measured there"


def test_unavailable_adapter_marks_both_apiservices_unavailable(
    metrics_adapter: MetricsAdapter,
    metrics_client: client.ApiClient,
    metrics_scope: metrics_sampling.SampleScope,
    api_client: client.ApiClient,
    timeouts: Timeouts,
) -> None:
    metrics_adapter.set({"unavailable": True})
    state = wait_available(api_client, {"v1": False, "v1beta1": False}, timeouts.metrics_available)
    assert all(value.startswith("False/FailedDiscoveryCheck") for value in state.values()), state
    evidence = _evidence(metrics_client, metrics_scope)
    assert metrics_decisions.verdict(evidence)[0] == (
        "fix first: v1 unavailable (FailedDiscoveryCheck); v1beta1 unavailable (FailedDiscoveryCheck)"
    ), evidence.to_json()


def test_invalid_fault_is_refused_in_one_line(metrics_adapter: MetricsAdapter) -> None:
    with pytest.raises(ValueError) as refused:
        metrics_adapter.set({"staleSecs": 5})
    assert "unknown fault key 'staleSecs'" in str(refused.value) and "\n" not in str(refused.value)


def _freeze(pid: int) -> None:
    """SIGSTOP the reference adapter, after checking the pid is still it."""
    if b"fake_metrics" not in Path(f"/proc/{pid}/cmdline").read_bytes():
        raise AssertionError(f"pid {pid} is no longer the reference metrics adapter")
    os.kill(pid, signal.SIGSTOP)


# The checks that read samples: the only ones an unavailable version may end as errors (blocked, at once).
SAMPLE_CHECKS = {
    "test_versions_agree_while_both_are_served",
    "test_samples_are_fresh_enough_for_autoscaling",
    "test_no_node_or_pod_is_reported_with_zero_use",
    "test_rollback_leaves_no_v1_apiservice_and_v1beta1_still_answers",
    "test_consumer_inventory_lists_kubectl_top_with_the_version_it_used",
    "test_consumer_inventory_lists_the_hpa_controller_with_the_version_it_used",
}


@pytest.mark.parametrize(
    ("fault", "unavailable"),
    [
        # As measured: the adapter process frozen, both APIServices FailedDiscoveryCheck.
        ("sigstop", ("v1", "v1beta1")),
        # The adapter answers, but not for v1: v1 alone unavailable, v1beta1 still serves the checks it can.
        ("v1-not-served", ("v1",)),
    ],
    ids=["sigstop", "v1-not-served"],
)
def test_an_unavailable_v1_ends_the_metrics_run_in_minutes_with_fix_first(
    fault: str, unavailable: tuple[str, ...], tmp_path: Path
) -> None:
    """`-k metrics` on a cluster of its own whose v1 is unavailable: in minutes, "fix first: v1 unavailable", not 0.

    Every namespace deletion of the cluster is blocked meanwhile (an unavailable APIService fails discovery): one
    line names the APIServices, and it is no error of any check.
    """
    state_dir = paths.CHECKOUT / "reports" / "clusters" / f"metrics-{fault}-{os.getpid()}"
    backend = make_backend(SuiteConfig(state_dir=state_dir), owner_pid=os.getpid())
    cluster = backend.start()
    pid = int(cluster.details["pid.fake-metrics"])
    frozen = False
    try:
        with client_from_kubeconfig(cluster.kubeconfig) as api:
            if fault == "sigstop":
                _freeze(pid)
                frozen = True
            else:
                MetricsAdapter(Path(cluster.details["metrics.control_socket"]), api, DEADLINES).set(
                    {"served": ["v1beta1"]}
                )
            wait_available(api, {v: v not in unavailable for v in metrics_reads.VERSIONS}, DEADLINES.metrics_available)
        started = time.monotonic()
        result = subprocess.run(
            [
                str(Path(sys.executable).parent / "dra-conformance"),
                "run",
                "--no-html",
                f"--dra-state-dir={state_dir}",
                "-n",
                "1",
                "-k",
                "metrics",
                *(f"--dra-timeout-{name}={seconds:g}" for name, seconds in INNER_DEADLINES.items()),
                f"--dra-reports-dir={tmp_path / 'reports'}",
                "-p",
                "no:cacheprovider",
            ],
            cwd=paths.CHECKOUT,
            capture_output=True,
            text=True,
            timeout=UNAVAILABLE_RUN_TIMEOUT,
            check=False,
        )
        wall = time.monotonic() - started
        print(f"-k metrics with {fault}: {wall:.1f} s, exit {result.returncode}")  # shown by -rP
    finally:
        if frozen:
            os.kill(pid, signal.SIGCONT)
        backend.stop()
    output = result.stdout + result.stderr
    tail = f"wall {wall:.0f} s, exit {result.returncode}\n{output[-6000:]}"
    assert result.returncode != 0, tail
    assert wall < UNAVAILABLE_RUN_BOUND, tail
    # The run's watch saw the versions unavailable from its first probes: since when, as the aggregator said.
    since = r"since \d\d:\d\d:\d\d UTC"
    first = rf"fix first: v1 unavailable {since} \(FailedDiscoveryCheck\)"
    assert re.search(rf"^- {first}", result.stdout, re.MULTILINE), tail
    first_sample_wait = f"timed out after {DEADLINES.metrics_first_sample:g}s"
    assert first_sample_wait not in output, tail
    assert "harness obligation metrics.version-available-for-samples broke" in output, tail
    (run_dir,) = (tmp_path / "reports").iterdir()
    outcomes = json.loads((run_dir / "summary.json").read_text())["tests"]
    errors = {nodeid.split("::")[-1].split("@")[0] for nodeid, outcome in outcomes.items() if outcome == "error"}
    assert errors and errors <= SAMPLE_CHECKS, outcomes
    failed = {nodeid.split("::")[-1].split("@")[0] for nodeid, outcome in outcomes.items() if outcome == "failed"}
    assert {f"{AVAILABILITY_CHECK}[{v}]" for v in unavailable} <= failed, outcomes
    # The namespaces the run deleted wait for discovery: one line names the APIServices, and it is not an error. It
    # names those the namespace controller's discovery failure names: with both versions down, either or both (its
    # last discovery attempt decides), each an unavailable one with its condition.
    blocked = [line for line in output.splitlines() if "NamespaceDeletionBlocked:" in line]
    assert len(blocked) == 1, tail
    named = dict(re.findall(r"([a-z0-9]+\.metrics\.k8s\.io) \(([^)]*)\)", blocked[0]))
    down = {f"{v}.{metrics_reads.GROUP}" for v in unavailable}
    assert named and set(named) <= down, f"APIServices named {named}, unavailable {sorted(down)}: {blocked[0]}"
    assert all(condition == "False/FailedDiscoveryCheck" for condition in named.values()), blocked[0]
    decisions = json.loads((run_dir / "metrics-verdict.json").read_text())["decisions"]
    expected = "fix first: " + "; ".join(rf"{v} unavailable {since} \(FailedDiscoveryCheck\)" for v in unavailable)
    assert re.fullmatch(expected, decisions[0]), f"decisions {decisions}, expected {expected}"
    assert (run_dir / "metrics-verdict.md").read_text().startswith("# Metrics API verdict\n\n- **fix first: v1")
    shutil.rmtree(state_dir, ignore_errors=True)  # kept, with its logs, when the check fails
    state_dir.with_name(f"{state_dir.name}.lock").unlink(missing_ok=True)
