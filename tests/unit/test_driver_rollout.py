"""The pure parts of a driver rollout (dra_conformance/driver/rollout.py).

A release that cannot start, a new pod's failed starts, the hold mark on the DaemonSet.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from dra_conformance.driver import rollout
from dra_conformance.errors import UsageError


def _template() -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "driver"}},
        "spec": {
            "containers": [
                {"name": "plugin", "image": "driver:2", "args": ["--node=$(NODE)"]},
                {"name": "sidecar", "image": "registrar:1"},
            ]
        },
    }


def test_a_release_that_cannot_start_gets_the_declared_arguments_appended_to_the_driver_container() -> None:
    changed, line = rollout.cannot_start(_template(), ("--start-failure=after-publish",), "plugin")
    assert changed["spec"]["containers"][0]["args"] == ["--node=$(NODE)", "--start-failure=after-publish"], changed
    assert changed["spec"]["containers"][1] == _template()["spec"]["containers"][1], changed
    assert "appended" in line and "plugin" in line, line


def test_without_declared_arguments_the_first_container_runs_a_program_that_does_not_exist() -> None:
    template = _template()
    changed, line = rollout.cannot_start(template, (), None)
    assert changed["spec"]["containers"][0]["command"] == [rollout.MISSING_PROGRAM], changed
    assert "args" not in changed["spec"]["containers"][0], changed
    assert template == _template(), "the template given must stay as it was"
    assert rollout.MISSING_PROGRAM in line, line


def test_a_container_the_template_lacks_is_one_line_naming_the_key() -> None:
    with pytest.raises(UsageError, match=r"install.cannotStart.container: no container registrar"):
        rollout.cannot_start(_template(), ("--x",), "registrar")


def _pod(ready: bool, restarts: int, waiting: str | None = None) -> client.V1Pod:
    state = client.V1ContainerState(waiting=client.V1ContainerStateWaiting(reason=waiting) if waiting else None)
    status = client.V1ContainerStatus(
        name="plugin", image="i", image_id="", ready=ready, restart_count=restarts, state=state
    )
    condition = client.V1PodCondition(type="Ready", status="True" if ready else "False")
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="driver-new"),
        status=client.V1PodStatus(phase="Running", container_statuses=[status], conditions=[condition]),
    )


def test_a_new_pod_counts_restarts_and_a_container_that_could_not_be_started_as_failed_starts() -> None:
    assert rollout.NewPod.of(_pod(False, 0, "RunContainerError")).failed_starts == 1
    assert rollout.NewPod.of(_pod(False, 2, "CrashLoopBackOff")).failed_starts == 3
    ready = rollout.NewPod.of(_pod(True, 0))
    assert ready.ready and ready.failed_starts == 0, ready
    assert rollout.NewPod.of(_pod(False, 0, "ContainerCreating")).failed_starts == 0


def test_a_switch_replaces_the_template_and_the_update_strategy() -> None:
    patch = rollout.switch_patch(_template(), rollout.SURGE_EVERYWHERE_STRATEGY)
    assert patch == [
        {"op": "replace", "path": "/spec/template", "value": _template()},
        {"op": "replace", "path": "/spec/updateStrategy", "value": rollout.SURGE_EVERYWHERE_STRATEGY},
    ], patch


def test_the_hold_annotation_is_one_json_pointer_segment_and_its_mark_reads_back() -> None:
    assert rollout._escaped(rollout.ROLLING_ANNOTATION) == "dra-conformance.io~1rolled-by"
    daemonset = client.V1DaemonSet(
        metadata=client.V1ObjectMeta(annotations={rollout.ROLLING_ANNOTATION: "upgrade@node-0 1700000000.5"}),
        spec=client.V1DaemonSetSpec(selector=client.V1LabelSelector(), template=client.V1PodTemplateSpec()),
    )
    assert rollout._mark(daemonset) == ("upgrade@node-0", 1700000000.5)
    daemonset.metadata.annotations[rollout.ROLLING_ANNOTATION] = "garbled"
    assert rollout._mark(daemonset) is None
