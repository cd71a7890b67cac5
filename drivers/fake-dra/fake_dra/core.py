"""What the driver does, independent of gRPC: prepare and unprepare claims, publish its pool, report health."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from fake_dra import cdi, devices, shared
from fake_dra.broken import (
    STATUS_REFRESH_DELAY,
    BrokenMode,
    index_as_string,
    legacy_node_name,
    next_device,
    product_vendor_id,
    rotated,
    split_with_repeated_device,
)
from fake_dra.config import DriverConfig
from fake_dra.fabric import AttachLog
from fake_dra.faults import CRASH_EXIT_CODE, SLICE_MODES, Fault, FaultSet
from fake_dra.held import Holder, Holds
from fake_dra.kube import DriverAPI, denial
from fake_dra.recorder import CallLog
from fake_dra.state import PreparedClaims

# Longest a hang fault blocks a call. A hang ignores the caller's deadline on purpose: the caller must notice.
HANG_LIMIT = 300.0
# A kubelet deletes every ResourceSlice of its node when it starts, in the background, around the time it registers
# the drivers it finds (k8s.io/kubernetes pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go, wipeResourceSlices);
# and a driver's after it stayed unregistered for 30 s. After each registration but the first, the driver checks
# its pool for this long and publishes it again if it went missing, as upstream's kubeletplugin helper does.
POOL_KEEP_WINDOW = 30.0
POOL_KEEP_INTERVAL = 1.0

# A claim looked up for prepare: why this node cannot prepare it ("" if it can), the claim, this driver's results.
Lookup = tuple[str, dict[str, Any], list[dict[str, Any]]]


@dataclass(frozen=True)
class ClaimRef:
    """A claim as the kubelet names it in a request."""

    namespace: str
    uid: str
    name: str


class ClaimRefused(Exception):
    """The whole NodePrepareResources call is refused (whole-call refusals): the message names each bad claim."""


@dataclass
class PrepareResult:
    """Per-claim answer: devices (request names, pool, device, CDI IDs) or an error."""

    devices: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""


class DriverCore:
    """One node's driver: claims, slice, health, faults and the call log."""

    def __init__(
        self, config: DriverConfig, api: DriverAPI, faults: FaultSet, calls: CallLog, prepared: PreparedClaims
    ) -> None:
        """Serve `config.node_name` for `config.driver_name`."""
        self.config = config
        self.api = api
        self.faults = faults
        self.calls = calls
        self.prepared = prepared
        self._claim_locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self._locks_guard = threading.Lock()
        self._health = threading.Condition()
        self._health_version = 0
        # Claims unprepared by this process (only the prepare-after-unprepare-fails mutant looks at them).
        self._unprepared: set[str] = set()
        # The claims being prepared and the devices they hold meanwhile (--refuse-devices-held-by-other-claims).
        self.holds = Holds(prepared, config.driver_name, config.node_name)
        # Attaches of the gpu-fabric profile's controller (fabric.py), shown on the control socket.
        self.attachments = AttachLog()
        self.generation = self._next_generation()
        self._registrations = 0
        # This process's publishes of the pool (REPUBLISH_CHANGES_ATTRIBUTE_TYPE changes the second and later ones).
        self._publishes = 0
        self._pool_keeper_stop = threading.Event()

    # --- pool and health ----------------------------------------------------------------------------------------

    def _next_generation(self) -> int:
        # A restart must publish a newer pool generation than any earlier run, even if its slices were deleted: newer
        # than every slice of the pool still published (whatever their names) and than the one stored on disk.
        stored_path = self.config.state_dir / "generation"
        stored = int(stored_path.read_text()) if stored_path.exists() else 0
        existing = self.api.list_slices(self.config.node_name)
        published = max((int(item["spec"]["pool"]["generation"]) for item in existing), default=0)
        generation = max(stored, published) + 1
        stored_path.write_text(str(generation))
        return generation

    def publish(self) -> None:
        """Publish the node's pool as the active faults say it should look: every slice at the current generation."""
        pool = self._pool(self.config)
        self._publishes += 1
        if self.config.is_broken(BrokenMode.REPUBLISH_CHANGES_ATTRIBUTE_TYPE) and self._publishes > 1:
            pool = index_as_string(pool)  # the bug: a rescan reads the index back as a string
        if self.config.is_broken(BrokenMode.DUPLICATE_DEVICE_NAMES):
            pool = split_with_repeated_device(pool)
        delete_first = self.config.is_broken(BrokenMode.REPUBLISH_LEAVES_INCOMPLETE_POOL)
        self.api.publish_pool(self.config.node_name, pool, delete_first=delete_first)
        if self.config.is_broken(BrokenMode.PUBLISHES_FOR_WRONG_NODE):
            legacy = dataclasses.replace(self.config, node_name=legacy_node_name(self.config.node_name))
            self.api.publish_pool(legacy.node_name, self._pool(legacy))

    def registered(self) -> None:
        """A kubelet registered this driver: from the second time on (a kubelet restart), keep the pool published."""
        self._registrations += 1
        if self._registrations > 1:
            threading.Thread(target=self._keep_pool, name="pool-keeper", daemon=True).start()

    def _keep_pool(self) -> None:
        deadline = time.monotonic() + POOL_KEEP_WINDOW
        while time.monotonic() < deadline and not self._pool_keeper_stop.is_set():
            try:
                if len(self.api.list_slices(self.config.node_name)) < len(self._pool(self.config)):
                    self.publish()
            except ApiException:
                pass  # the next round tries again; the kubelet may be restarting its node's credentials
            self._pool_keeper_stop.wait(POOL_KEEP_INTERVAL)

    def stop_keeping_pool(self) -> None:
        """End the pool keeper (at shutdown, before the pool is deleted on exit)."""
        self._pool_keeper_stop.set()

    def _pool(self, config: DriverConfig) -> list[dict[str, Any]]:
        return devices.resource_slices(
            config,
            self.generation,
            unavailable=self.faults.unavailable_devices(devices.device_names(config)),
            published=self.faults.published_devices(config.devices),
            informational=self.faults.informational_devices(devices.device_names(config)),
        )

    def set_faults(self, faults: list[Fault]) -> None:
        """Replace the active faults; republish the slice (new generation) and the health stream if they changed."""
        before = [f for f in self.faults.active() if f.mode in SLICE_MODES]
        self.faults.replace(faults)
        if any(f.mode == "crash" for f in faults):
            os._exit(CRASH_EXIT_CODE)
        if before != [f for f in faults if f.mode in SLICE_MODES]:
            if not self.config.is_broken(BrokenMode.REPUBLISHES_SAME_GENERATION):
                self.generation += 1
                (self.config.state_dir / "generation").write_text(str(self.generation))
            self.publish()
            with self._health:
                self._health_version += 1
                self._health.notify_all()

    def health(self) -> list[tuple[str, bool, str]]:
        """(device, healthy, message) for every device."""
        unavailable = self.faults.unavailable_devices(devices.device_names(self.config))
        if self.config.is_broken(BrokenMode.HEALTHY_WHILE_FAILING):
            unavailable = set()  # the bug: its health check never looks at the device's state
        return [
            (name, name not in unavailable, "unavailable (injected)" if name in unavailable else "ok")
            for name in devices.device_names(self.config)
        ]

    def health_pool(self) -> str:
        """The pool health reports name: the one the driver publishes (the HEALTH_WRONG_POOL mutant names another)."""
        if self.config.is_broken(BrokenMode.HEALTH_WRONG_POOL):
            return self.config.driver_name  # the bug: the pool named after the driver, not the node
        return self.config.node_name

    def wait_health_change(self, seen: int, timeout: float) -> int:
        """Block until the health version differs from `seen` (or `timeout`); return the current version."""
        with self._health:
            self._health.wait_for(lambda: self._health_version != seen, timeout=timeout)
            return self._health_version

    # --- prepare / unprepare ------------------------------------------------------------------------------------

    def _lock(self, uid: str) -> threading.Lock:
        with self._locks_guard:
            return self._claim_locks[uid]

    def _fault_delay(self, phase: str, uid: str) -> str:
        """Apply slow/hang faults of `phase` (prepare/unprepare) for one claim; an error if a hang hit its limit."""
        slow = self.faults.find(f"slow-{phase}", claim=uid)
        if slow is not None:
            time.sleep(slow.delay)  # the injected slowness itself
        if self.faults.find(f"hang-{phase}", claim=uid) is not None:
            if not self.faults.wait_cleared(f"hang-{phase}", claim=uid, timeout=HANG_LIMIT):
                return f"{phase} hung (injected) for {HANG_LIMIT:g}s"
        return ""

    def prepare(self, claims: list[ClaimRef]) -> dict[str, PrepareResult]:
        """NodePrepareResources: prepare each claim; failures are reported per claim.

        With whole-call refusals, every claim is looked up first, and one that this node cannot prepare raises
        ClaimRefused before any claim is prepared (the upstream helper reads all claims before preparing any).
        """
        started = time.time()
        lookups: dict[str, Lookup] = {}
        if self.config.whole_call_refusal:
            lookups = {claim.uid: self._lookup(claim) for claim in claims}
            refused = {uid: lookup[0] for uid, lookup in lookups.items() if lookup[0]}
            if refused:
                self.calls.record(
                    "NodePrepareResources",
                    started,
                    claims=[c.uid for c in claims],
                    outcome=f"refused whole call ({len(refused)} of {len(claims)} claims)",
                    errors=refused,
                )
                raise ClaimRefused("; ".join(refused.values()))
        results = {claim.uid: self._prepare_one(claim, lookups.get(claim.uid)) for claim in claims}
        if self.config.is_broken(BrokenMode.BATCH_ANSWERS_SWAPPED):
            results = rotated(results)  # the bug: the answers paired with the claim UIDs in another order
        self.calls.record(
            "NodePrepareResources",
            started,
            claims=[c.uid for c in claims],
            outcome=_outcome({uid: r.error for uid, r in results.items()}),
            errors={uid: r.error for uid, r in results.items() if r.error},
        )
        return results

    def _prepare_one(self, ref: ClaimRef, lookup: Lookup | None = None) -> PrepareResult:
        with self._lock(ref.uid), contextlib.ExitStack() as hold:
            if self.config.is_broken(BrokenMode.READY_BEFORE_PREPARED) and self.prepared.get(ref.uid) is None:
                self._announce_ready(ref)  # the bug: Ready=True before any of the node-local work
            delayed = self._fault_delay("prepare", ref.uid)
            if delayed:
                return PrepareResult(error=delayed)
            injected = self.faults.find("prepare-error", claim=ref.uid)
            if injected is not None:
                return PrepareResult(error=f"prepare failed (injected): {injected.message}")
            known = self.prepared.get(ref.uid)
            if known is not None:
                if self.config.is_broken(BrokenMode.NON_IDEMPOTENT_PREPARE):
                    return PrepareResult(error=f"claim {ref.uid} is already prepared")
                if self.config.is_broken(BrokenMode.REPLAYED_PREPARE_SKIPS_CDI_SPECS) or not self._specs_lost(
                    ref.uid, known["devices"]
                ):
                    return PrepareResult(devices=known["devices"])  # idempotent per claim UID
                return self._rewrite_lost_specs(ref, lookup, known["devices"])
            if ref.uid in self._unprepared and self.config.is_broken(BrokenMode.PREPARE_AFTER_UNPREPARE_FAILS):
                return PrepareResult(error=f"claim {ref.uid} was unprepared; it cannot be prepared again")
            problem, claim, mine = lookup or self._lookup(ref)
            if problem and not claim and self.config.is_broken(BrokenMode.REPORTS_UNKNOWN_CLAIM_PREPARED):
                return PrepareResult()  # the bug: a claim it cannot read is "prepared" with nothing to set up
            if problem:
                return PrepareResult(error=problem)
            names = [self._device_to_set_up(result["device"]) for result in mine]
            if self.config.refuse_held_devices:
                wanted = [
                    {"poolName": result["pool"], "deviceName": name, **self._share_id(result), **_admin_access(result)}
                    for result, name in zip(mine, names, strict=True)
                ]
                refused = self.holds.reserve(Holder(ref.namespace, ref.name, ref.uid), wanted)
                if refused:
                    return PrepareResult(error=refused)
                hold.callback(self.holds.release, ref.uid)  # once the record holds the devices, or prepare failed
            cdi_ids = self._write_specs(ref.uid, mine, names)
            if self.config.is_broken(BrokenMode.CDI_ID_UNRESOLVABLE):
                cdi_ids = [product_vendor_id(cdi_id) for cdi_id in cdi_ids]  # the bug: no spec defines these
            first_request = mine[0]["request"] if mine else ""
            prepared = [
                {
                    # ANSWERS_UNDER_FIRST_REQUEST, the bug: every device answered under the first request's name
                    "requestNames": [
                        first_request
                        if self.config.is_broken(BrokenMode.ANSWERS_UNDER_FIRST_REQUEST)
                        else result["request"]
                    ],
                    "poolName": result["pool"],
                    "deviceName": name,
                    "cdiDeviceIDs": [cdi_id],
                    **self._share_id(result),
                    **_admin_access(result),
                }
                for result, name, cdi_id in zip(mine, names, cdi_ids, strict=True)
            ]
            if self.faults.find("status-write-failure", claim=ref.uid, devices=names) is not None:
                self._remove_specs(ref.uid, prepared)
                return PrepareResult(error="write status.devices: failed (injected status-write failure)")
            try:
                if not self.config.is_broken(BrokenMode.OMITS_DECLARED_STATUS):  # the bug: no status write at all
                    entries = [self._status_entry(result, cdi_ids) for result in mine]
                    if self.config.is_broken(BrokenMode.STATUS_FOR_OTHER_DRIVERS_DEVICES):
                        entries += self._other_drivers_entries(claim)
                    self.api.apply_device_status(claim, entries)
                    if self.config.is_broken(BrokenMode.REWRITES_STATUS_AFTER_PREPARE):
                        refresh = threading.Timer(STATUS_REFRESH_DELAY, self._rewrite_status, (claim, entries))
                        refresh.daemon = True
                        refresh.start()
            except ApiException as error:
                if not self.config.is_broken(BrokenMode.IGNORES_STATUS_WRITE_FAILURE):
                    self._remove_specs(ref.uid, prepared)
                    return PrepareResult(error=f"write status.devices: {denial(error)}")
            self.prepared.put(ref.uid, {"namespace": ref.namespace, "name": ref.name, "devices": prepared})
            return PrepareResult(devices=prepared)

    def _write_specs(self, uid: str, mine: list[dict[str, Any]], names: list[str]) -> list[str]:
        """Write the claim's CDI specs (one per claim, or one per share); returns one CDI device ID per device."""
        if self.config.profile == shared.PROFILE:  # one spec per share of a shared device
            ignore_share_id = self.config.is_broken(BrokenMode.PREPARE_IGNORES_SHARE_ID)
            return shared.write_share_specs(self.config, uid, mine, ignore_share_id=ignore_share_id)
        edits = self.faults.find("cdi-without-edits", claim=uid, devices=names) is None
        set_up = names
        if self.config.is_broken(BrokenMode.CDI_EDITS_NAME_OTHER_DEVICE):
            set_up = [next_device(name, self.config.devices) for name in names]  # the bug: edits off by one
        return cdi.write_spec(
            self.config.cdi_dir,
            self.config.driver_name,
            self.config.profile,
            uid,
            names,
            edits=edits,
            set_up=set_up,
        )

    def _specs_lost(self, uid: str, devices: list[dict[str, Any]]) -> bool:
        """Whether a spec file the claim's recorded devices are defined in is missing from the CDI dir."""
        if self.config.profile == shared.PROFILE:
            shares = [str(cdi_id).split("=", 1)[-1] for device in devices for cdi_id in device["cdiDeviceIDs"]]
            paths = [shared.spec_path(self.config.cdi_dir, self.config.driver_name, share) for share in shares]
        else:
            paths = [cdi.spec_path(self.config.cdi_dir, self.config.driver_name, uid)] if devices else []
        return not all(path.is_file() for path in paths)

    def _rewrite_lost_specs(self, ref: ClaimRef, lookup: Lookup | None, devices: list[dict[str, Any]]) -> PrepareResult:
        """A prepared claim whose specs are gone (a reboot empties the CDI dir; the record survives it).

        The kubelet hands the recorded IDs to the runtime, so the specs are written again from the claim, as the
        first prepare wrote them, and the recorded answer is given.
        """
        problem, _, mine = lookup or self._lookup(ref)
        if problem:
            return PrepareResult(error=f"write lost CDI spec again: {problem}")
        names = [str(device["deviceName"]) for device in devices]
        if len(names) != len(mine):
            return PrepareResult(
                error=f"write lost CDI spec again: recorded {len(names)} devices, the claim has {len(mine)}"
            )
        self._write_specs(ref.uid, mine, names)
        return PrepareResult(devices=devices)

    def _rewrite_status(self, claim: dict[str, Any], entries: list[dict[str, Any]]) -> None:
        """REWRITES_STATUS_AFTER_PREPARE: the claim's status.devices written again, whether unprepared or not."""
        with contextlib.suppress(ApiException):  # refused once the claim is deallocated; the attempt is the bug
            self.api.apply_device_status(claim, entries)

    def _other_drivers_entries(self, claim: dict[str, Any]) -> list[dict[str, Any]]:
        """STATUS_FOR_OTHER_DRIVERS_DEVICES: an entry for each device of another driver, under that driver's name."""
        results = claim["status"]["allocation"]["devices"]["results"]
        return [
            {**self._status_entry(result, []), "driver": result["driver"]}
            for result in results
            if result["driver"] != self.config.driver_name
        ]

    def _share_id(self, result: dict[str, Any]) -> dict[str, str]:
        """The answer's share ID for a result that is a share of a device (the share ID mutant leaves it out)."""
        if not result.get("shareID") or self.config.is_broken(BrokenMode.PREPARE_IGNORES_SHARE_ID):
            return {}
        return {"shareID": str(result["shareID"])}

    def _remove_specs(self, uid: str, prepared: list[dict[str, Any]]) -> None:
        """Delete the CDI specs of one claim: its own file, or with shared devices the files of its shares."""
        if self.config.profile == shared.PROFILE:
            shared.remove_share_specs(self.config, prepared)
        else:
            cdi.remove_spec(self.config.cdi_dir, self.config.driver_name, uid)

    def _device_to_set_up(self, allocated: str) -> str:
        """The allocated device; the PREPARES_WRONG_DEVICE mutant takes the next one in its pool instead."""
        if not self.config.is_broken(BrokenMode.PREPARES_WRONG_DEVICE):
            return allocated
        profile, index = allocated.rsplit("-", 1)
        return f"{profile}-{(int(index) + 1) % self.config.devices}"

    def _announce_ready(self, ref: ClaimRef) -> None:
        """The READY_BEFORE_PREPARED mutant: write Ready=True for the claim's devices before preparing anything."""
        try:
            claim = self.api.get_claim(ref.namespace, ref.name)
            problem, mine = self._check_allocation(ref, claim)
            if not problem:
                ids = [cdi.device_id(self.config.driver_name, self.config.profile, ref.uid, r["device"]) for r in mine]
                self.api.apply_device_status(claim, [self._status_entry(result, ids) for result in mine])
        except ApiException:
            return  # the real prepare below reports what went wrong

    def _record_refusal(self, claim: dict[str, Any], mine: list[dict[str, Any]], problem: str) -> None:
        """The WRITES_STATUS_FOR_FOREIGN_CLAIMS mutant: put a refusal (Ready=False) into the claim's status.devices."""
        entries = [
            {**self._status_entry(result, []), "conditions": [_condition("False", "WrongNode", problem)]}
            for result in mine
        ]
        try:
            self.api.apply_device_status(claim, entries)
        except ApiException:
            return  # the API server refuses it; the attempt is the bug

    def _lookup(self, ref: ClaimRef) -> Lookup:
        """The claim and this driver's results in it, or why this node cannot prepare it."""
        try:
            claim = self.api.get_claim(ref.namespace, ref.name)
        except ApiException as error:
            return f"get claim {ref.namespace}/{ref.name}: {denial(error)}", {}, []
        problem, mine = self._check_allocation(ref, claim)
        return problem, claim, mine

    def _check_allocation(self, ref: ClaimRef, claim: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        where = f"claim {ref.namespace}/{ref.name}"
        if claim["metadata"]["uid"] != ref.uid:
            return f"{where} has UID {claim['metadata']['uid']}, the request names {ref.uid}", []
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            return f"{where} is not allocated", []
        mine = [r for r in allocation["devices"].get("results", []) if r["driver"] == self.config.driver_name]
        if not mine:
            return f"{where} has no devices of driver {self.config.driver_name}", []
        node = allocated_node(allocation)
        if node != self.config.node_name and not self.config.is_broken(BrokenMode.PREPARES_FOREIGN_CLAIMS):
            problem = f"{where} is allocated to node {node or '(not a single node)'}, not {self.config.node_name}"
            if self.config.is_broken(BrokenMode.WRITES_STATUS_FOR_FOREIGN_CLAIMS):
                self._record_refusal(claim, mine, problem)
            return problem, []
        return "", mine

    def _status_entry(self, result: dict[str, Any], cdi_ids: list[str]) -> dict[str, Any]:
        """The status.devices entry for one device: Ready=True (unless conditions are off), data, networkData (nic)."""
        entry: dict[str, Any] = {
            "driver": self.config.driver_name,
            "pool": result["pool"],
            "device": result["device"],
            # status.devices is keyed by driver, pool, device and share: a share's entry must name its share.
            **({"shareID": result["shareID"]} if result.get("shareID") else {}),
            "data": {
                "profile": self.config.profile,
                "node": self.config.node_name,
                "cdiDeviceIDs": cdi_ids,
                **devices.device_data(self.config, result["device"]),
            },
        }
        if self.config.ready_condition:
            entry["conditions"] = [_condition("True", "Prepared", "prepared by fake-dra")]
        if self.config.profile == "nic":
            index = int(result["device"].rsplit("-", 1)[1])
            if self.config.is_broken(BrokenMode.NETWORK_DATA_MISMATCH):
                index += 1  # the bug: interfaces numbered from 1 here, from 0 in the slice
            entry["networkData"] = {
                "interfaceName": devices.interface_name(self.config, index),
                "ips": [devices.ip_cidr(self.config, index)],
                "hardwareAddress": devices.hardware_address(self.config, index),
            }
        return entry

    def unprepare(self, claims: list[ClaimRef]) -> dict[str, str]:
        """NodeUnprepareResources: per-claim error text ("" for success); unknown claims succeed."""
        started = time.time()
        errors = {}
        for position, claim in enumerate(claims):
            if position and self.config.is_broken(BrokenMode.UNPREPARE_HANDLES_ONLY_FIRST):
                errors[claim.uid] = ""  # the bug: reported unprepared, never undone
                continue
            errors[claim.uid] = self._unprepare_one(claim)
        self.calls.record(
            "NodeUnprepareResources",
            started,
            claims=[c.uid for c in claims],
            outcome=_outcome(errors),
            errors={uid: e for uid, e in errors.items() if e},
        )
        return errors

    def _unprepare_one(self, ref: ClaimRef) -> str:
        with self._lock(ref.uid):
            delayed = self._fault_delay("unprepare", ref.uid)
            if delayed:
                return delayed
            injected = self.faults.find("unprepare-error", claim=ref.uid)
            if injected is not None:
                return f"unprepare failed (injected): {injected.message}"
            record = self.prepared.get(ref.uid)
            if record is None:
                if self.config.is_broken(BrokenMode.UNPREPARE_UNKNOWN_FAILS):
                    return f"claim {ref.uid} is not prepared here"
                return ""  # never prepared here, or already unprepared: idempotent
            if not self.config.keep_status_after_unprepare:
                problem = self._remove_status(ref)
                if problem:
                    return problem
            if self.config.is_broken(BrokenMode.UNPREPARE_REMOVES_OTHER_CLAIMS_CDI):
                cdi.remove_driver_specs(self.config.cdi_dir, self.config.driver_name)  # the bug: every claim's spec
            elif not self.config.is_broken(BrokenMode.UNPREPARE_LEAVES_CDI_SPECS):
                self._remove_specs(ref.uid, record["devices"])
            self.prepared.remove(ref.uid)
            self._unprepared.add(ref.uid)
            return ""

    def _remove_status(self, ref: ClaimRef) -> str:
        """Remove this driver's status.devices entries from the claim; the error text, or "" when done."""
        try:
            claim = self.api.get_claim(ref.namespace, ref.name)
            if claim["metadata"]["uid"] == ref.uid:
                self.api.apply_device_status(claim, [])
        except ApiException as error:
            # A deleted claim has no status left to clean.
            if error.status != 404 or self.config.is_broken(BrokenMode.UNPREPARE_NEEDS_CLAIM):
                return f"remove status.devices: {denial(error)}"
        return ""


def _admin_access(result: dict[str, Any]) -> dict[str, bool]:
    """`adminAccess` for a device allocated for administrative access: the record says the claim holds it for no one.

    Not part of the answer (the gRPC server picks its fields).
    """
    return {"adminAccess": True} if result.get("adminAccess") else {}


def _condition(status: str, reason: str, message: str) -> dict[str, str]:
    """A Ready condition of a status.devices entry, as of now."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": "Ready", "status": status, "reason": reason, "message": message, "lastTransitionTime": now}


def allocated_node(allocation: dict[str, Any]) -> str:
    """The single node an allocation is limited to (metadata.name In [node]), or "" if it is not one node."""
    terms = ((allocation.get("nodeSelector") or {}).get("nodeSelectorTerms")) or []
    if len(terms) != 1 or terms[0].get("matchExpressions"):
        return ""
    fields = terms[0].get("matchFields") or []
    if len(fields) != 1 or fields[0].get("key") != "metadata.name" or fields[0].get("operator") != "In":
        return ""
    values = fields[0].get("values") or []
    return str(values[0]) if len(values) == 1 else ""


def _outcome(errors: dict[str, str]) -> str:
    failed = sorted(uid for uid, error in errors.items() if error)
    return "ok" if not failed else f"error ({len(failed)} of {len(errors)} claims)"
