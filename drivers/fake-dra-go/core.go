package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

const (
	// A kubelet deletes every ResourceSlice of its node when it starts (k8s.io/kubernetes v1.37.2
	// pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go, wipeResourceSlices). After each registration but the first,
	// the driver checks its pool for this long and publishes it again if it went missing, as upstream's
	// kubeletplugin helper does.
	poolKeepWindow   = 30 * time.Second
	poolKeepInterval = time.Second
)

// ClaimRef is a claim as the kubelet names it in a request.
type ClaimRef struct{ Namespace, UID, Name string }

// PrepareResult is the answer for one claim: its devices, or an error.
type PrepareResult struct {
	Devices []PreparedDevice
	Error   string
}

// errClaimRefused: the whole NodePrepareResources call is refused (--unknown-claim-answer=whole-call).
var errClaimRefused = errors.New("prepare refused")

// lookup is a claim read for prepare: why this node cannot prepare it ("" if it can), the claim, this driver's
// results in it.
type lookup struct {
	problem string
	claim   *resourceapi.ResourceClaim
	mine    []resourceapi.DeviceRequestAllocationResult
}

// DriverCore is what the driver does for one node, independent of gRPC.
type DriverCore struct {
	config   Config
	api      *DriverAPI
	calls    *CallLog
	prepared *PreparedClaims
	faults   *FaultSet
	// attachments of the gpu-fabric profile's controller (fabric.go), shown on the control socket.
	attachments *AttachLog

	// poolMu guards the generation and serializes republishing.
	poolMu     sync.Mutex
	generation int64
	// publishes counts this process's publishes of the pool (republish-changes-attribute-type changes the second).
	publishes int
	// healthChanged is closed (and replaced) whenever the health of a device may have changed.
	healthMu      sync.Mutex
	healthChanged chan struct{}
	// restored: the devices of the claims found prepared at start, which health-lost-for-restored-claims leaves out.
	restored map[string]bool

	locksGuard sync.Mutex
	claimLocks map[string]*sync.Mutex
	// unprepared are the claims this process unprepared (only prepare-after-unprepare-fails looks at them).
	unprepared map[string]bool
	// announced are the claims ready-before-prepared announced on receipt, before a fault acted (claimReceived).
	announced map[string]bool
	// holdMu guards preparing: the claims being prepared and the devices they hold meanwhile
	// (--refuse-devices-held-by-other-claims, held.go).
	holdMu    sync.Mutex
	preparing map[string]preparing
	// prepares: successful prepares per claim (only counts-prepares-per-claim looks at them, prepare_count.go).
	prepares prepareCounts

	registrations int
	keeperStop    chan struct{}
	keeperOnce    sync.Once
}

func newDriverCore(c Config, api *DriverAPI, calls *CallLog, prepared *PreparedClaims) (*DriverCore, error) {
	core := &DriverCore{
		config: c, api: api, calls: calls, prepared: prepared, faults: newFaultSet(), attachments: newAttachLog(),
		claimLocks: map[string]*sync.Mutex{}, unprepared: map[string]bool{}, announced: map[string]bool{}, preparing: map[string]preparing{}, keeperStop: make(chan struct{}), healthChanged: make(chan struct{}),
	}
	if c.IsBroken(healthLostForRestoredClaims) {
		core.restored = restoredDevices(prepared)
	}
	generation, err := core.nextGeneration()
	core.generation = generation
	return core, err
}

// nextGeneration is the pool generation this run publishes at. A pool whose slices at their highest generation
// already say what this run would publish is kept as it is: the same generation, and no slice written again (its
// resourceVersion unchanged), as the upstream kubelet-plugin helper's ResourceSlice controller keeps it
// (k8s.io/dynamic-resource-allocation v0.37.2 resourceslice/resourceslicecontroller.go, syncPool: it compares each
// existing slice of the highest generation with the desired one, updates only those that differ, and logs "Kept
// generation because at most one update API call is necessary"). Other content (another version's attributes, a
// rescan that found other devices, no slice left) is published at a generation newer than any earlier run's, even
// if its slices were deleted: newer than every slice of the pool still published and than the one stored on disk.
func (d *DriverCore) nextGeneration() (int64, error) {
	if restartsAtOne(d.config) {
		return 1, d.storeGeneration(1) // the bug: the slices still published are not looked at
	}
	path := filepath.Join(d.config.StateDir, "generation")
	var stored int64
	if raw, err := os.ReadFile(path); err == nil {
		stored, _ = strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	}
	existing, err := d.api.ListSlices(d.config.NodeName)
	if err != nil {
		return 0, err
	}
	var published int64
	for _, item := range existing {
		published = max(published, item.Spec.Pool.Generation)
	}
	// rewrites-slices-on-restart never looks: every start republishes at a new generation.
	if published > 0 && !d.config.IsBroken(rewritesSlicesOnRestart) {
		d.generation = published
		if samePool(existing, d.desiredPool()) {
			if stored < published {
				return published, d.storeGeneration(published)
			}
			return published, nil
		}
	}
	generation := max(stored, published) + 1
	return generation, d.storeGeneration(generation)
}

func (d *DriverCore) storeGeneration(generation int64) error {
	path := filepath.Join(d.config.StateDir, "generation")
	return os.WriteFile(path, []byte(strconv.FormatInt(generation, 10)), 0o644)
}

// Generation is the pool generation currently published.
func (d *DriverCore) Generation() int64 {
	d.poolMu.Lock()
	defer d.poolMu.Unlock()
	return d.generation
}

// Publish writes the node's pool as the active faults say it should look, at the current generation; a slice that
// already says so is not written again.
func (d *DriverCore) Publish() error {
	d.poolMu.Lock()
	defer d.poolMu.Unlock()
	return d.publishLocked()
}

// desiredPool is the node's pool as the next publish writes it: what the active faults make of it at the current
// generation, with the broken modes' changes.
func (d *DriverCore) desiredPool() []resourceapi.ResourceSlice {
	pool := d.pool(d.config)
	if d.config.IsBroken(republishChangesAttributeType) && d.publishes > 0 {
		pool = indexAsString(pool) // the bug: a rescan reads the index back as a string
	}
	if d.config.IsBroken(publishesVersionAsString) {
		pool = versionsAsStrings(pool) // the bug: the version read from the device goes out as text
	}
	if d.config.IsBroken(duplicateDeviceNames) {
		pool = splitWithRepeatedDevice(pool)
	}
	if d.config.IsBroken(restartsGenerationBesideOldSlices) {
		pool = namedByGeneration(pool)
	}
	return pool
}

func (d *DriverCore) publishLocked() error {
	pool := d.desiredPool()
	d.publishes++
	if err := d.api.PublishPool(d.config.NodeName, pool, d.config.IsBroken(republishLeavesIncompletePool)); err != nil {
		return err
	}
	if d.config.IsBroken(publishesForWrongNode) {
		legacy := d.config
		legacy.NodeName = legacyNodeName(d.config.NodeName)
		return d.api.PublishPool(legacy.NodeName, d.pool(legacy), false)
	}
	return nil
}

func (d *DriverCore) pool(c Config) []resourceapi.ResourceSlice {
	names := deviceNames(c)
	return resourceSlices(c, d.generation, poolShape{
		published:     d.faults.PublishedDevices(c.Devices),
		unavailable:   d.faults.UnavailableDevices(names),
		informational: d.faults.InformationalDevices(names),
	})
}

// SetFaults replaces the active faults. When they change what the slice or the health stream says, the pool is
// republished at a new generation, and health streams send again, before SetFaults returns.
func (d *DriverCore) SetFaults(faults []Fault) error {
	before := sliceFaults(d.faults.Active())
	d.faults.Replace(faults)
	if sliceFaults(faults) == before {
		return nil
	}
	d.poolMu.Lock()
	var err error
	if !d.config.IsBroken(republishesSameGeneration) {
		d.generation++
		err = d.storeGeneration(d.generation)
	}
	if err == nil {
		err = d.publishLocked()
	}
	d.poolMu.Unlock()
	d.healthMu.Lock()
	close(d.healthChanged)
	d.healthChanged = make(chan struct{})
	d.healthMu.Unlock()
	return err
}

// HealthChanged is closed when the health of a device may have changed.
func (d *DriverCore) HealthChanged() <-chan struct{} {
	d.healthMu.Lock()
	defer d.healthMu.Unlock()
	return d.healthChanged
}

// Registered is called when a kubelet registered the driver: from the second time on (a kubelet restart), keep
// the pool published for a while.
func (d *DriverCore) Registered() {
	d.locksGuard.Lock()
	d.registrations++
	again := d.registrations > 1
	d.locksGuard.Unlock()
	if again {
		go d.keepPool()
	}
}

func (d *DriverCore) keepPool() {
	deadline := time.Now().Add(poolKeepWindow)
	for time.Now().Before(deadline) {
		d.poolMu.Lock()
		want := len(d.pool(d.config))
		d.poolMu.Unlock()
		if listed, err := d.api.ListSlices(d.config.NodeName); err == nil && len(listed) < want {
			_ = d.Publish() // the next round tries again; the kubelet may be restarting its node's credentials
		}
		select {
		case <-d.keeperStop:
			return
		case <-time.After(poolKeepInterval):
		}
	}
}

// StopKeepingPool ends the pool keeper (at shutdown, before the pool is deleted on exit).
func (d *DriverCore) StopKeepingPool() { d.keeperOnce.Do(func() { close(d.keeperStop) }) }

// Health is (device, healthy, message) for every device: an `unavailable` fault makes a device unhealthy.
func (d *DriverCore) Health() []deviceHealth {
	names := deviceNames(d.config)
	unavailable := d.faults.UnavailableDevices(names)
	if d.config.IsBroken(healthyWhileFailing) {
		unavailable = nil // the bug: its health check never looks at the device's state
	}
	var health []deviceHealth
	for _, name := range names {
		if unavailable[name] {
			message := "unavailable (injected)"
			if d.config.IsBroken(unhealthyWithoutMessage) {
				message = "" // the bug: the monitor sets the status and drops the reason it found
			}
			health = append(health, deviceHealth{device: name, healthy: false, message: message})
		} else {
			health = append(health, deviceHealth{device: name, healthy: true, message: "ok"})
		}
	}
	if d.config.IsBroken(healthLostForRestoredClaims) {
		health = withoutDevices(health, d.restored) // the bug: restored claims' devices were never handed to its monitor
	}
	return health
}

// HealthPool is the pool health reports name: the one the driver publishes (health-wrong-pool names another).
func (d *DriverCore) HealthPool() string {
	if d.config.IsBroken(healthWrongPool) {
		return d.config.DriverName // the bug: the pool named after the driver, not the node
	}
	return d.config.NodeName
}

type deviceHealth struct {
	device  string
	healthy bool
	message string
}

func (d *DriverCore) lock(uid string) *sync.Mutex {
	d.locksGuard.Lock()
	defer d.locksGuard.Unlock()
	if d.claimLocks[uid] == nil {
		d.claimLocks[uid] = &sync.Mutex{}
	}
	return d.claimLocks[uid]
}

func claimUIDs(claims []ClaimRef) []string {
	uids := make([]string, len(claims))
	for i, claim := range claims {
		uids[i] = claim.UID
	}
	return uids
}

// refusedCall is a whole-call refusal (--unknown-claim-answer=whole-call): why each claim (by UID) this node cannot
// prepare cannot be. A plain error, which gRPC answers with code Unknown and its text, as the upstream helper's; the
// call log (interceptors.go) records the claims it refused.
type refusedCall struct {
	claims  map[string]string
	reasons []string
}

func (e *refusedCall) Error() string {
	return fmt.Sprintf("%v: %s", errClaimRefused, strings.Join(e.reasons, "; "))
}

func (e *refusedCall) Unwrap() error { return errClaimRefused }

// wholeCallLookups looks every claim up before any is prepared (the upstream helper reads all claims before
// preparing any): a claim this node cannot prepare refuses the whole call.
func (d *DriverCore) wholeCallLookups(claims []ClaimRef) (map[string]*lookup, error) {
	lookups := map[string]*lookup{}
	refused := &refusedCall{claims: map[string]string{}}
	for _, claim := range claims {
		found := d.lookup(claim)
		lookups[claim.UID] = &found
		if found.problem != "" {
			refused.claims[claim.UID] = found.problem
			refused.reasons = append(refused.reasons, found.problem)
		}
	}
	if len(refused.claims) > 0 {
		return nil, refused
	}
	return lookups, nil
}

// heldLocks are claim locks, by claim UID, that the caller of PrepareHolding or UnprepareHolding holds already: the
// fault interceptor's (interceptors.go), for a claim it delayed. The claim's prepare or unprepare takes its lock over
// and releases it when done, as its own; the caller releases those of claims the call did not reach.
type heldLocks map[string]*sync.Mutex

// lockClaim returns the claim's lock, locked: the held one (no longer held then), else the claim's own, once free.
func (d *DriverCore) lockClaim(uid string, held heldLocks) *sync.Mutex {
	if lock, ok := held[uid]; ok {
		delete(held, uid)
		return lock
	}
	lock := d.lock(uid)
	lock.Lock()
	return lock
}

// Prepare is NodePrepareResources: each claim prepared, failures reported per claim. With whole-call refusals,
// every claim is looked up first, and one this node cannot prepare fails the call before any claim is prepared.
func (d *DriverCore) Prepare(claims []ClaimRef) (map[string]PrepareResult, error) {
	return d.PrepareHolding(claims, nil)
}

// PrepareHolding is Prepare of claims some of whose locks the caller holds already.
func (d *DriverCore) PrepareHolding(claims []ClaimRef, held heldLocks) (map[string]PrepareResult, error) {
	lookups := map[string]*lookup{}
	if d.config.WholeCallRefusal {
		var err error
		if lookups, err = d.wholeCallLookups(claims); err != nil {
			return nil, err
		}
	}
	results := map[string]PrepareResult{}
	for _, claim := range claims {
		results[claim.UID] = d.prepareOne(claim, lookups[claim.UID], held)
	}
	if d.config.IsBroken(batchAnswersSwapped) {
		results = rotated(claimUIDs(claims), results) // the bug: answers paired with the claim UIDs in another order
	}
	if d.config.IsBroken(countsPreparesPerClaim) {
		d.prepares.add(results)
	}
	return results, nil
}

func (d *DriverCore) prepareOne(ref ClaimRef, found *lookup, held heldLocks) PrepareResult {
	defer d.lockClaim(ref.UID, held).Unlock()
	known, ok, err := d.prepared.Get(ref.UID)
	if err != nil {
		return PrepareResult{Error: "read prepared claims: " + err.Error()}
	}
	if d.config.IsBroken(readyBeforePrepared) && !ok && !d.announcedOnReceipt(ref.UID) {
		d.announceReady(ref) // the bug: Ready=True before any of the node-local work
	}
	if ok {
		if d.config.IsBroken(nonIdempotentPrepare) {
			return PrepareResult{Error: fmt.Sprintf("claim %s is already prepared", ref.UID)}
		}
		if d.config.IsBroken(replayedPrepareSkipsCDISpecs) || !d.specsLost(ref.UID, known.Devices) {
			return PrepareResult{Devices: known.Devices} // idempotent per claim UID
		}
		// The specs are gone (a reboot empties the CDI dir; the record survives it): the kubelet hands the recorded
		// IDs to the runtime, so they are written again, from the claim as the first prepare wrote them.
		if found == nil {
			looked := d.lookup(ref)
			found = &looked
		}
		if found.problem != "" {
			return PrepareResult{Error: "write lost CDI spec again: " + found.problem}
		}
		names := make([]string, len(known.Devices))
		for i, device := range known.Devices {
			names[i] = device.DeviceName
		}
		if len(names) != len(found.mine) {
			return PrepareResult{Error: fmt.Sprintf("write lost CDI spec again: recorded %d devices, the claim has %d", len(names), len(found.mine))}
		}
		sharing, err := d.claimSharing(found)
		if err != nil {
			return PrepareResult{Error: "write lost CDI spec again: " + err.Error()}
		}
		if _, err := d.writeSpecs(ref.UID, found.mine, names, sharing); err != nil {
			return PrepareResult{Error: "write lost CDI spec again: " + err.Error()}
		}
		return PrepareResult{Devices: known.Devices}
	}
	if d.config.IsBroken(prepareAfterUnprepareFails) && d.wasUnprepared(ref.UID) {
		return PrepareResult{Error: fmt.Sprintf("claim %s was unprepared; it cannot be prepared again", ref.UID)}
	}
	if found == nil {
		looked := d.lookup(ref)
		found = &looked
	}
	if found.problem != "" && found.claim == nil && d.config.IsBroken(reportsUnknownClaimPrepared) {
		return PrepareResult{} // the bug: a claim it cannot read is "prepared" with nothing to set up
	}
	if found.problem != "" {
		return PrepareResult{Error: found.problem}
	}
	sharing, err := d.claimSharing(found) // opaque.go: a config it cannot decode fails this claim only
	if err != nil {
		return PrepareResult{Error: err.Error()}
	}
	names := make([]string, len(found.mine))
	for i, result := range found.mine {
		names[i] = result.Device
		if d.config.IsBroken(preparesWrongDevice) {
			names[i] = nextDevice(result.Device, d.config.Devices) // the bug: the next device in its pool
		}
	}
	if d.config.RefuseHeldDevices {
		wanted := make([]PreparedDevice, len(found.mine))
		for i, result := range found.mine {
			wanted[i] = PreparedDevice{PoolName: result.Pool, DeviceName: names[i], ShareID: d.shareID(result), AdminAccess: adminAccess(result)}
		}
		if refused := d.reserveHeld(ref, wanted); refused != "" {
			return PrepareResult{Error: refused}
		}
		defer d.releaseHeld(ref.UID)
	}
	cdiIDs, err := d.writeSpecs(ref.UID, found.mine, names, sharing)
	if err != nil {
		return PrepareResult{Error: "write CDI spec: " + err.Error()}
	}
	if d.config.IsBroken(cdiIDUnresolvable) {
		for i, id := range cdiIDs {
			cdiIDs[i] = productVendorID(id) // the bug: no spec defines these
		}
	}
	prepared := make([]PreparedDevice, len(found.mine))
	entries := make([]map[string]any, len(found.mine))
	for i, result := range found.mine {
		request := result.Request
		if d.config.IsBroken(answersUnderFirstRequest) {
			request = found.mine[0].Request // the bug: every device answered under the first request's name
		}
		prepared[i] = PreparedDevice{
			RequestNames: []string{request}, PoolName: result.Pool, DeviceName: names[i],
			CDIDeviceIDs: []string{cdiIDs[i]}, ShareID: d.shareID(result), AdminAccess: adminAccess(result),
		}
		entries[i] = d.statusEntry(result, cdiIDs)
		if sharing[i] != "" {
			entries[i]["data"].(map[string]any)[sharingData] = sharing[i]
		}
	}
	if d.config.IsBroken(statusForOtherDriversDevices) {
		entries = append(entries, d.otherDriversEntries(found.claim)...)
	}
	if _, ok := d.faults.Find("status-write-failure", ref.UID, names); ok {
		_ = d.removeSpecs(ref.UID, prepared)
		return PrepareResult{Error: "write status.devices: failed (injected status-write failure)"}
	}
	if !d.config.IsBroken(omitsDeclaredStatus) { // the bug: no status write at all
		err := d.api.ApplyDeviceStatus(found.claim, entries)
		if err != nil && !d.config.IsBroken(ignoresStatusWriteFailure) {
			_ = d.removeSpecs(ref.UID, prepared)
			return PrepareResult{Error: "write status.devices: " + denial(err)}
		}
	}
	if err := d.prepared.Put(ref.UID, ClaimRecord{Namespace: ref.Namespace, Name: ref.Name, Devices: prepared}); err != nil {
		return PrepareResult{Error: "record prepared claim: " + err.Error()}
	}
	if d.config.IsBroken(rewritesStatusAfterPrepare) && !d.config.IsBroken(omitsDeclaredStatus) {
		go d.rewriteStatusLater(found.claim, entries)
	}
	return PrepareResult{Devices: prepared}
}

// rewriteStatusLater is rewrites-status-after-prepare: a "refresh" of the claim's status.devices a few seconds
// after its prepare, whether or not the claim was unprepared meanwhile.
func (d *DriverCore) rewriteStatusLater(claim *resourceapi.ResourceClaim, entries []map[string]any) {
	time.Sleep(statusRefreshDelay)
	_ = d.api.ApplyDeviceStatus(claim, entries) // refused once the claim is deallocated; the attempt is the bug
}

// shareID is the answer's share ID for a result that is a share of a device (prepare-ignores-share-id leaves it
// out).
func (d *DriverCore) shareID(result resourceapi.DeviceRequestAllocationResult) string {
	if result.ShareID == nil || d.config.IsBroken(prepareIgnoresShareID) {
		return ""
	}
	return string(*result.ShareID)
}

// adminAccess says whether a result is a device allocated for administrative access.
func adminAccess(result resourceapi.DeviceRequestAllocationResult) bool {
	return result.AdminAccess != nil && *result.AdminAccess
}

// writeSpecs writes the claim's CDI specs and returns one CDI device ID per allocated device: one spec per claim,
// or with shared devices one per share. `sharing` is each device's sharing mode from its configs ("": none).
func (d *DriverCore) writeSpecs(uid string, mine []resourceapi.DeviceRequestAllocationResult, names, sharing []string) ([]string, error) {
	if d.config.Profile == sharedProfile {
		return writeShareSpecs(d.config, uid, mine)
	}
	_, withoutEdits := d.faults.Find("cdi-without-edits", uid, names)
	setUp := names
	if d.config.IsBroken(cdiEditsNameOtherDevice) {
		setUp = make([]string, len(names))
		for i, name := range names {
			setUp[i] = nextDevice(name, d.config.Devices) // the bug: the edits set up the next device
		}
	}
	return writeCDISpec(d.config, uid, names, setUp, sharing, !withoutEdits)
}

// specsLost says whether a spec file the claim's recorded devices are defined in is missing from the CDI dir.
func (d *DriverCore) specsLost(uid string, devices []PreparedDevice) bool {
	var paths []string
	if d.config.Profile == sharedProfile {
		for _, device := range devices {
			for _, id := range device.CDIDeviceIDs {
				_, share, _ := strings.Cut(id, "=")
				paths = append(paths, shareSpecPath(d.config, share))
			}
		}
	} else if len(devices) > 0 {
		paths = append(paths, cdiSpecPath(d.config, uid))
	}
	for _, path := range paths {
		if _, err := os.Stat(path); err != nil {
			return true
		}
	}
	return false
}

// removeSpecs deletes the CDI specs of one claim: its own file, or with shared devices the files of its shares.
func (d *DriverCore) removeSpecs(uid string, prepared []PreparedDevice) error {
	if d.config.Profile == sharedProfile {
		return removeShareSpecs(d.config, prepared)
	}
	return removeCDISpec(d.config, uid)
}

// claimReceived is what the driver does with a claim of NodePrepareResources before the protocol-level faults
// (interceptors.go) act on it, its lock held: nothing, but ready-before-prepared announces Ready=True for a claim not
// prepared yet, before the fault delays or fails its prepare, as it does before any work of its own.
func (d *DriverCore) claimReceived(ref ClaimRef) {
	if !d.config.IsBroken(readyBeforePrepared) {
		return
	}
	if _, ok, err := d.prepared.Get(ref.UID); err != nil || ok {
		return
	}
	d.announceReady(ref) // the bug: Ready=True before any of the node-local work
	d.locksGuard.Lock()
	d.announced[ref.UID] = true
	d.locksGuard.Unlock()
}

// announcedOnReceipt says whether claimReceived announced the claim since its last prepare, and forgets it: the
// prepare that follows does not announce again.
func (d *DriverCore) announcedOnReceipt(uid string) bool {
	d.locksGuard.Lock()
	defer d.locksGuard.Unlock()
	announced := d.announced[uid]
	delete(d.announced, uid)
	return announced
}

// announceReady is ready-before-prepared: Ready=True for the claim's devices before preparing anything.
func (d *DriverCore) announceReady(ref ClaimRef) {
	found := d.lookup(ref)
	if found.problem != "" {
		return // the real prepare reports what went wrong
	}
	ids := make([]string, len(found.mine))
	entries := make([]map[string]any, len(found.mine))
	for i, result := range found.mine {
		ids[i] = cdiDeviceID(d.config, ref.UID, result.Device)
	}
	for i, result := range found.mine {
		entries[i] = d.statusEntry(result, ids)
	}
	_ = d.api.ApplyDeviceStatus(found.claim, entries)
}

// recordRefusal is writes-status-for-foreign-claims: a refusal (Ready=False) in the claim's status.devices.
func (d *DriverCore) recordRefusal(claim *resourceapi.ResourceClaim, mine []resourceapi.DeviceRequestAllocationResult, problem string) {
	entries := make([]map[string]any, len(mine))
	for i, result := range mine {
		entries[i] = d.statusEntry(result, []string{})
		entries[i]["conditions"] = []map[string]string{readyCondition("False", "WrongNode", problem)}
	}
	_ = d.api.ApplyDeviceStatus(claim, entries) // the API server refuses it; the attempt is the bug
}

// lookup reads the claim and finds this driver's results in it, or why this node cannot prepare it.
func (d *DriverCore) lookup(ref ClaimRef) lookup {
	claim, err := d.api.GetClaim(ref.Namespace, ref.Name)
	if err != nil {
		return lookup{problem: fmt.Sprintf("get claim %s/%s: %s", ref.Namespace, ref.Name, denial(err))}
	}
	where := fmt.Sprintf("claim %s/%s", ref.Namespace, ref.Name)
	if string(claim.UID) != ref.UID {
		return lookup{problem: fmt.Sprintf("%s has UID %s, the request names %s", where, claim.UID, ref.UID), claim: claim}
	}
	allocation := claim.Status.Allocation
	if allocation == nil {
		return lookup{problem: where + " is not allocated", claim: claim}
	}
	var mine []resourceapi.DeviceRequestAllocationResult
	for _, result := range allocation.Devices.Results {
		if result.Driver == d.config.DriverName {
			mine = append(mine, result)
		}
	}
	if len(mine) == 0 {
		return lookup{problem: fmt.Sprintf("%s has no devices of driver %s", where, d.config.DriverName), claim: claim}
	}
	if node := allocatedNode(allocation); node != d.config.NodeName && !d.config.IsBroken(preparesForeignClaims) {
		if node == "" {
			node = "(not a single node)"
		}
		problem := fmt.Sprintf("%s is allocated to node %s, not %s", where, node, d.config.NodeName)
		if d.config.IsBroken(writesStatusForForeignClaims) {
			d.recordRefusal(claim, mine, problem)
		}
		return lookup{problem: problem, claim: claim}
	}
	return lookup{claim: claim, mine: mine}
}

// allocatedNode is the single node an allocation is limited to (metadata.name In [node]), or "".
func allocatedNode(allocation *resourceapi.AllocationResult) string {
	if allocation.NodeSelector == nil || len(allocation.NodeSelector.NodeSelectorTerms) != 1 {
		return ""
	}
	term := allocation.NodeSelector.NodeSelectorTerms[0]
	if len(term.MatchExpressions) > 0 || len(term.MatchFields) != 1 {
		return ""
	}
	field := term.MatchFields[0]
	if field.Key != "metadata.name" || field.Operator != "In" || len(field.Values) != 1 {
		return ""
	}
	return field.Values[0]
}

// statusEntry is the status.devices entry of one device: Ready=True (unless conditions are off) and data.
func (d *DriverCore) statusEntry(result resourceapi.DeviceRequestAllocationResult, cdiIDs []string) map[string]any {
	data := map[string]any{"profile": d.config.Profile, "node": d.config.NodeName, "cdiDeviceIDs": cdiIDs}
	for key, value := range deviceData(d.config, result.Device) {
		data[key] = value
	}
	entry := map[string]any{"driver": d.config.DriverName, "pool": result.Pool, "device": result.Device, "data": data}
	if result.ShareID != nil && *result.ShareID != "" { // status.devices is keyed by share too
		entry["shareID"] = string(*result.ShareID)
	}
	if d.config.Profile == nicProfile {
		index := deviceIndex(result.Device)
		if d.config.IsBroken(networkDataMismatch) {
			index++ // the bug: interfaces numbered from 1 here, from 0 in the slice
		}
		entry["networkData"] = networkData(d.config, index)
	}
	if d.config.ReadyCondition {
		entry["conditions"] = []map[string]string{readyCondition("True", "Prepared", "prepared by fake-dra")}
	}
	return entry
}

// otherDriversEntries is status-for-other-drivers-devices: an entry for each device the claim was allocated from
// another driver, under that driver's name, as if this driver had prepared it.
func (d *DriverCore) otherDriversEntries(claim *resourceapi.ResourceClaim) []map[string]any {
	var entries []map[string]any
	for _, result := range claim.Status.Allocation.Devices.Results {
		if result.Driver != d.config.DriverName {
			entry := d.statusEntry(result, []string{})
			entry["driver"] = result.Driver
			entries = append(entries, entry)
		}
	}
	return entries
}

// readyCondition is a Ready condition of a status.devices entry, as of now.
func readyCondition(status, reason, message string) map[string]string {
	return map[string]string{
		"type": "Ready", "status": status, "reason": reason, "message": message,
		"lastTransitionTime": time.Now().UTC().Format("2006-01-02T15:04:05Z"),
	}
}

// Unprepare is NodeUnprepareResources: the error text per claim ("" for success); unknown claims succeed.
func (d *DriverCore) Unprepare(claims []ClaimRef) map[string]string {
	return d.UnprepareHolding(claims, nil)
}

// UnprepareHolding is Unprepare of claims some of whose locks the caller holds already.
func (d *DriverCore) UnprepareHolding(claims []ClaimRef, held heldLocks) map[string]string {
	results := map[string]string{}
	for position, claim := range claims {
		if position > 0 && d.config.IsBroken(unprepareHandlesOnlyFirst) {
			results[claim.UID] = "" // the bug: reported unprepared, never undone
			continue
		}
		results[claim.UID] = d.unprepareOne(claim, held)
	}
	return results
}

func (d *DriverCore) unprepareOne(ref ClaimRef, held heldLocks) string {
	defer d.lockClaim(ref.UID, held).Unlock()
	record, ok, err := d.prepared.Get(ref.UID)
	if err != nil {
		return "read prepared claims: " + err.Error()
	}
	if !ok {
		if d.config.IsBroken(unprepareUnknownFails) {
			return fmt.Sprintf("claim %s is not prepared here", ref.UID)
		}
		return "" // never prepared here, or already unprepared: idempotent
	}
	if d.config.IsBroken(countsPreparesPerClaim) && d.prepares.release(ref.UID) {
		return "" // the bug: a prepare is left over, so the claim is still in use; nothing is undone
	}
	if !d.config.KeepStatusAfterUnprepare {
		if problem := d.removeStatus(ref); problem != "" {
			return problem
		}
	}
	switch {
	case d.config.IsBroken(unprepareRemovesOtherClaimsCDI):
		removeDriverSpecs(d.config) // the bug: every claim's spec
	case !d.config.IsBroken(unprepareLeavesCDISpecs):
		if err := d.removeSpecs(ref.UID, record.Devices); err != nil {
			return "remove CDI spec: " + err.Error()
		}
	}
	if err := d.prepared.Remove(ref.UID); err != nil {
		return "forget prepared claim: " + err.Error()
	}
	d.locksGuard.Lock()
	d.unprepared[ref.UID] = true
	d.locksGuard.Unlock()
	return ""
}

// wasUnprepared says whether this process unprepared the claim (prepare-after-unprepare-fails looks at it).
func (d *DriverCore) wasUnprepared(uid string) bool {
	d.locksGuard.Lock()
	defer d.locksGuard.Unlock()
	return d.unprepared[uid]
}

// removeStatus removes this driver's status.devices entries from the claim; a deleted claim has none left.
func (d *DriverCore) removeStatus(ref ClaimRef) string {
	claim, err := d.api.GetClaim(ref.Namespace, ref.Name)
	if err == nil && string(claim.UID) == ref.UID {
		err = d.api.ApplyDeviceStatus(claim, nil)
	}
	if err != nil && (!apierrors.IsNotFound(err) || d.config.IsBroken(unprepareNeedsClaim)) {
		return "remove status.devices: " + denial(err)
	}
	return ""
}
