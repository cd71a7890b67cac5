package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
)

// Broken modes: realistic vendor bugs the driver can be started with (--broken-mode), each a mutant that a
// conformance check worth its name catches. The mutation harness's BrokenMode (tests/mutants/broken_modes.py)
// documents each it starts by name; the others are documented where they act.
const (
	nonIdempotentPrepare           = "non-idempotent-prepare"
	unprepareUnknownFails          = "unprepare-unknown-fails"
	unprepareNeedsClaim            = "unprepare-needs-claim"
	prepareAfterUnprepareFails     = "prepare-after-unprepare-fails"
	preparesForeignClaims          = "prepares-foreign-claims"
	ignoresStatusWriteFailure      = "ignores-status-write-failure"
	losesStateOnRestart            = "loses-state-on-restart"
	dropsPoolAfterDowngrade        = "drops-pool-after-downgrade"
	writesStatusForForeignClaims   = "writes-status-for-foreign-claims"
	preparesWrongDevice            = "prepares-wrong-device"
	publishesForWrongNode          = "publishes-for-wrong-node"
	unprepareLeavesCDISpecs        = "unprepare-leaves-cdi-specs"
	readyBeforePrepared            = "ready-before-prepared"
	healthyWhileFailing            = "healthy-while-failing"
	reportsUnknownClaimPrepared    = "reports-unknown-claim-prepared"
	omitsDeclaredStatus            = "omits-declared-status"
	registersProductName           = "registers-product-name"
	batchAnswersSwapped            = "batch-answers-swapped"
	unprepareHandlesOnlyFirst      = "unprepare-handles-only-first"
	cdiIDUnresolvable              = "cdi-id-unresolvable"
	unprepareRemovesOtherClaimsCDI = "unprepare-removes-other-claims-cdi"
	cdiEditsNameOtherDevice        = "cdi-edits-name-other-device"
	republishesSameGeneration      = "republishes-same-generation"
	healthWrongPool                = "health-wrong-pool"
	networkDataMismatch            = "network-data-mismatch"
	prepareIgnoresShareID          = "prepare-ignores-share-id"
	partitionsOversubscribeCounter = "partitions-oversubscribe-counters"
	republishLeavesIncompletePool  = "republish-leaves-incomplete-pool"
	duplicateDeviceNames           = "duplicate-device-names"
	bindingConditionsBeforeAttach  = "binding-conditions-before-attach"
	removesOtherInstancesSockets   = "removes-other-instances-sockets"
	replayedPrepareSkipsCDISpecs   = "replayed-prepare-skips-cdi-specs"
	answersUnderFirstRequest       = "answers-under-first-request"
	statusForOtherDriversDevices   = "status-for-other-drivers-devices"
	rewritesStatusAfterPrepare     = "rewrites-status-after-prepare"
	republishChangesAttributeType  = "republish-changes-attribute-type"
	checkpointWrittenOutsideLock   = "checkpoint-written-outside-lock"
	reusesRegistrationSocketName   = "reuses-registration-socket-name"
	publishesVersionAsString       = "publishes-version-as-string"
	healthV1alpha1Unserved         = "health-v1alpha1-unserved"
	healthLostForRestoredClaims    = "health-lost-for-restored-claims"
	countsPreparesPerClaim         = "counts-prepares-per-claim"
	unhealthyWithoutMessage        = "unhealthy-without-message"
	// failedStartDeletesPool: a start that fails (upgrade.go) deletes the node's pool on its way out ("clean up what
	// we published"). The pool is the node's, not the process's: the old instance a rolling update left serving
	// keeps its claims, but the scheduler sees no devices on the node until something republishes.
	failedStartDeletesPool = "failed-start-deletes-pool"
)

var brokenModes = []string{
	nonIdempotentPrepare, unprepareUnknownFails, unprepareNeedsClaim, prepareAfterUnprepareFails,
	preparesForeignClaims, ignoresStatusWriteFailure, losesStateOnRestart, dropsPoolAfterDowngrade,
	writesStatusForForeignClaims, preparesWrongDevice, publishesForWrongNode, unprepareLeavesCDISpecs,
	readyBeforePrepared, healthyWhileFailing, reportsUnknownClaimPrepared, omitsDeclaredStatus,
	registersProductName, batchAnswersSwapped, unprepareHandlesOnlyFirst, cdiIDUnresolvable,
	unprepareRemovesOtherClaimsCDI, cdiEditsNameOtherDevice, republishesSameGeneration, healthWrongPool,
	networkDataMismatch, prepareIgnoresShareID, partitionsOversubscribeCounter, republishLeavesIncompletePool,
	duplicateDeviceNames, bindingConditionsBeforeAttach, removesOtherInstancesSockets, replayedPrepareSkipsCDISpecs,
	answersUnderFirstRequest, statusForOtherDriversDevices, rewritesStatusAfterPrepare, republishChangesAttributeType,
	checkpointWrittenOutsideLock, reusesRegistrationSocketName, publishesVersionAsString,
	// Go build only (opaque.go): the class's opaque configs applied over the claim's.
	classConfigOverClaimConfig,
	// Go build only (downtime.go): a graceful stop that deletes the slices, resets the generation, leaves sockets;
	// a start that rewrites unchanged slices at a new generation.
	deletesSlicesOnSigterm, restartsGenerationBesideOldSlices, leavesSocketsOnSigterm, rewritesSlicesOnRestart,
	// Health over time (issue 44, item 6): GetInfo lists v1alpha1.DRAResourceHealth, which is never served.
	healthV1alpha1Unserved,
	// Health over time (issue 44, item 6): a restarted process leaves the devices of the claims it found prepared
	// out of its health reports.
	healthLostForRestoredClaims,
	// Two drivers in one pod, one failing (issue 44, item 7): every prepare of a claim counted as one more user; an
	// unprepare undoes the claim only once it balanced them all (prepare_count.go).
	countsPreparesPerClaim,
	// Health over time (issue 44, item 6): an unhealthy device is reported UNHEALTHY with an empty message.
	unhealthyWithoutMessage,
	// Upgrades (issue 44, item 4; upgrade.go): a start that fails deletes the node's pool on its way out.
	failedStartDeletesPool,
}

const (
	// statusRefreshDelay: how long after a prepare rewrites-status-after-prepare writes the claim's status again.
	statusRefreshDelay = 3 * time.Second
	// checkpointWriteWindow: how long checkpoint-written-outside-lock takes from reading the file to writing it.
	checkpointWriteWindow = 100 * time.Millisecond
	// legacyNodeDomain: the domain an older release appended to the node name (publishes-for-wrong-node).
	legacyNodeDomain = "nodes.fake-dra.example.com"
	// productCDIVendor: the product's vendor name, under which cdi-id-unresolvable answers CDI device IDs and
	// registers-product-name registers.
	productCDIVendor = "fake-dra.example.com"
)

// legacyNodeName is the node name an older release bound its slices to: the node's FQDN, not a Kubernetes node.
func legacyNodeName(node string) string { return node + "." + legacyNodeDomain }

// productVendorID is cdi-id-unresolvable's ID: <vendor>/<class>=<name> with the product's vendor name instead.
func productVendorID(cdiID string) string {
	kind, name, _ := strings.Cut(cdiID, "=")
	_, class, _ := strings.Cut(kind, "/")
	return fmt.Sprintf("%s/%s=%s", productCDIVendor, class, name)
}

// nextDevice is the device after `device` (<profile>-<index>) in a pool of `count` devices, wrapping around.
func nextDevice(device string, count int) string {
	profile := device[:strings.LastIndex(device, "-")]
	return fmt.Sprintf("%s-%d", profile, (deviceIndex(device)+1)%count)
}

// rotated is batch-answers-swapped: the answer of each claim (in request order) goes to the claim before it.
func rotated(order []string, answers map[string]PrepareResult) map[string]PrepareResult {
	swapped := make(map[string]PrepareResult, len(answers))
	for position, uid := range order {
		swapped[uid] = answers[order[(position+1)%len(order)]]
	}
	return swapped
}

// splitWithRepeatedDevice is duplicate-device-names' pool: one slice's devices halved over two (resourceSliceCount
// 2), the second ending with the first slice's first device again. Other shapes are left as they are.
func splitWithRepeatedDevice(slices []resourceapi.ResourceSlice) []resourceapi.ResourceSlice {
	if len(slices) != 1 || len(slices[0].Spec.Devices) < 2 {
		return slices
	}
	devices := slices[0].Spec.Devices
	half := len(devices) / 2
	first, second := *slices[0].DeepCopy(), *slices[0].DeepCopy()
	first.Spec.Pool.ResourceSliceCount, second.Spec.Pool.ResourceSliceCount = 2, 2
	first.Spec.Devices = append([]resourceapi.Device(nil), devices[:half]...)
	second.Name += "-repeat"
	second.Spec.Devices = append(append([]resourceapi.Device(nil), devices[half:]...), devices[0])
	return []resourceapi.ResourceSlice{first, second}
}

// removeOtherInstancesSockets is removes-other-instances-sockets: every socket of this driver but its own is taken
// for a stale one and deleted.
func removeOtherInstancesSockets(c Config) {
	own := map[string]bool{c.RegistrationSocket(): true, c.DRASocket(): true, c.ControlSocket(): true}
	registered, _ := filepath.Glob(filepath.Join(filepath.Dir(c.RegistrationSocket()), c.DriverName+"*.sock"))
	served, _ := filepath.Glob(filepath.Join(c.PluginDir(), "*.sock"))
	for _, path := range append(registered, served...) {
		if !own[path] {
			_ = os.Remove(path)
		}
	}
}

// indexAsString is republish-changes-attribute-type's pool: every int attribute `index` published as a string.
func indexAsString(slices []resourceapi.ResourceSlice) []resourceapi.ResourceSlice {
	for _, slice := range slices {
		for _, device := range slice.Spec.Devices {
			if value, ok := device.Attributes["index"]; ok && value.IntValue != nil {
				text := strconv.FormatInt(*value.IntValue, 10)
				device.Attributes["index"] = resourceapi.DeviceAttribute{StringValue: &text}
			}
		}
	}
	return slices
}

// versionsAsStrings is publishes-version-as-string's pool: every version attribute published as a string of the same
// text, from the first publish on.
func versionsAsStrings(slices []resourceapi.ResourceSlice) []resourceapi.ResourceSlice {
	for _, slice := range slices {
		for _, device := range slice.Spec.Devices {
			for name, value := range device.Attributes {
				if value.VersionValue != nil {
					text := *value.VersionValue
					device.Attributes[name] = resourceapi.DeviceAttribute{StringValue: &text}
				}
			}
		}
	}
	return slices
}

// servedHealthVersions are the DRAResourceHealth versions the DRA socket serves: those GetInfo lists, but for
// health-v1alpha1-unserved, which keeps v1alpha1 in GetInfo and serves only the others.
func servedHealthVersions(c Config) []string {
	var served []string
	for _, version := range c.HealthServices {
		if version == "v1alpha1" && c.IsBroken(healthV1alpha1Unserved) {
			continue
		}
		served = append(served, version)
	}
	return served
}

// restoredDevices are the devices of the claims a process found in its record of prepared claims when it started
// (a restart with claims in use): health-lost-for-restored-claims watches only devices it prepares itself.
func restoredDevices(prepared *PreparedClaims) map[string]bool {
	restored := map[string]bool{}
	claims, err := prepared.All()
	if err != nil {
		return restored
	}
	for _, record := range claims {
		for _, device := range record.Devices {
			restored[device.DeviceName] = true
		}
	}
	return restored
}

// withoutDevices is health-lost-for-restored-claims' report: the health of every device but those `left` out.
func withoutDevices(health []deviceHealth, left map[string]bool) []deviceHealth {
	var kept []deviceHealth
	for _, device := range health {
		if !left[device.device] {
			kept = append(kept, device)
		}
	}
	return kept
}
