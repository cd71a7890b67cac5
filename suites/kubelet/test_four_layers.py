"""The four-layer check: allocation, driver status, readiness and job outcome are four answers, not one.

Each case runs one Job with a claim on a real node and builds its correlation record from the API alone. Where the
layers disagree, the record names the first layer that broke: allocated but prepare failed (driver status),
status Ready but the container lacks its device (readiness), started with its device but the work failed (job
outcome). A failing prepare comes from the kubelet-side interposer, so that case runs with any driver; the missing
device needs a fault of the reference driver.

Two obligations (`dra_conformance/model/registry/kubelet.yaml`): every layer before the one a case breaks passes
(all four where it breaks none), which is the driver's and the cluster's doing; and the record names the layer the
case broke, which is ours (the fault and the record are the suite's).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import allure
import pytest
from kubernetes import client

from dra_conformance.driver.profile import Capability
from dra_conformance.driver.real_node import RealNodeTarget
from dra_conformance.driver.reference import FakeDriverControl
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import Builder, ClaimUse
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.interposer import InterposedFault, KubeletInterposer
from dra_conformance.kubelet.layers import (
    DEVICE_MISSING_EXIT,
    RECORD_KIND,
    Answer,
    FourLayerRecord,
    Layer,
    WorkloadObserver,
)
from dra_conformance.model.findings import Obligations
from dra_conformance.model.records import RunRecords
from dra_conformance.timeouts import Timeouts

# The environment the reference driver's CDI spec injects for every prepared device.
REFERENCE_DEVICE_ENV = "FAKE_DRA_DEVICE"


@dataclass(frozen=True)
class Case:
    """One way the four layers can line up."""

    id: str
    broken: Layer | None
    fault: dict[str, Any] | None = None  # a reference-driver fault
    interposed: InterposedFault | None = None  # a fault of the kubelet-side interposer (any driver)
    work_exit: int = 0

    def __str__(self) -> str:
        return self.id


# The real node is one per machine and every kubelet-mode check leases it in turn: on one xdist worker they take
# turns without a lease wait that grows with the checks before it (the lease deadline timed out at 15 checks).
pytestmark = pytest.mark.xdist_group("real-node")

CASES = (
    Case("all-four-green", None),
    Case(
        "allocated-but-prepare-failed",
        Layer.DRIVER_STATUS,
        interposed=InterposedFault("NodePrepareResources", "error", message="injected by the four-layer check"),
    ),
    Case("status-ready-but-container-lacks-device", Layer.READINESS, fault={"mode": "cdi-without-edits"}),
    Case("ready-but-job-fails", Layer.JOB_OUTCOME, work_exit=1),
)


def _workload(check_device: bool, work_exit: int) -> tuple[str, ...]:
    # The container checks the device it was promised (where the suite knows how it shows), holds it a second so
    # the driver's status can be seen, then does its "work": exit with the case's code.
    device = f'test -n "${REFERENCE_DEVICE_ENV}" || exit {DEVICE_MISSING_EXIT}; ' if check_device else ""
    return ("sh", "-c", f"{device}sleep 1; exit {work_exit}")


def _before(broken: Layer | None) -> list[Layer]:
    """The layers a workload passes before `broken` (every layer when nothing is broken on purpose)."""
    layers = list(Layer)
    return layers if broken is None else layers[: layers.index(broken)]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_every_layer_before_the_broken_one_passes_and_the_record_names_the_broken_layer(
    case: Case,
    real_node: RealNodeTarget,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    driver_under_test: DriverUnderTest,
    run_records: RunRecords,
    request: pytest.FixtureRequest,
    obligations: Obligations,
) -> None:
    reference = driver_under_test.profile.fault_switches and real_node.endpoint is not None
    if case.fault is not None and not reference:
        pytest.skip(
            f"not applicable: breaks a layer with the reference driver's {case.fault['mode']} fault; the driver "
            f"under test is {driver_under_test.name}"
        )
    undo = FakeDriverControl(real_node.endpoint).set_faults([case.fault]) if case.fault and real_node.endpoint else None
    if case.interposed is not None:
        interposer: KubeletInterposer = request.getfixturevalue("interposer")
        interposer.set_faults([case.interposed])
        undo = functools.partial(interposer.set_faults, [])
    try:
        device_class = tracker.create(build.device_class())["metadata"]["name"]
        template = tracker.create(build.claim_template(device_class))["metadata"]["name"]
        pod = build.pod_with(
            [ClaimUse("devices", template=template)],
            node=real_node.name,
            tolerations=real_node.tolerations,
            image=real_node.image,
            command=_workload(reference, case.work_exit),
        )
        job = tracker.create(build.job_with(pod))["metadata"]["name"]
        observer = WorkloadObserver(
            api_client,
            namespace,
            job,
            driver_under_test.name,
            declares_status=driver_under_test.profile.declares(Capability.STATUS_DEVICES),
        )
        try:
            record: FourLayerRecord = waits.until(
                observer.poll,
                FourLayerRecord.decided,
                timeout=timeouts.job_complete,
                what=f"the four layers of job {job} decided",
                describe=FourLayerRecord.describe,
            )
        except WaitTimeout:
            record = observer.record
    finally:
        if undo is not None:
            undo()
    allure.attach(record.to_json(), "four-layer record", allure.attachment_type.JSON)
    request.node.user_properties.append(("four-layer", record.to_json()))
    run_records.add(RECORD_KIND, {"check": request.node.nodeid, "record": record.to_json()})
    where = f"case {case} on {real_node.name} ({record.key})"
    before = _before(case.broken)
    failed = [layer for layer in before if record.answers[layer].answer == Answer.FAILED]
    # Where nothing is broken on purpose the work must also have been done: a Job still pending at the deadline
    # passed no layer of its own.
    finished = case.broken is not None or record.answers[Layer.JOB_OUTCOME].answer == Answer.OK
    obligations.check(
        "kubelet.workload-passes-every-layer",
        not failed and finished,
        f"failed {[str(layer) for layer in failed] or 'none'} of {[str(layer) for layer in before]}"
        f"{'' if finished else ', the Job did not finish'}: {record.describe()}",
        where,
    )
    obligations.check(
        "kubelet.record-names-the-broken-layer",
        record.broken_layer() == case.broken,
        f"expected broken layer {case.broken or 'none'}, got {record.broken_layer() or 'none'}: {record.describe()}",
        where,
    )
