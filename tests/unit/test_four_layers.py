"""The four-layer record: answers per layer, the sticky merge of polls, and the first broken layer."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from dra_conformance.kubelet.layers import (
    DEVICE_MISSING_EXIT,
    PREPARE_RETRY_WINDOW,
    Answer,
    FourLayerRecord,
    Layer,
    LayerAnswer,
    PrepareFailures,
    allocation_answer,
    driver_status_answer,
    readiness_answer,
)

DRIVER = "gpu.example.com"
NO_FAILURES = PrepareFailures()


def _claim(*, allocated: bool = True, ready: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if allocated:
        status["allocation"] = {"devices": {"results": [{"driver": DRIVER, "pool": "n", "device": "gpu-0"}]}}
    if ready:
        condition = {"type": "Ready", "status": "True"}
        status["devices"] = [{"driver": DRIVER, "pool": "n", "device": "gpu-0", "conditions": [condition]}]
    return {"metadata": {"uid": "u"}, "status": status}


def _pod(terminated_code: int | None = None, running: bool = False, waiting: str = "ContainerCreating") -> client.V1Pod:
    terminated = client.V1ContainerStateTerminated(exit_code=terminated_code) if terminated_code is not None else None
    waits = None if terminated is not None or running else client.V1ContainerStateWaiting(reason=waiting, message="m")
    state = client.V1ContainerState(
        terminated=terminated, running=client.V1ContainerStateRunning() if running else None, waiting=waits
    )
    status = client.V1ContainerStatus(name="app", image="i", image_id="", ready=running, restart_count=0, state=state)
    return client.V1Pod(status=client.V1PodStatus(container_statuses=[status]))


def test_the_first_failed_layer_in_workload_order_is_the_broken_one() -> None:
    record = FourLayerRecord("ns/job")
    record.update(Layer.ALLOCATION, LayerAnswer(Answer.OK, "allocated"))
    record.update(Layer.JOB_OUTCOME, LayerAnswer(Answer.FAILED, "job failed"))
    record.update(Layer.READINESS, LayerAnswer(Answer.FAILED, "no device"))
    assert record.broken_layer() == Layer.READINESS


def test_a_success_seen_once_survives_a_later_poll_that_sees_nothing() -> None:
    record = FourLayerRecord("ns/job")
    record.update(
        Layer.DRIVER_STATUS,
        driver_status_answer(_claim(ready=True), DRIVER, NO_FAILURES, declares_status=True, started=True),
    )
    # After the Job finished the kubelet unprepared, and the driver removed its entry.
    record.update(
        Layer.DRIVER_STATUS, driver_status_answer(_claim(), DRIVER, NO_FAILURES, declares_status=True, started=True)
    )
    assert record.answers[Layer.DRIVER_STATUS].answer == Answer.OK


def test_a_prepare_still_failing_after_the_kubelets_retries_fails_the_driver_layer_whatever_the_status_says() -> None:
    failures = PrepareFailures(("NodePrepareResources: injected",) * 4, PREPARE_RETRY_WINDOW)
    answer = driver_status_answer(_claim(), DRIVER, failures, declares_status=False, started=False)
    assert answer.answer == Answer.FAILED and "injected" in answer.evidence, answer


def test_a_first_failed_prepare_event_is_not_judged_while_the_kubelet_retries() -> None:
    failures = PrepareFailures(("device gpu-0 is held by claim ns/old",), PREPARE_RETRY_WINDOW / 3)
    answer = driver_status_answer(_claim(ready=True), DRIVER, failures, declares_status=True, started=False)
    assert answer.answer == Answer.PENDING and "retries" in answer.evidence, answer


def test_a_prepare_a_retry_got_through_passes_the_driver_layer_naming_the_refusals() -> None:
    failures = PrepareFailures(("device gpu-0 is held by claim ns/old",), PREPARE_RETRY_WINDOW * 2)
    answer = driver_status_answer(_claim(ready=True), DRIVER, failures, declares_status=True, started=True)
    assert answer.answer == Answer.OK and "held by claim ns/old" in answer.evidence, answer


def test_a_failed_prepare_of_a_pod_that_ended_without_starting_fails_at_once() -> None:
    failures = PrepareFailures(("injected",), 0.0)
    answer = driver_status_answer(_claim(), DRIVER, failures, declares_status=True, started=False, pod_done=True)
    assert answer.answer == Answer.FAILED, answer


def test_a_driver_without_declared_status_is_vouched_for_by_the_started_container() -> None:
    assert driver_status_answer(_claim(), DRIVER, NO_FAILURES, declares_status=False, started=True).answer == Answer.OK
    assert (
        driver_status_answer(_claim(), DRIVER, NO_FAILURES, declares_status=False, started=False).answer
        == Answer.NOT_REPORTED
    )


def test_readiness_fails_only_for_the_missing_device_exit_code() -> None:
    assert readiness_answer(_pod(DEVICE_MISSING_EXIT)).answer == Answer.FAILED
    assert readiness_answer(_pod(1)).answer == Answer.OK
    assert readiness_answer(_pod(running=True)).answer == Answer.OK
    assert readiness_answer(_pod()).answer == Answer.PENDING


def test_a_container_the_runtime_cannot_create_fails_readiness_with_its_message() -> None:
    answer = readiness_answer(_pod(waiting="CreateContainerError"))
    assert answer.answer == Answer.FAILED and "CreateContainerError: m" in answer.evidence
    assert readiness_answer(_pod(waiting="ImagePullBackOff")).answer == Answer.FAILED


def test_allocation_is_pending_until_the_claim_is_allocated() -> None:
    assert allocation_answer(_claim(allocated=False), DRIVER, None).answer == Answer.PENDING
    assert allocation_answer(_claim(), DRIVER, None).answer == Answer.OK


def test_a_record_is_decided_by_a_failure_or_a_finished_job() -> None:
    record = FourLayerRecord("ns/job")
    assert not record.decided()
    record.update(Layer.JOB_OUTCOME, LayerAnswer(Answer.OK, "succeeded"))
    assert record.decided() and record.broken_layer() is None


def test_a_declared_status_entry_without_conditions_vouches_once_the_container_started() -> None:
    claim = _claim()
    claim["status"]["devices"] = [{"driver": DRIVER, "pool": "n", "device": "gpu-0", "data": {"uuid": "x"}}]
    assert driver_status_answer(claim, DRIVER, NO_FAILURES, declares_status=True, started=True).answer == Answer.OK
    assert (
        driver_status_answer(claim, DRIVER, NO_FAILURES, declares_status=True, started=False).answer == Answer.PENDING
    )
    claim["status"]["devices"][0]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert driver_status_answer(claim, DRIVER, NO_FAILURES, declares_status=True, started=True).answer == Answer.PENDING
