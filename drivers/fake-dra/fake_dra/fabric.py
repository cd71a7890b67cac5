"""The `gpu-fabric` device profile: fabric-attached GPUs that the scheduler binds a pod to only once attached.

Each device carries `bindingConditions` ([`attached`]), `bindingFailureConditions` ([`attach-failed`]) and
`bindsToNode: true`. The scheduler's PreBind waits until every binding condition is True in the claim's
`status.devices` entry for the device, and clears the allocation when a failure condition is True (or the binding
timeout passes).

The attach controller is the driver's controller side: it runs under an identity of its own (not the kubelet
plugin's node-bound one, `--controller-kubeconfig`), watches claims allocated devices of this driver that carry
binding conditions, "attaches" each device (waits `--attach-delay`), records when the attach finished, and only then
writes `attached=True`. The `attach-failure` fault makes it write `attach-failed=True` instead.
"""

from __future__ import annotations

import datetime
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from fake_dra.broken import BrokenMode
from fake_dra.config import DriverConfig
from fake_dra.faults import FaultSet
from fake_dra.kube import API_VERSION, REQUEST_TIMEOUT, drain

Manifest = dict[str, Any]
PROFILE = "gpu-fabric"
BINDING_CONDITION = "attached"
FAILURE_CONDITION = "attach-failed"
# The controller's connections to the API server: its watch plus the attaches in flight at once.
CONTROLLER_CONNECTIONS = 4
# A watch is reopened after this long (the API server ends long watches anyway), so a lost connection heals.
WATCH_SECONDS = 60
# Pause before reopening a watch that failed (API server restarting): no tight loop against a dead server.
WATCH_RETRY_PAUSE = 1.0


def device(config: DriverConfig, index: int) -> Manifest:
    """Fabric GPU `index`: the gpu profile's attributes, usable only once the controller attached it."""
    return {
        "name": f"{PROFILE}-{index}",
        "attributes": {
            "model": {"string": "FakeGPU-9000"},
            "index": {"int": index},
            "uuid": {"string": f"{PROFILE}-{config.node_name}-{index}"},
            "driverVersion": {"version": config.driver_version},
            "fabric": {"string": "fake-fabric"},
        },
        "capacity": {"memory": {"value": "16Gi"}},
        "bindsToNode": True,
        "bindingConditions": [BINDING_CONDITION],
        "bindingFailureConditions": [FAILURE_CONDITION],
    }


@dataclass(frozen=True)
class Attachment:
    """One attach of a device for a claim's allocation, as the controller did it (times: Unix seconds)."""

    claim: str
    namespace: str
    name: str
    device: str
    # "attached" or "failed" (the attach-failure fault).
    outcome: str
    started_at: float
    # When the attach step itself finished (the device is usable from then on).
    finished_at: float
    # When the condition (binding or failure) was written.
    condition_written_at: float


class AttachLog:
    """Every attach the controller did, oldest first; read through the control socket (GET /attachments)."""

    def __init__(self) -> None:
        """Start empty."""
        self._lock = threading.Lock()
        self._attachments: list[Attachment] = []

    def record(self, attachment: Attachment) -> None:
        """Add one attach."""
        with self._lock:
            self._attachments.append(attachment)

    def to_json(self) -> list[dict[str, Any]]:
        """Copies, as JSON (camelCase keys)."""
        with self._lock:
            entries = list(self._attachments)
        return [
            {
                "claim": a.claim,
                "namespace": a.namespace,
                "name": a.name,
                "device": a.device,
                "outcome": a.outcome,
                "startedAt": a.started_at,
                "finishedAt": a.finished_at,
                "conditionWrittenAt": a.condition_written_at,
            }
            for a in entries
        ]

    def __len__(self) -> int:
        """How many attaches were recorded."""
        with self._lock:
            return len(self._attachments)


def condition(kind: str, reason: str, message: str) -> dict[str, str]:
    """A True condition of `kind`, as of now."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now}


def pending_devices(claim: Manifest, driver: str) -> list[dict[str, Any]]:
    """Results of `driver` with binding conditions whose status entry has neither a binding nor a failure condition.

    Those are the devices still to attach: an entry with a condition was handled (or a later allocation has new,
    empty entries: the scheduler clears status.devices when it deallocates).
    """
    status = claim.get("status") or {}
    allocation = status.get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    entries = {(e.get("driver"), e.get("pool"), e.get("device")): e for e in status.get("devices") or []}
    pending = []
    for result in results:
        if result.get("driver") != driver or not result.get("bindingConditions"):
            continue
        entry = entries.get((driver, result.get("pool"), result.get("device"))) or {}
        written = {c.get("type") for c in entry.get("conditions") or []}
        watched = set(result["bindingConditions"]) | set(result.get("bindingFailureConditions") or [])
        if not written & watched:
            pending.append(result)
    return pending


class AttachController:
    """Watches this driver's claims with binding conditions and attaches their devices, one thread per attach."""

    def __init__(self, config: DriverConfig, api: client.ApiClient, faults: FaultSet, attachments: AttachLog) -> None:
        """Attach for `config.driver_name`, writing through `api` (the controller's own identity)."""
        self.config, self.faults, self.attachments = config, faults, attachments
        self.resource = client.ResourceV1Api(api)
        self.field_manager = f"{config.driver_name}/attach-controller"
        # (claim uid, device) -> allocation timestamp of the attach in flight or done, so an allocation is attached
        # once even though its claim changes several times before the condition lands.
        self._handled: dict[tuple[str, str], str] = {}
        # Per claim UID: the allocation (timestamp) and the status.devices entries this controller wrote for it, by
        # (pool, device); and the lock that keeps the claim's applies in order.
        self._entries: dict[str, tuple[str, dict[tuple[str, str], Manifest]]] = {}
        self._claim_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def start(self) -> threading.Thread:
        """Run the watch loop in a daemon thread."""
        thread = threading.Thread(target=self._run, name="attach-controller", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """End the watch loop at its next event or reconnect."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch_once()
            except Exception as error:  # a controller outlives any one bad watch or event
                print(f"fake-dra attach controller: watch claims: {type(error).__name__}: {error}", flush=True)
                self._stop.wait(WATCH_RETRY_PAUSE)

    def _watch_once(self) -> None:
        listed = self.resource.list_resource_claim_for_all_namespaces(
            _preload_content=False, _request_timeout=REQUEST_TIMEOUT
        )
        body = json.loads(drain(listed))
        for item in body.get("items") or []:
            self.observe(item)
        # A raw watch of plain JSON lines: the client's Watch looks up model classes the client does not have for
        # resource.k8s.io/v1 claims, and its models would drop the binding fields anyway.
        response = self.resource.list_resource_claim_for_all_namespaces(
            watch=True,
            resource_version=body["metadata"]["resourceVersion"],
            timeout_seconds=WATCH_SECONDS,
            _preload_content=False,
            _request_timeout=(REQUEST_TIMEOUT, WATCH_SECONDS + REQUEST_TIMEOUT),
        )
        try:
            for line in iter_resp_lines(response):
                if self._stop.is_set():
                    return
                event = json.loads(line)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self.observe(event["object"])
        finally:
            response.release_conn()

    def observe(self, claim: Manifest) -> None:
        """Start an attach for every device of the claim still waiting for one."""
        meta = claim["metadata"]
        allocation = (claim.get("status") or {}).get("allocation") or {}
        if not allocation:
            # Deallocated (a failed binding, a deleted pod): a later allocation is attached anew, even within the
            # same second as this one (allocation timestamps have whole seconds).
            with self._lock:
                self._handled = {key: value for key, value in self._handled.items() if key[0] != meta["uid"]}
            return
        stamp = str(allocation.get("allocationTimestamp") or meta.get("resourceVersion"))
        for result in pending_devices(claim, self.config.driver_name):
            key = (meta["uid"], result["device"])
            with self._lock:
                if self._handled.get(key) == stamp:
                    continue
                self._handled[key] = stamp
            threading.Thread(
                target=self._attach, args=(claim, result), name=f"attach-{result['device']}", daemon=True
            ).start()

    def _attach(self, claim: Manifest, result: dict[str, Any]) -> None:
        meta = claim["metadata"]
        started = time.time()
        failure = self.faults.find("attach-failure", claim=meta["uid"], devices=[result["device"]])
        early = self.config.is_broken(BrokenMode.BINDING_CONDITIONS_BEFORE_ATTACH) and failure is None
        written = 0.0
        if early:  # the bug: the device is announced attached before the attach step ran
            written = self._write(claim, result, condition(BINDING_CONDITION, "Attached", "attached to the node"))
        time.sleep(self.config.attach_delay)  # the attach itself: the fabric takes this long
        finished = time.time()
        if failure is not None:
            written = self._write(
                claim,
                result,
                condition(FAILURE_CONDITION, "AttachFailed", f"attach failed (injected): {failure.message}"),
            )
        elif not early:
            written = self._write(claim, result, condition(BINDING_CONDITION, "Attached", "attached to the node"))
        self.attachments.record(
            Attachment(
                claim=meta["uid"],
                namespace=meta["namespace"],
                name=meta["name"],
                device=result["device"],
                outcome="failed" if failure is not None else "attached",
                started_at=started,
                finished_at=finished,
                condition_written_at=written,
            )
        )

    def _write(self, claim: Manifest, result: dict[str, Any], written: dict[str, str]) -> float:
        """Server-side apply of one device's condition; when it landed (0 if refused).

        An apply states every field its manager owns: one that named only this device would take the manager's
        other entries of the claim away (the API server deletes them). So each apply carries every entry this
        controller wrote for the claim's current allocation, and applies of one claim go one at a time, so that an
        older, shorter one cannot land last.
        """
        meta = claim["metadata"]
        with self._lock:
            claim_lock = self._claim_locks.setdefault(meta["uid"], threading.Lock())
        allocation = (claim.get("status") or {}).get("allocation") or {}
        stamp = str(allocation.get("allocationTimestamp") or meta.get("resourceVersion"))
        with claim_lock:
            if self._entries.get(meta["uid"], (None, {}))[0] != stamp:
                self._entries[meta["uid"]] = (stamp, {})  # a new allocation: the old entries went with the old one
            entries = self._entries[meta["uid"]][1]
            entries[(result["pool"], result["device"])] = {
                "driver": result["driver"],
                "pool": result["pool"],
                "device": result["device"],
                "conditions": [written],
            }
            return self._apply(meta, list(entries.values()), written["type"])

    def _apply(self, meta: Manifest, entries: list[Manifest], what: str) -> float:
        body = {
            "apiVersion": API_VERSION,
            "kind": "ResourceClaim",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "status": {"devices": entries},
        }
        try:
            response = self.resource.patch_namespaced_resource_claim_status(
                meta["name"],
                meta["namespace"],
                body,
                field_manager=self.field_manager,
                force=True,
                _content_type="application/apply-patch+yaml",
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
            drain(response)
        except ApiException as error:
            # A claim deallocated or deleted meanwhile: nothing left to attach for.
            print(f"fake-dra attach controller: write {what} for {meta['name']}: {error.status}", flush=True)
            return 0.0
        return time.time()
