"""The four-layer check: one workload, four questions, four answers, and the first layer that broke.

1. allocation: what the scheduler allocated (`status.allocation` of the workload's claim);
2. driver status: what the driver reports (its Ready entries in `status.devices`), or the kubelet's
   `FailedPrepareDynamicResources` event when prepare failed;
3. readiness: whether the workload started with its device (its container started and did not exit with
   `DEVICE_MISSING_EXIT`, the code the workload uses when the device it was promised is not there);
4. job outcome: whether the work got done (the Job succeeded).

The answers come from the API only, so the same record is built on any cluster where a real kubelet runs the
workload. Observation is a poll that keeps the best answer seen per layer: a driver's Ready entry is removed
again when the kubelet unprepares after the Job finished, and must still count.

A failed prepare is not judged on its first event: the kubelet retries it, and a driver may refuse on purpose what a
retry gets (a device another claim still holds until the kubelet has unprepared that claim). The driver status
layer fails only when prepare still fails once the kubelet's retries have had `PREPARE_RETRY_WINDOW`, or when the
pod can no longer start (the Job failed); a prepare that a retry got through is the layer's success, with the
refusals in its evidence.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from http import HTTPStatus
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.kube.claims import device_condition, device_statuses
from dra_conformance.kube.pods import START_FAILURES

# Kind of the run records that hold every four-layer record (the check adds one per case; the summary reads them).
RECORD_KIND = "four-layer"
# The workload's exit code when the environment its driver's CDI spec should have injected is absent.
DEVICE_MISSING_EXIT = 3
# The kubelet's event reason when NodePrepareResources fails (pkg/kubelet/events/event.go).
FAILED_PREPARE_REASON = "FailedPrepareDynamicResources"
# How long a failed prepare may keep failing before the driver status layer says "failed": the kubelet's pod worker
# retries a sync that failed after its back-off of 10 s jittered by up to half (k8s.io/kubernetes@v1.37.2
# pkg/kubelet/kubelet.go:223, pod_workers.go:330 and :1061), so this is three retries at least. A refusal that a
# retry clears (the holder of a device unprepared meanwhile) is not a failure.
PREPARE_RETRY_WINDOW = 45.0


class Layer(StrEnum):
    """The four layers, in the order a workload passes them."""

    ALLOCATION = "allocation"
    DRIVER_STATUS = "driver status"
    READINESS = "readiness"
    JOB_OUTCOME = "job outcome"


class Answer(StrEnum):
    """One layer's answer."""

    OK = "ok"
    FAILED = "failed"
    PENDING = "pending"
    # The layer has nothing to say (a driver that does not declare status.devices, before prepare failed).
    NOT_REPORTED = "not reported"


# Which answer wins when polls disagree: a failure seen once stands, then a success seen once.
_RANK = {Answer.FAILED: 3, Answer.OK: 2, Answer.NOT_REPORTED: 1, Answer.PENDING: 0}


@dataclass(frozen=True)
class LayerAnswer:
    """An answer with the evidence it rests on."""

    answer: Answer
    evidence: str


@dataclass
class FourLayerRecord:
    """One workload (its key: namespace/Job and claim UID) and its four answers."""

    key: str
    answers: dict[Layer, LayerAnswer] = field(
        default_factory=lambda: {layer: LayerAnswer(Answer.PENDING, "not observed yet") for layer in Layer}
    )

    def update(self, layer: Layer, seen: LayerAnswer) -> None:
        """Keep `seen` if it says more than what the layer holds (a pending layer keeps the latest evidence)."""
        held = self.answers[layer].answer
        if _RANK[seen.answer] > _RANK[held] or seen.answer == held == Answer.PENDING:
            self.answers[layer] = seen

    def broken_layer(self) -> Layer | None:
        """The first layer that failed, in workload order; None when none did."""
        return next((layer for layer in Layer if self.answers[layer].answer == Answer.FAILED), None)

    def decided(self) -> bool:
        """Whether observing longer can change the verdict: a layer failed, or the Job finished."""
        return self.broken_layer() is not None or self.answers[Layer.JOB_OUTCOME].answer == Answer.OK

    def to_json(self) -> str:
        """The record as the report attaches it."""
        return json.dumps(
            {
                "key": self.key,
                "broken_layer": str(self.broken_layer() or "none"),
                "answers": {
                    str(layer): {"answer": str(a.answer), "evidence": a.evidence} for layer, a in self.answers.items()
                },
            },
            indent=2,
        )

    def describe(self) -> str:
        """One line per layer, for failure messages."""
        return "; ".join(f"{layer}: {a.answer} ({a.evidence})" for layer, a in self.answers.items())


def allocation_answer(claim: dict[str, Any] | None, driver: str, pod: client.V1Pod | None) -> LayerAnswer:
    """Layer 1 from the claim's allocation (and the pod's scheduling condition)."""
    allocation = ((claim or {}).get("status") or {}).get("allocation") or {}
    results = [r for r in (allocation.get("devices") or {}).get("results") or [] if r["driver"] == driver]
    if results:
        return LayerAnswer(Answer.OK, f"allocated {[(r['pool'], r['device']) for r in results]}")
    scheduled = next((c for c in (pod.status.conditions or []) if c.type == "PodScheduled"), None) if pod else None
    if scheduled is not None and scheduled.reason == "Unschedulable":
        return LayerAnswer(Answer.FAILED, f"unschedulable: {scheduled.message}")
    return LayerAnswer(Answer.PENDING, "no allocation yet")


@dataclass(frozen=True)
class PrepareFailures:
    """The kubelet's FailedPrepareDynamicResources messages for the workload's pod, and how long prepare failed.

    `failing_for`: seconds since the first such event was seen, the container not started since.
    """

    messages: tuple[str, ...] = ()
    failing_for: float = 0.0

    def outlasted_retries(self, window: float = PREPARE_RETRY_WINDOW) -> bool:
        """Whether prepare kept failing through the kubelet's retries."""
        return bool(self.messages) and self.failing_for >= window

    def summary(self) -> str:
        """The count and the last message, for evidence."""
        return f"{len(self.messages)} {FAILED_PREPARE_REASON} event(s), the last: {self.messages[-1]}"


def driver_status_answer(
    claim: dict[str, Any] | None,
    driver: str,
    failures: PrepareFailures,
    *,
    declares_status: bool,
    started: bool,
    pod_done: bool = False,
) -> LayerAnswer:
    """Layer 2 from the driver's status.devices entries, or the kubelet's prepare failures once they are final.

    Final: prepare kept failing through the kubelet's retries, or the pod ended without starting.
    """
    if failures.messages and not started:
        if failures.outlasted_retries() or pod_done:
            why = "the pod ended without starting" if pod_done else f"still failing after {failures.failing_for:.0f} s"
            return LayerAnswer(Answer.FAILED, f"{why}: {failures.summary()}")
        return LayerAnswer(
            Answer.PENDING, f"the kubelet retries a failed prepare ({failures.failing_for:.0f} s): {failures.summary()}"
        )
    retried = f" (after the kubelet retried: {failures.summary()})" if failures.messages else ""
    entries = [e for e in device_statuses(claim or {}) if e["driver"] == driver]
    ready = [e["device"] for e in entries if (device_condition(e, "Ready") or {}).get("status") == "True"]
    if ready:
        return LayerAnswer(Answer.OK, f"Ready entries for {ready}{retried}")
    # Conditions are optional (the Ready condition is a "should"): an entry without any, once the container
    # started, is the driver's whole report; one with conditions and no Ready=True is not configured yet.
    unconditioned = [e["device"] for e in entries if not e.get("conditions")]
    if unconditioned and started:
        return LayerAnswer(
            Answer.OK, f"entries without conditions for {unconditioned} and the container started{retried}"
        )
    if not declares_status and started:
        return LayerAnswer(
            Answer.OK, f"the kubelet started the container, so prepare succeeded (no status declared){retried}"
        )
    if not declares_status:
        return LayerAnswer(Answer.NOT_REPORTED, "the driver declares no status.devices")
    # The entries' conditions, not their data or networkData: infrastructure metadata, and not what is awaited here.
    conditions = {e["device"]: e.get("conditions") for e in entries}
    return LayerAnswer(Answer.PENDING, f"no Ready entry of {driver} yet: conditions {conditions}{retried}")


def _container_state(pod: client.V1Pod | None) -> Any:
    statuses = (pod.status.container_statuses or []) if pod and pod.status else []
    return statuses[0].state if statuses else None


def started(pod: client.V1Pod | None) -> bool:
    """Whether the workload's container ran (running now, or terminated after it started)."""
    state = _container_state(pod)
    return state is not None and (state.running is not None or state.terminated is not None)


def readiness_answer(pod: client.V1Pod | None) -> LayerAnswer:
    """Layer 3 from the workload container's state."""
    state = _container_state(pod)
    if state is not None and state.terminated is not None:
        code = state.terminated.exit_code
        if code == DEVICE_MISSING_EXIT:
            return LayerAnswer(Answer.FAILED, f"the container started without its device (exit {code})")
        return LayerAnswer(Answer.OK, f"the container started and exited {code}")
    if state is not None and state.running is not None:
        return LayerAnswer(Answer.OK, "the container is running")
    waiting = state.waiting if state is not None else None
    reason = (waiting.reason or "") if waiting is not None else ""
    if waiting is not None and (reason.endswith("Error") or reason in START_FAILURES):
        # CreateContainerError (e.g. an unresolvable CDI device), RunContainerError, ...: the kubelet retries, but
        # the workload did not start with what it was given.
        return LayerAnswer(Answer.FAILED, f"container {waiting.reason}: {waiting.message}")
    return LayerAnswer(Answer.PENDING, f"container {waiting.reason if waiting is not None else 'not created'}")


def job_answer(job: client.V1Job) -> LayerAnswer:
    """Layer 4 from the Job's status."""
    status = job.status
    if status.succeeded:
        return LayerAnswer(Answer.OK, "the Job succeeded")
    if status.failed:
        return LayerAnswer(Answer.FAILED, f"the Job failed ({status.failed} pod(s) failed)")
    return LayerAnswer(Answer.PENDING, f"active={status.active or 0}")


def failed_prepare_messages(core: client.CoreV1Api, namespace: str, pod: str) -> list[str]:
    """Messages of the kubelet's FailedPrepareDynamicResources events for `pod`, oldest first."""
    listed = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}")
    return [e.message for e in listed.items if e.reason == FAILED_PREPARE_REASON]


class WorkloadObserver:
    """Polls one Job with a claim and fills its four-layer record."""

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        job: str,
        driver: str,
        *,
        declares_status: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Observe Job `job` in `namespace`, whose claim is allocated from `driver`."""
        self.core, self.batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.namespace, self.job, self.driver, self.declares_status = namespace, job, driver, declares_status
        self.record = FourLayerRecord(f"{namespace}/{job}")
        self.clock = clock
        self._first_failure: float | None = None

    def _claim(self, pod: client.V1Pod | None) -> dict[str, Any] | None:
        names = [s.resource_claim_name for s in (pod.status.resource_claim_statuses or [])] if pod else []
        if not names or not names[0]:
            return None
        group, version = RESOURCE_API.split("/")
        try:
            claim: dict[str, Any] = self.custom.get_namespaced_custom_object(
                group, version, self.namespace, "resourceclaims", names[0]
            )
        except ApiException as error:
            if error.status == HTTPStatus.NOT_FOUND:
                return None  # a generated claim goes with its finished pod; what was seen of it stands
            raise
        self.record.key = f"{self.namespace}/{self.job} claim {claim['metadata']['uid']}"
        return claim

    def poll(self) -> FourLayerRecord:
        """Read every layer once and merge what it says into the record."""
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=f"job-name={self.job}").items
        pod = pods[0] if pods else None
        claim = self._claim(pod)
        failures = self._failures(pod)
        job = job_answer(self.batch.read_namespaced_job_status(self.job, self.namespace))
        record = self.record
        record.update(Layer.ALLOCATION, allocation_answer(claim, self.driver, pod))
        record.update(
            Layer.DRIVER_STATUS,
            driver_status_answer(
                claim,
                self.driver,
                failures,
                declares_status=self.declares_status,
                started=started(pod),
                pod_done=job.answer == Answer.FAILED,
            ),
        )
        record.update(Layer.READINESS, readiness_answer(pod))
        record.update(Layer.JOB_OUTCOME, job)
        return record

    def _failures(self, pod: client.V1Pod | None) -> PrepareFailures:
        messages = tuple(failed_prepare_messages(self.core, self.namespace, pod.metadata.name)) if pod else ()
        if not messages:
            return PrepareFailures()
        now = self.clock()
        if self._first_failure is None:
            self._first_failure = now
        return PrepareFailures(messages, now - self._first_failure)
