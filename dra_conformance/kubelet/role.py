"""The kubelet's role on fake nodes: prepare claims before a pod starts and unprepare them after it is gone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import allure
import grpc
from kubernetes import client

from dra_conformance.kubelet.client import CallResult, ClaimAnswer, ClaimRef, DriverClient
from dra_conformance.kubelet.latency import LatencyLog
from dra_conformance.model.driver import DriverEndpoint

# kwok marks a pod with claims Ready only once this annotation says its claims were prepared
# (clusters/local/kwok-stages.yaml): on fake nodes the test plays the kubelet.
PREPARED_ANNOTATION = "dra-conformance.io/prepared"


@dataclass(frozen=True)
class CallOutcome:
    """A call as the kubelet sees it: either a whole-call error or per-claim answers.

    The DRA plugin API allows both forms of failure: "if an error is returned, the response is ignored", and
    failures of individual claims can be reported per claim (k8s.io/kubelet pkg/apis/dra/v1/api.proto:25-28).
    """

    result: CallResult | None
    error: grpc.RpcError | None = None

    def answer(self, claim: ClaimRef) -> ClaimAnswer | None:
        """The per-claim answer for `claim`; None after a whole-call error or when the driver left it out."""
        return None if self.result is None else self.result.claims.get(claim.uid)

    def prepared(self, claim: ClaimRef) -> bool:
        """Whether the driver reported `claim` prepared: no whole-call error, an answer, and no error in it."""
        answer = self.answer(claim)
        return answer is not None and not answer.error

    def keys(self) -> set[str]:
        """The claim UIDs the response names (empty after a whole-call error)."""
        return set() if self.result is None else set(self.result.claims)

    def describe(self) -> str:
        """One line for failure messages."""
        if self.error is not None:
            return f"whole-call error {self.error.code().name}: {self.error.details()}"
        return str(self.result.claims if self.result else None)


class KubeletRole:
    """Does what the kubelet would do on a real node: prepare claims before a pod starts, unprepare them after.

    Each call is an Allure step named for that role. Claims still prepared when the test ends are unprepared.
    """

    def __init__(
        self, open_client: Callable[[DriverEndpoint], DriverClient], latencies: LatencyLog, api_client: client.ApiClient
    ) -> None:
        """Reach drivers through `open_client`; record every call's latency."""
        self.open_client = open_client
        self.latencies = latencies
        self.api_client = api_client
        self.prepared: dict[tuple[DriverEndpoint, str], ClaimRef] = {}

    def prepare(self, endpoint: DriverEndpoint, claims: list[ClaimRef], **options: Any) -> CallResult:
        """NodePrepareResources on `endpoint` for `claims`."""
        # Remembered before the call: a prepare that failed or timed out may still complete in the driver, and a
        # kubelet would unprepare such claims when the pod goes away.
        for claim in claims:
            self.prepared[(endpoint, claim.uid)] = claim
        with allure.step(f"kubelet on {endpoint.node}: NodePrepareResources {[c.name for c in claims]}"):
            return self.latencies.record("NodePrepareResources", self.open_client(endpoint).prepare(claims, **options))

    def prepare_outcome(self, endpoint: DriverEndpoint, claims: list[ClaimRef], **options: Any) -> CallOutcome:
        """NodePrepareResources, with a whole-call error returned instead of raised."""
        try:
            return CallOutcome(self.prepare(endpoint, claims, **options))
        except grpc.RpcError as error:
            return CallOutcome(None, error)

    def unprepare(self, endpoint: DriverEndpoint, claims: list[ClaimRef], **options: Any) -> CallResult:
        """NodeUnprepareResources on `endpoint` for `claims`."""
        with allure.step(f"kubelet on {endpoint.node}: NodeUnprepareResources {[c.name for c in claims]}"):
            result = self.latencies.record(
                "NodeUnprepareResources", self.open_client(endpoint).unprepare(claims, **options)
            )
        for claim in claims:
            answer = result.claims.get(claim.uid)
            if answer is not None and not answer.error:
                self.prepared.pop((endpoint, claim.uid), None)
        return result

    def start_containers(self, namespace: str, pod: str) -> None:
        """Start the pod's containers, as the kubelet does after a successful prepare.

        On fake nodes that means setting the annotation kwok waits for before it marks the pod Ready.
        """
        with allure.step(f"kubelet: start containers of {namespace}/{pod}"):
            client.CoreV1Api(self.api_client).patch_namespaced_pod(
                pod, namespace, {"metadata": {"annotations": {PREPARED_ANNOTATION: "true"}}}
            )

    def unprepare_leftovers(self) -> list[str]:
        """Unprepare what the test left prepared; returns the failures."""
        failures = []
        for (endpoint, uid), claim in list(self.prepared.items()):
            try:
                answer = self.unprepare(endpoint, [claim]).claims.get(uid)
            except grpc.RpcError as error:
                failures.append(f"{claim.namespace}/{claim.name} on {endpoint.node}: {error}")
                continue
            if answer is None or answer.error:
                failures.append(f"{claim.namespace}/{claim.name} on {endpoint.node}: {answer}")
        return failures
