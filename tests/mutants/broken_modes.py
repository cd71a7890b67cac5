"""Broken modes: realistic vendor bugs the reference driver (drivers/fake-dra-go, broken.go) can be started with.

Each mode is a mutant of the driver: a conformance check that is worth its name fails against it. Unlike faults
(switched at run time through the control socket, for the harness's own scenarios), a broken mode is chosen at
start (`--broken-mode`), so a driver profile can run the broken driver like any vendor binary. The Go build
implements each; tests/unit/test_reference_driver_vocabulary.py keeps the names here among its own.
"""

from __future__ import annotations

from enum import StrEnum


class BrokenMode(StrEnum):
    """One bug, named for what the driver gets wrong."""

    # A repeated prepare of the same claim is refused ("already prepared") instead of answered again.
    NON_IDEMPOTENT_PREPARE = "non-idempotent-prepare"
    # Unprepare of a claim it does not know (never prepared here, or already unprepared) is an error.
    UNPREPARE_UNKNOWN_FAILS = "unprepare-unknown-fails"
    # Unprepare reads the claim from the API first and fails once the claim is deleted.
    UNPREPARE_NEEDS_CLAIM = "unprepare-needs-claim"
    # Remembers unprepared claims and refuses to prepare them again.
    PREPARE_AFTER_UNPREPARE_FAILS = "prepare-after-unprepare-fails"
    # Does not check the claim's node: prepares (and writes CDI specs for) claims allocated to other nodes.
    PREPARES_FOREIGN_CLAIMS = "prepares-foreign-claims"
    # Reports a prepare successful although its status.devices write failed (the write is neither retried nor
    # reported).
    IGNORES_STATUS_WRITE_FAILURE = "ignores-status-write-failure"
    # Keeps prepared claims in memory only: after a restart it has forgotten them, and their CDI specs leak.
    LOSES_STATE_ON_RESTART = "loses-state-on-restart"
    # Started on a state file a newer release wrote (a downgrade), it publishes no pool at all.
    DROPS_POOL_AFTER_DOWNGRADE = "drops-pool-after-downgrade"
    # Refuses a claim of another node, but first records the refusal (Ready=False) in that claim's status.devices:
    # a status write for a claim its node does not own.
    WRITES_STATUS_FOR_FOREIGN_CLAIMS = "writes-status-for-foreign-claims"
    # Confuses device numbers: sets up (CDI spec) and reports the device after the allocated one in its pool, while
    # its status.devices still names the allocated device.
    PREPARES_WRONG_DEVICE = "prepares-wrong-device"
    # Besides its node's pool, keeps publishing the same devices for the node name an older release used (the
    # node's FQDN): devices offered for a node that does not have them.
    PUBLISHES_FOR_WRONG_NODE = "publishes-for-wrong-node"
    # Unprepare answers success and forgets the claim, but never deletes the claim's CDI spec.
    UNPREPARE_LEAVES_CDI_SPECS = "unprepare-leaves-cdi-specs"
    # Writes Ready=True into status.devices as soon as it sees the claim, before the node-local work; when that work
    # fails, the Ready=True stays.
    READY_BEFORE_PREPARED = "ready-before-prepared"
    # Its health check only asks whether the device exists: a failing device (tainted in its own slice) is still
    # reported HEALTHY.
    HEALTHY_WHILE_FAILING = "healthy-while-failing"
    # Answers a claim it cannot find in the API (deleted, or never created) with success and no devices, as if there
    # were nothing to set up: the kubelet would start the pod without the devices it asked for.
    REPORTS_UNKNOWN_CLAIM_PREPARED = "reports-unknown-claim-prepared"
    # Declares statusDevices (its profile says it writes status.devices) but a release left the write out.
    OMITS_DECLARED_STATUS = "omits-declared-status"
    # Registers with the kubelet under the product's name instead of the driver name its slices and allocations
    # use: a kubelet would route no claim to it.
    REGISTERS_PRODUCT_NAME = "registers-product-name"
    # Pairs the answers of a NodePrepareResources call for several claims with the wrong claim UIDs (it collects
    # the answers in one order and the UIDs in another): each claim is reported with another claim's devices.
    BATCH_ANSWERS_SWAPPED = "batch-answers-swapped"
    # A NodeUnprepareResources call for several claims undoes only the first one and reports success for all.
    UNPREPARE_HANDLES_ONLY_FIRST = "unprepare-handles-only-first"
    # Answers CDI device IDs under the product's vendor name while its CDI specs are written under the driver name:
    # no spec the container runtime reads defines the devices it is told to inject.
    CDI_ID_UNRESOLVABLE = "cdi-id-unresolvable"
    # Unprepare of one claim deletes every CDI spec of the driver (by file prefix), also those of claims still
    # prepared.
    UNPREPARE_REMOVES_OTHER_CLAIMS_CDI = "unprepare-removes-other-claims-cdi"
    # The container edits of a claim's CDI spec set up the device after the allocated one in its pool, while the
    # answer (and the CDI device name) report the allocated device.
    CDI_EDITS_NAME_OTHER_DEVICE = "cdi-edits-name-other-device"
    # Republishes its pool with changed devices (a taint) without changing the pool generation.
    REPUBLISHES_SAME_GENERATION = "republishes-same-generation"
    # Its health reports name the pool after the driver instead of the pool it publishes (the node's name): the
    # kubelet matches no report to a prepared device.
    HEALTH_WRONG_POOL = "health-wrong-pool"
    # Numbers interfaces from 1 in networkData while its slice numbers them from 0: a NIC's status.devices entry
    # names the interface and MAC of the next NIC.
    NETWORK_DATA_MISMATCH = "network-data-mismatch"
    # Consumable capacity (issue 22, gpu-shared device profile): sets up a shared device by its name alone, ignoring
    # the share ID of the allocation: every share of a device gets the same CDI device and spec file (a second share
    # overwrites the first's), unprepare of one share removes the spec the others still use, and the answer carries
    # no share ID.
    PREPARE_IGNORES_SHARE_ID = "prepare-ignores-share-id"
    # Partitionable devices (issue 22; the gpu-partitions device profile): publishes each GPU's counter set with the
    # memory left after a reservation of its own, while its partitions consume their nominal sizes. The counters
    # oversubscribe the device: its whole-device entry consumes more memory than the set holds (the scheduler can
    # never allocate it), and its four quarters together no longer fit.
    PARTITIONS_OVERSUBSCRIBE_COUNTERS = "partitions-oversubscribe-counters"
    # Slice hygiene (issue 22): a republish deletes the pool's slices before writing the new generation, so a consumer
    # watching the pool sees it gone until the new slices land.
    REPUBLISH_LEAVES_INCOMPLETE_POOL = "republish-leaves-incomplete-pool"
    # Slice hygiene (issue 22): publishes its pool as two slices (resourceSliceCount 2), the second repeating the
    # first device of the first: a pool the scheduler finds invalid.
    DUPLICATE_DEVICE_NAMES = "duplicate-device-names"
    # binding (issue 22): its attach controller writes the binding condition `attached=True` as soon as it sees the
    # allocation, before its attach step ran: the scheduler binds the pod to a node the device is not attached to.
    BINDING_CONDITIONS_BEFORE_ATTACH = "binding-conditions-before-attach"
    # Rolling update (issue 23): a new instance deletes every other socket of its driver in plugins_registry and in
    # its plugin directory at start, taking them for stale ones, while the old instance still serves behind them: the
    # kubelet unregisters the old instance before the new one is ready.
    REMOVES_OTHER_INSTANCES_SOCKETS = "removes-other-instances-sockets"
    # Lost CDI specs (issue 44): a repeated prepare of a claim it has prepared is answered from its record without
    # writing the claim's CDI specs again; after a reboot emptied the CDI dir (its record survives on disk) the
    # runtime finds no spec for the IDs it is given, and the pod stays in CreateContainerError (k/k#141433).
    REPLAYED_PREPARE_SKIPS_CDI_SPECS = "replayed-prepare-skips-cdi-specs"
    # Issue 43's held-out bugs, each with a named check (issue 44). A claim of several requests: every device is
    # answered under the first request's name, so the kubelet hands a container that references another request of
    # the claim none of its devices (and the first request's container all of them).
    ANSWERS_UNDER_FIRST_REQUEST = "answers-under-first-request"
    # A claim that mixes two drivers: its status.devices write carries an entry for every device of the claim, the
    # other driver's devices included (under that driver's name): it writes entries another driver owns.
    STATUS_FOR_OTHER_DRIVERS_DEVICES = "status-for-other-drivers-devices"
    # A "refresh" of status.devices a few seconds (broken.go: statusRefreshDelay) after each prepare, whether or
    # not the claim was unprepared meanwhile: entries come back after the unprepare removed them, or the API server
    # refuses the write once the claim is deallocated.
    REWRITES_STATUS_AFTER_PREPARE = "rewrites-status-after-prepare"
    # Every publish of the pool after the process's first (a rescan: a fault, a taint) publishes the int attribute
    # `index` as a string: a selector comparing it as a number stops matching, with no new driver version.
    REPUBLISH_CHANGES_ATTRIBUTE_TYPE = "republish-changes-attribute-type"
    # Its record of prepared claims is written outside the lock: each change re-reads the file, applies itself alone
    # and writes it back (broken.go: checkpointWriteWindow from read to write), so concurrent prepares and
    # unprepares overwrite each other's changes on disk. The running process is right; after a restart it has
    # forgotten claims it prepared (their unprepare then leaves their CDI specs and status) and remembers claims it
    # unprepared.
    CHECKPOINT_WRITTEN_OUTSIDE_LOCK = "checkpoint-written-outside-lock"
    # Rolling update: its registration socket keeps the plain name (`<driver>-reg.sock`) whatever the instance, while
    # its DRA socket is per instance: the new instance replaces the old one's registration socket file, so the two are
    # never registered side by side.
    REUSES_REGISTRATION_SOCKET_NAME = "reuses-registration-socket-name"
    # Selectors (issue 44, item 7): every version attribute is published as a string of the same text (the version
    # read from the device goes out unparsed). The profile declares it a version; a selector comparing it with semver()
    # finds no overload for a string, errors on every device (CEL runtime error), and a pod asking for a recent enough
    # driver never gets a device. Stable across republishes, so only a check that selects on it by its type sees it.
    PUBLISHES_VERSION_AS_STRING = "publishes-version-as-string"
    # Health over time (issue 44, item 6): GetInfo still lists v1alpha1.DRAResourceHealth, which its DRA socket no
    # longer serves (only v1): a 1.37 kubelet reads v1 and sees nothing wrong; a kubelet within the version skew that
    # knows only v1alpha1 gets UNIMPLEMENTED and stops watching, so the driver's devices read Unknown there.
    HEALTH_V1ALPHA1_UNSERVED = "health-v1alpha1-unserved"
    # Health over time (issue 44, item 6): a restarted process hands only the devices it prepares itself to its health
    # monitor; the devices of the claims it found prepared in its record at start are left out of every health
    # report, so a running pod's devices read Unknown in its status from the driver's restart on.
    HEALTH_LOST_FOR_RESTORED_CLAIMS = "health-lost-for-restored-claims"
    # Health over time (issue 44, item 6): its health monitor sets a failed device UNHEALTHY and drops the reason it
    # found: the report's message is empty, so the pod's allocatedResourcesStatus reads Unhealthy with no message.
    UNHEALTHY_WITHOUT_MESSAGE = "unhealthy-without-message"
    # Two drivers in one pod, one failing (issue 44, item 7): each successful prepare of a claim counts as one more
    # user of it, and an unprepare undoes the claim only once as many unprepares balanced them. The kubelet prepares a
    # claim again on every retry of a pod whose other driver's claim failed (it marks the claim prepared only once
    # every driver succeeded) and unprepares it once when the pod ends: the claim's CDI spec, its status.devices
    # entries and its record stay (k/k#137819).
    COUNTS_PREPARES_PER_CLAIM = "counts-prepares-per-claim"
    # Upgrades (issue 44, item 4): a start that fails (a release that publishes its pool and cannot serve) deletes the
    # node's pool on its way out. In a rolling update the old instance keeps serving the claims it prepared, but the
    # pool the scheduler allocates from is gone until something republishes it: new pods with claims stay pending.
    FAILED_START_DELETES_POOL = "failed-start-deletes-pool"
