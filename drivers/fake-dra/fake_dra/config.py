"""`DriverConfig`: everything one driver process needs, from its command line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fake_dra.broken import BrokenMode

# Device profiles beyond gpu and nic: `gpu-partitions` publishes each GPU as partitions consuming shared counters
# (fake_dra/partitions.py); `gpu-shared` publishes GPUs that allow multiple allocations, with consumable capacity
# (fake_dra/shared.py); `gpu-fabric` publishes devices with binding conditions (fake_dra/fabric.py).
PARTITIONS_PROFILE = "gpu-partitions"
PROFILES = ("gpu", "nic", PARTITIONS_PROFILE, "gpu-shared", "gpu-fabric")
# --health-service: which DRAResourceHealth versions the driver serves and advertises. The kubelet 1.37 picks the
# first of v1, v1alpha1 that GetInfo lists, and watches no health at all when it lists none (the service is optional).
HEALTH_SERVICES: dict[str, tuple[str, ...]] = {
    "v1+v1alpha1": ("v1", "v1alpha1"),
    "v1": ("v1",),
    "v1alpha1": ("v1alpha1",),
    "none": (),
}


@dataclass(frozen=True)
class DriverConfig:
    """Settings of one driver process (one node)."""

    # DRA driver name (a DNS subdomain); also the CDI vendor and the field manager of its status writes.
    driver_name: str
    # The node this process serves; claims allocated elsewhere are refused.
    node_name: str
    # Kubelet root directory: sockets go to plugins_registry/ and plugins/<driver>/ below it.
    kubelet_root: Path
    # Where CDI spec files are written (one per prepared claim).
    cdi_dir: Path
    # Prepared claims and the pool generation survive restarts here.
    state_dir: Path
    # Device profile: "gpu" (model, memory, index), "nic" (interface, IPs, MAC in networkData), "gpu-partitions"
    # (each GPU as a whole-device entry, halves and quarters that consume its shared counters) or "gpu-shared" (GPUs
    # that allow multiple allocations, with consumable capacity: shared.py).
    profile: str = "gpu"
    # Devices published in this node's pool.
    devices: int = 4
    # kubeconfig to reach the API server; None means in-cluster configuration.
    kubeconfig: Path | None = None
    # Delete this node's ResourceSlices on a clean exit (private test drivers); real drivers keep it.
    delete_slices_on_exit: bool = False
    # Bugs to behave with (mutants that conformance checks must catch); empty for the correct driver.
    broken: frozenset[BrokenMode] = frozenset()
    # The driver release this process plays: its devices' driverVersion attribute; from 2.0.0 on its devices also
    # carry a firmware attribute and its state file is written in format 2 (which 1.x reads too).
    driver_version: str = "1.0.0"
    # A client-side limit on its API requests (token bucket: `api_qps` per second after a burst of `api_burst`), as
    # client-go puts on Go drivers; 0: unlimited (--api-qps, --api-burst).
    api_qps: float = 0.0
    api_burst: int = 10

    # Variants: where the Kubernetes contract allows several behaviours, each is selectable at start, so the suite
    # can certify every one of them (the defaults are the behaviour users like best, not the only correct one).

    # DRAResourceHealth API versions served on dra.sock and listed by GetInfo ("v1", "v1alpha1"); empty: no health
    # service at all (--health-service).
    health_services: tuple[str, ...] = HEALTH_SERVICES["v1+v1alpha1"]
    # status.devices entries carry a Ready condition; False: data (and networkData) only, as conditions are optional
    # and Ready=True is a "should" (--status-conditions).
    ready_condition: bool = True
    # Unprepare leaves the claim's status.devices entries in place: the API does not say when they go (the API server
    # drops them when the claim is deallocated) (--keep-status-after-unprepare).
    keep_status_after_unprepare: bool = False
    # A claim this node cannot prepare (missing, replaced, not allocated, not to this driver on this node) fails the
    # whole NodePrepareResources call before any claim of it is prepared, as the upstream kubeletplugin helper answers
    # a missing, replaced or unallocated claim, instead of failing only its own entry (--unknown-claim-answer).
    whole_call_refusal: bool = False
    # Prepare refuses, per claim, a claim one of whose devices another claim still holds on this node (prepared, or
    # being prepared; admin access and other shares of a device do not hold it: fake_dra/held.py), until the kubelet
    # has unprepared that claim and retries, as some GPU drivers do (--refuse-devices-held-by-other-claims).
    refuse_held_devices: bool = False
    # How devices of the gpu and nic profiles are identified: "reference" (gpu-<node>-<i> UUIDs, fake<i>
    # interfaces, MACs, IPv4) or "words" (zq7-... values no pattern knows, and serial numbers, in the slice's
    # attributes, status.devices[].data and networkData), for masking tests (--device-id-format).
    id_format: str = "reference"
    # gpu-fabric: the kubeconfig of the attach controller's own identity (not the plugin's node-bound one); None: no
    # controller runs, and no device ever gets attached (--controller-kubeconfig).
    controller_kubeconfig: Path | None = None
    # gpu-fabric: how long one attach takes before the controller writes the binding condition (--attach-delay).
    attach_delay: float = 1.0
    # Its pod's UID, for seamless rolling updates (--rolling-update-uid): every socket's name carries it, so an old
    # and a new instance can both be registered with the kubelet, and the prepared claims are shared between them
    # (the upstream kubeletplugin helper's naming: <driver>-<uid>-reg.sock, dra-<uid>.sock). Empty: fixed names.
    rolling_update_uid: str = ""

    @property
    def _instance_suffix(self) -> str:
        return f"-{self.rolling_update_uid}" if self.rolling_update_uid else ""

    @property
    def major(self) -> int:
        """The major number of `driver_version`."""
        return int(self.driver_version.split(".", 1)[0])

    def is_broken(self, mode: BrokenMode) -> bool:
        """Whether the driver was started with the bug `mode`."""
        return mode in self.broken

    @property
    def plugin_dir(self) -> Path:
        """Directory of the DRA service socket (and the control socket)."""
        return self.kubelet_root / "plugins" / self.driver_name

    @property
    def registration_socket(self) -> Path:
        """Where the kubelet's plugin watcher looks for this driver."""
        suffix = self._instance_suffix
        if self.is_broken(BrokenMode.REUSES_REGISTRATION_SOCKET_NAME):
            suffix = ""  # the bug: every instance of a rolling update registers through the same file name
        return self.kubelet_root / "plugins_registry" / f"{self.driver_name}{suffix}-reg.sock"

    @property
    def dra_socket(self) -> Path:
        """DRAPlugin and DRAResourceHealth services."""
        return self.plugin_dir / f"dra{self._instance_suffix}.sock"

    @property
    def control_socket(self) -> Path:
        """HTTP control endpoint for faults and the call log (see control.py)."""
        return self.plugin_dir / f"control{self._instance_suffix}.sock"
