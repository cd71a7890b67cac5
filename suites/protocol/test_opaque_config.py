"""Opaque configuration as the driver reads it at prepare: which config applies to which device, and a bad one.

A DeviceClass and a ResourceClaim may each carry `config[].opaque` for a driver; the scheduler copies both into the
claim's allocation result (`source: FromClass` or `FromClaim`, `requests` they apply to), and the driver applies
them when it prepares the claim. The profile declares the driver's config API (`opaqueConfig`): two parameters
objects that set the same setting to other values, each with its observable effect on a prepared device (an
environment entry in the device's CDI container edits, keys in its status.devices data), and optionally one the
driver cannot decode. The checks pass them as class config, claim config, both, and per request, and read from the
effects which one each reported device got. No section: not applicable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from dra_conformance.driver.profile import ConfigEffect, OpaqueConfigAPI
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API, Builder
from dra_conformance.kube.claims import device_statuses
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim, allocate
from dra_conformance.kubelet.client import ClaimAnswer
from dra_conformance.kubelet.obligations import check_prepare_answer, check_unprepare
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

from .cdi_specs import read_specs

pytestmark = pytest.mark.usefixtures("driver_sockets")

# The requests of the per-request check's claim, one device each.
REQUESTS = ("first", "second")
# The subrequest of the first request in the subrequest check.
SUBREQUEST = "any"
# Devices per node these checks may take at once: two (a claim of two requests, or two claims in one call); half of
# the node stays free for the checks of the other xdist worker.
DEVICES_AT_ONCE = 2
# How the API server answers a create that an admission webhook or policy refused: forbidden, invalid.
ADMISSION_REFUSALS = (403, 422)


@dataclass(frozen=True)
class Seen:
    """What one reported device shows of the declared effects: None for an effect the run does not observe."""

    pool: str
    device: str
    # The values of the samples' CDI environment variable in the container edits of the device's CDI devices.
    env: tuple[str, ...] | None
    # The device's status.devices data, for the keys the samples' statusData names.
    data: Mapping[str, Any] | None

    def shows(self, effect: ConfigEffect) -> bool:
        """Whether the device carries `effect`, in everything observed."""
        env_ok = self.env is None or effect.cdi_env is None or self.env == (effect.cdi_env[1],)
        data_ok = self.data is None or all(self.data.get(key) == value for key, value in effect.status_data.items())
        return env_ok and data_ok

    def __str__(self) -> str:
        parts = []
        if self.env is not None:
            parts.append(f"CDI env values {list(self.env)}")
        if self.data is not None:
            parts.append(f"status data {dict(self.data)}")
        return f"{self.pool}/{self.device}: {', '.join(parts)}"


@dataclass
class ConfigChecks:
    """What the checks of this module share: the driver's config API, where to observe, and the cluster objects."""

    api: OpaqueConfigAPI
    driver: DriverUnderTest
    tracker: ResourceTracker
    build: Builder
    api_client: client.ApiClient
    timeouts: Timeouts
    kubelet: KubeletRole
    obligations: Obligations

    def opaque(self, parameters: Mapping[str, Any], requests: tuple[str, ...] = ()) -> dict[str, Any]:
        """A config[] entry of this driver with `parameters`, for `requests` (a claim's; none: every request)."""
        entry: dict[str, Any] = {"opaque": {"driver": self.driver.name, "parameters": dict(parameters)}}
        return {**entry, "requests": list(requests)} if requests else entry

    def device_class(self, *parameters: Mapping[str, Any]) -> str:
        """A DeviceClass selecting the driver, with a config entry for each of `parameters`."""
        manifest = self.build.device_class()
        if parameters:
            manifest["spec"]["config"] = [self.opaque(p) for p in parameters]
        return str(self.tracker.create(manifest, compact=True)["metadata"]["name"])

    def allocate(
        self, requests: list[dict[str, Any]], config: list[dict[str, Any]], node: str | None = None
    ) -> AllocatedClaim:
        """A claim of `requests` (`_exactly`, `_first_available`) carrying `config`, allocated by the scheduler."""
        spec: dict[str, Any] = {"devices": {"requests": requests, **({"config": config} if config else {})}}
        return allocate(
            self.tracker,
            self.build,
            self.api_client,
            "",  # the spec names the classes
            timeout=self.timeouts.pod_scheduled,
            node=node,
            spec=spec,
            compact=True,  # the API server's status writes fail on parameters sent with spaces (tracker.create)
        )

    def endpoint(self, claim: AllocatedClaim) -> DriverEndpoint:
        """The driver's endpoint on the claim's node."""
        return self.driver.endpoints[claim.node]

    def prepare(self, claim: AllocatedClaim, call: str) -> ClaimAnswer:
        """Prepare one claim as the kubelet does; the answer, checked like every prepare answer."""
        outcome = self.kubelet.prepare_outcome(self.endpoint(claim), [claim.ref])
        return check_prepare_answer(self.obligations, claim, self.driver.name, outcome, call)

    def unprepare(self, claim: AllocatedClaim) -> None:
        """Unprepare one claim; it must succeed."""
        endpoint = self.endpoint(claim)
        check_unprepare(self.obligations, self.kubelet, endpoint, claim.ref, "protocol.unprepare-succeeds", "unprepare")

    def seen(self, claim: AllocatedClaim, answer: ClaimAnswer) -> list[Seen]:
        """What each reported device of `answer` shows of the declared effects (CDI where readable, status)."""
        effect = self.api.samples[0].effect  # both samples declare the same observations (the profile's check)
        cdi_dir = self.endpoint(claim).cdi_dir
        if effect.cdi_env is not None and cdi_dir is None and not effect.status_data:
            pytest.skip(
                f"not applicable: the profile declares the config's effect in CDI edits only, and the CDI dir of "
                f"{self.driver.name} on {claim.node} is not readable from here (only the local backend knows it)"
            )
        env: dict[tuple[str, str], tuple[str, ...]] = {}
        observe_env = effect.cdi_env is not None and cdi_dir is not None
        if effect.cdi_env is not None and cdi_dir is not None:
            name, defined = effect.cdi_env[0], read_specs(cdi_dir)
            for device in answer.devices:
                entries = [
                    str(entry)
                    for cdi in device["cdiDeviceIDs"]
                    if cdi in defined
                    for entry in defined[cdi].edits.get("env") or []
                ]
                values = sorted({e.split("=", 1)[1] for e in entries if "=" in e and e.split("=", 1)[0] == name})
                env[(device["poolName"], device["deviceName"])] = tuple(values)
        data = self._status_data(claim, answer, set(effect.status_data)) if effect.status_data else {}
        return [
            Seen(
                d["poolName"],
                d["deviceName"],
                env.get((d["poolName"], d["deviceName"]), ()) if observe_env else None,
                data.get((d["poolName"], d["deviceName"]), {}) if effect.status_data else None,
            )
            for d in answer.devices
        ]

    def _status_data(
        self, claim: AllocatedClaim, answer: ClaimAnswer, keys: set[str]
    ) -> dict[tuple[str, str], dict[str, Any]]:
        """Each reported device's status.devices data (the `keys`), once every one has them (or at the deadline)."""
        wanted = {(d["poolName"], d["deviceName"]) for d in answer.devices}
        meta = claim.claim["metadata"]

        def read() -> dict[tuple[str, str], dict[str, Any]]:
            entries = device_statuses(self.tracker.get(RESOURCE_API, "ResourceClaim", meta["name"], meta["namespace"]))
            return {
                (e["pool"], e["device"]): {k: v for k, v in (e.get("data") or {}).items() if k in keys}
                for e in entries
                if e["driver"] == self.driver.name
            }

        try:
            # The driver may write its status after it answered the prepare.
            return waits.until(
                read,
                lambda now: all(set(now.get(device, {})) >= keys for device in wanted),
                timeout=self.timeouts.status_written,
                what=f"status.devices data {sorted(keys)} of {claim.ref.name}'s devices {sorted(wanted)}",
                describe=str,
            )
        except WaitTimeout:
            return read()

    def check_applied(self, obligation: str, claim: AllocatedClaim, answer: ClaimAnswer, want: dict[str, int]) -> None:
        """`obligation`: each reported device shows the effect of the sample `want` names for its request."""
        # Reported devices are allocated ones (check_prepare_answer); a subrequest's device is its main request's.
        request_of = {
            (r["pool"], r["device"]): str(r["request"]).split("/", 1)[0]
            for r in claim.results
            if r["driver"] == self.driver.name
        }
        seen = self.seen(claim, answer)
        wrong = []
        for device in seen:
            request = request_of[(device.pool, device.device)]
            if not device.shows(self.api.samples[want[request]].effect):
                wrong.append(f"{device} (request {request}: want the effect of sample {want[request]})")
        effects = {index: sample.effect for index, sample in enumerate(self.api.samples)}
        configs = claim.claim["status"]["allocation"]["devices"].get("config") or []
        self.obligations.check(
            obligation,
            bool(seen) and not wrong,
            f"devices without the effect of their config: {wrong or 'no device reported'}; every device: "
            f"{[str(s) for s in seen]}; the samples' effects: {effects}",
            f"claim {claim.ref.name} on {claim.node}, allocation config (source, requests) "
            f"{[(c.get('source'), c.get('requests')) for c in configs]}",
        )


def _exactly(name: str, device_class: str) -> dict[str, Any]:
    """A request for one device of `device_class`."""
    return {"name": name, "exactly": {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": 1}}


def _first_available(name: str, subrequest: str, device_class: str) -> dict[str, Any]:
    """A request whose one subrequest asks for one device of `device_class` (the scheduler names it name/subrequest)."""
    sub = {"name": subrequest, "deviceClassName": device_class, "allocationMode": "ExactCount", "count": 1}
    return {"name": name, "firstAvailable": [sub]}


@pytest.fixture
def config_checks(
    held_nodes: None,
    driver_under_test: DriverUnderTest,
    tracker: ResourceTracker,
    build: Builder,
    api_client: client.ApiClient,
    timeouts: Timeouts,
    kubelet: KubeletRole,
    obligations: Obligations,
) -> ConfigChecks:
    """The driver's declared config API and what the checks use; not applicable without the profile's section."""
    api = driver_under_test.profile.opaque_config
    if api is None:
        pytest.skip(
            f"not applicable: the profile of {driver_under_test.name} declares no opaque config API (opaqueConfig)"
        )
    per_node = driver_under_test.profile.devices.per_node
    if per_node < 2 * DEVICES_AT_ONCE:
        pytest.skip(f"not applicable: {per_node} device(s) per node leave no room for {DEVICES_AT_ONCE} at once")
    return ConfigChecks(api, driver_under_test, tracker, build, api_client, timeouts, kubelet, obligations)


def test_a_device_class_config_applies_to_the_devices_claimed_through_the_class(config_checks: ConfigChecks) -> None:
    """Class config only: the first sample in the class, none in the claim; each device shows the first's effect."""
    checks = config_checks
    device_class = checks.device_class(checks.api.samples[0].parameters)
    claim = checks.allocate([_exactly("gpu", device_class)], [])
    answer = checks.prepare(claim, "prepare of a claim whose class carries a config")
    checks.check_applied("protocol.opaque-class-config-applies", claim, answer, {"gpu": 0})
    checks.unprepare(claim)


def test_a_claim_config_naming_no_request_applies_to_every_device_of_the_claim(config_checks: ConfigChecks) -> None:
    """Claim config only: the second sample for every request, a class without config."""
    checks = config_checks
    device_class = checks.device_class()
    claim = checks.allocate([_exactly("gpu", device_class)], [checks.opaque(checks.api.samples[1].parameters)])
    answer = checks.prepare(claim, "prepare of a claim carrying a config")
    checks.check_applied("protocol.opaque-claim-config-applies", claim, answer, {"gpu": 1})
    checks.unprepare(claim)


def test_a_claim_config_overrides_the_class_config_it_contradicts(config_checks: ConfigChecks) -> None:
    """Both: the first sample in the class, the second in the claim; each device shows the claim's (the second's)."""
    checks = config_checks
    device_class = checks.device_class(checks.api.samples[0].parameters)
    claim = checks.allocate([_exactly("gpu", device_class)], [checks.opaque(checks.api.samples[1].parameters)])
    answer = checks.prepare(claim, "prepare of a claim whose class and claim carry contradicting configs")
    checks.check_applied("protocol.opaque-claim-config-overrides-class-config", claim, answer, {"gpu": 1})
    checks.unprepare(claim)


def test_a_claim_config_naming_requests_applies_only_to_their_devices(config_checks: ConfigChecks) -> None:
    """Per request: a claim of two requests, the first sample for the first request, the second for the second."""
    checks = config_checks
    device_class = checks.device_class()
    first, second = REQUESTS
    config = [
        checks.opaque(checks.api.samples[0].parameters, (first,)),
        checks.opaque(checks.api.samples[1].parameters, (second,)),
    ]
    claim = checks.allocate([_exactly(name, device_class) for name in REQUESTS], config)
    answer = checks.prepare(claim, "prepare of a two-request claim with a config per request")
    checks.check_applied("protocol.opaque-config-applies-only-to-its-requests", claim, answer, {first: 0, second: 1})
    checks.unprepare(claim)


def test_a_claim_config_naming_a_subrequest_applies_only_to_its_device(config_checks: ConfigChecks) -> None:
    """Per subrequest: the first request's device comes from a subrequest (firstAvailable), configured by its name."""
    checks = config_checks
    device_class = checks.device_class()
    first, second = REQUESTS
    config = [
        checks.opaque(checks.api.samples[0].parameters, (f"{first}/{SUBREQUEST}",)),
        checks.opaque(checks.api.samples[1].parameters, (second,)),
    ]
    claim = checks.allocate([_first_available(first, SUBREQUEST, device_class), _exactly(second, device_class)], config)
    answer = checks.prepare(claim, "prepare of a claim with a config per request, one naming a subrequest")
    checks.check_applied("protocol.opaque-config-applies-only-to-its-requests", claim, answer, {first: 0, second: 1})
    checks.unprepare(claim)


def test_an_unparsable_config_fails_the_prepare_of_its_claim_only(config_checks: ConfigChecks) -> None:
    """Two claims on one node prepared in one call: one carries the unparsable sample, the other the first sample."""
    checks = config_checks
    if checks.api.unparsable is None:
        pytest.skip("not applicable: the profile's opaqueConfig declares no unparsable sample")
    node = next(iter(checks.driver.endpoints))
    device_class = checks.device_class()
    try:
        bad = checks.allocate([_exactly("gpu", device_class)], [checks.opaque(checks.api.unparsable)], node=node)
    except client.ApiException as refused:
        if refused.status not in ADMISSION_REFUSALS:
            raise
        pytest.skip(
            "not applicable: the cluster refused the claim carrying the unparsable config at creation (an admission "
            f"policy validates the driver's parameters): {refused.status} {refused.reason}"
        )
    good = checks.allocate(
        [_exactly("gpu", device_class)], [checks.opaque(checks.api.samples[0].parameters)], node=node
    )
    endpoint = checks.endpoint(good)
    outcome = checks.kubelet.prepare_outcome(endpoint, [bad.ref, good.ref])
    where = f"one NodePrepareResources call on {node} for {bad.ref.name} (unparsable config) and {good.ref.name}"
    checks.obligations.check(
        "protocol.unparsable-opaque-config-fails-its-claim",
        not outcome.prepared(bad.ref),
        f"{bad.ref.name} reported prepared with the config {dict(checks.api.unparsable)}: {outcome.describe()}",
        where,
    )
    checks.obligations.check(
        "protocol.unparsable-opaque-config-fails-only-its-claim",
        outcome.prepared(good.ref),
        f"{good.ref.name}, whose config is valid, not prepared: {outcome.describe()}",
        where,
    )
    answer = outcome.answer(good.ref)
    if answer is not None and not answer.error:  # else an advisory above, under contract strictness
        checks.check_applied("protocol.opaque-claim-config-applies", good, answer, {"gpu": 0})
        checks.unprepare(good)
    # The claim that failed is unprepared by the kubelet role at the end, as a kubelet does for a pod that goes.
