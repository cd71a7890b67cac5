"""Binding conditions: where the checks run, who may write the conditions, and how far a claim's binding got.

A device with `bindingConditions` makes the scheduler wait in PreBind until every one of them is True in the
claim's `status.devices` entry for the device; a True `bindingFailureConditions` entry (or the binding timeout) makes
it clear the allocation and try again. The driver's side writes those conditions, usually from a controller that
runs under an identity of its own (the profile's `identity.controller`).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from dra_conformance.driver.profile import DriverProfile
from dra_conformance.driver.reference import FakeDriverControl
from dra_conformance.kube import builders, kubeconfig
from dra_conformance.kube.audit_log import events as audit_log_events
from dra_conformance.kube.builders import Builder, Manifest
from dra_conformance.kube.identities import request_token
from dra_conformance.kube.tracker import ResourceTracker


@dataclass(frozen=True)
class BindingTarget:
    """Devices with binding conditions of the driver under test, on one node only this test uses."""

    driver: str
    node: str
    builder: Builder
    # The user the API server knows the identity by that the profile names to write the conditions.
    writer: str
    tolerations: tuple[Manifest, ...] = ()
    # The reference driver's control socket (attach records, faults); None for a driver we did not write.
    control: FakeDriverControl | None = None
    # Claim every device of the node (a driver we did not write: only some of its devices may carry binding
    # conditions, and a claim cannot name one); False: one device.
    all_devices: bool = False


@dataclass(frozen=True)
class DeviceBinding:
    """How far one allocated device with binding conditions got, from the claim's status."""

    device: str
    # Binding conditions not (yet) True.
    pending: tuple[str, ...]
    # Binding failure conditions that are True.
    failed: tuple[str, ...]
    # lastTransitionTime of each binding condition that is True.
    true_since: dict[str, str]

    @property
    def ready(self) -> bool:
        """Every binding condition True and no failure condition True: the scheduler may bind."""
        return not self.pending and not self.failed


def device_bindings(claim: dict[str, Any], driver: str) -> list[DeviceBinding]:
    """Every device of `driver` in the claim's allocation that carries binding conditions, with its progress."""
    status = claim.get("status") or {}
    results = (((status.get("allocation") or {}).get("devices") or {}).get("results")) or []
    entries = {(e.get("driver"), e.get("pool"), e.get("device")): e for e in status.get("devices") or []}
    bindings = []
    for result in results:
        if result.get("driver") != driver or not result.get("bindingConditions"):
            continue
        entry = entries.get((driver, result.get("pool"), result.get("device"))) or {}
        true = {c["type"]: c for c in entry.get("conditions") or [] if c.get("status") == "True"}
        bindings.append(
            DeviceBinding(
                device=str(result["device"]),
                pending=tuple(c for c in result["bindingConditions"] if c not in true),
                failed=tuple(c for c in result.get("bindingFailureConditions") or [] if c in true),
                true_since={
                    c: str(true[c].get("lastTransitionTime", "")) for c in result["bindingConditions"] if c in true
                },
            )
        )
    return bindings


def parse_time(stamp: str) -> float:
    """An RFC 3339 time of the API (`2026-12-02T03:11:36Z`) as Unix seconds."""
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def controller_cluster_role(rbac_files: tuple[Path, ...]) -> Callable[[str, str], Manifest]:
    """The ClusterRole of the profile's controller RBAC, renamed, its status rule for another driver name."""

    def build(name: str, driver: str) -> Manifest:
        documents = [doc for path in rbac_files for doc in yaml.safe_load_all(path.read_text()) if doc]
        role = next(doc for doc in documents if doc["kind"] == "ClusterRole")
        for rule in role["rules"]:
            if "resourceclaims/driver" in rule.get("resources", []):
                rule["resourceNames"] = [driver]
        return {**role, "metadata": {"name": name}}

    return build


class ControllerIdentity:
    """A controller identity in the test namespace with the profile's controller RBAC; its token is not node-bound.

    The ServiceAccount comes first (a token for the controller's kubeconfig); `grant` adds the RBAC once the driver
    name is known.
    """

    def __init__(
        self,
        tracker: ResourceTracker,
        api_client: client.ApiClient,
        namespace: str,
        service_account: str = "attach-controller",
    ) -> None:
        """Create the ServiceAccount (tracked for cleanup)."""
        self.tracker, self.api_client = tracker, api_client
        self.namespace, self.service_account = namespace, service_account
        tracker.create(builders.service_account(service_account, namespace))

    def grant(self, profile: DriverProfile, driver: str) -> None:
        """Bind the profile's controller ClusterRole, for `driver`, to this identity (tracked for cleanup)."""
        controller = profile.identity.controller
        if controller is None or not controller.rbac:
            raise ValueError(f"profile {profile.source.name} names no controller RBAC (identity.controller.rbac)")
        role_name = f"{self.namespace}-{self.service_account}"
        self.tracker.create(controller_cluster_role(controller.rbac)(role_name, driver))
        self.tracker.create(builders.cluster_role_binding(role_name, self.namespace, self.service_account))

    @property
    def username(self) -> str:
        """The name the API server knows its tokens by (audit log, authorization)."""
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"

    def kubeconfig(self, directory: Path) -> Path:
        """A kubeconfig with a token of this identity that carries no node (the controller is no node's)."""
        token = request_token(self.api_client, self.namespace, self.service_account)
        return kubeconfig.write(
            directory / f"{self.service_account}.kubeconfig",
            kubeconfig.render(
                str(self.api_client.configuration.host),
                Path(self.api_client.configuration.ssl_ca_cert).read_bytes(),
                user=self.service_account,
                token=token,
            ),
        )


def named_writer(profile: DriverProfile) -> str:
    """The user the profile names to write binding conditions: its controller's, else the kubelet plugin's."""
    account = profile.identity.controller.service_account if profile.identity.controller else None
    return (account or profile.identity.service_account).username


# A watch's own deadline is the API server's (timeoutSeconds); the connection gets this much longer before the client
# gives up on it.
WATCH_GRACE = 10.0

# Identities of the control plane, whose status writes (allocation, reservedFor, deallocation) are not the driver's.
CONTROL_PLANE_WRITERS = ("system:kube-scheduler", "system:serviceaccount:kube-system:")


def claim_status_writers(audit_log: Path, namespace: str, claim: str) -> dict[str, list[str]]:
    """Who wrote the claim's status, from the audit log: user -> ["<verb> -> <code>", ...], control plane left out."""
    writers: dict[str, list[str]] = {}
    for event in audit_log_events(audit_log, containing=f'"name":"{claim}"'):
        reference = event.get("objectRef") or {}
        user = str((event.get("user") or {}).get("username", "?"))
        if (
            event.get("stage") == "ResponseComplete"
            and reference.get("resource") == "resourceclaims"
            and reference.get("subresource") == "status"
            and reference.get("namespace") == namespace
            and reference.get("name") == claim
            and event.get("verb") in ("update", "patch")
            and not user.startswith(CONTROL_PLANE_WRITERS)
        ):
            code = (event.get("responseStatus") or {}).get("code", "?")
            writers.setdefault(user, []).append(f"{event['verb']} -> {code}")
    return writers


def claim_changes(
    api_client: client.ApiClient, namespace: str, name: str, resource_version: str, timeout: float
) -> Iterator[dict[str, Any]]:
    """Every state of one claim after `resource_version`, as the API server changes it, for up to `timeout` seconds.

    A raw watch of JSON lines: the Python client's Watch looks up model classes it does not have for
    resource.k8s.io/v1 claims.
    """
    response = client.ResourceV1Api(api_client).list_namespaced_resource_claim(
        namespace,
        field_selector=f"metadata.name={name}",
        watch=True,
        resource_version=resource_version,
        timeout_seconds=max(1, round(timeout)),
        _preload_content=False,
        _request_timeout=timeout + WATCH_GRACE,
    )
    try:
        for line in iter_resp_lines(response):
            event = json.loads(line)
            if event.get("type") in ("ADDED", "MODIFIED"):
                yield event["object"]
    finally:
        response.release_conn()
