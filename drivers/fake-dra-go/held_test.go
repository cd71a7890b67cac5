package main

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

const heldTestDriver = "d.example.com"

// heldClaim is a claim in namespace ns allocated `results` of heldTestDriver on node n1 (pool n1).
func heldClaim(t *testing.T, name, uid string, results ...map[string]any) *resourceapi.ResourceClaim {
	t.Helper()
	for _, result := range results {
		result["driver"], result["pool"], result["request"] = heldTestDriver, "n1", "gpu"
	}
	selector := map[string]any{"matchFields": []any{map[string]any{"key": "metadata.name", "operator": "In", "values": []string{"n1"}}}}
	return claimFromJSON(t, map[string]any{
		"metadata": map[string]any{"name": name, "namespace": "ns", "uid": uid},
		"status": map[string]any{"allocation": map[string]any{
			"devices":      map[string]any{"results": results},
			"nodeSelector": map[string]any{"nodeSelectorTerms": []any{selector}},
		}},
	})
}

func allocated(name string) map[string]any { return map[string]any{"device": name} }

// heldCore is a driver core for node n1 on a fake API server holding `claims`, its state in `stateDir`.
func heldCore(t *testing.T, stateDir string, refuse bool, claims ...*resourceapi.ResourceClaim) *DriverCore {
	t.Helper()
	return testCore(t, stateDir, func(c *Config) { c.RefuseHeldDevices = refuse }, &patches{}, claims...)
}

// testCore is a driver core for node n1 with 4 gpu devices, on a fake API server holding `claims` that records the
// status patches in `applied`; its state in `stateDir`, its configuration changed by `configure` (if not nil).
func testCore(t *testing.T, stateDir string, configure func(*Config), applied *patches, claims ...*resourceapi.ResourceClaim) *DriverCore {
	t.Helper()
	c := Config{
		DriverName: heldTestDriver, NodeName: "n1", Profile: gpuProfile, Devices: 4, DriverVersion: "2.0.0",
		IDFormat: referenceIDs, CDIDir: filepath.Join(stateDir, "cdi"), StateDir: stateDir, ReadyCondition: true,
		Broken: map[string]bool{},
	}
	if configure != nil {
		configure(&c)
	}
	objects := make([]runtime.Object, len(claims))
	for i, claim := range claims {
		objects[i] = claim
	}
	calls, err := openCallLog(filepath.Join(stateDir, "calls.jsonl"), c.NodeName)
	if err != nil {
		t.Fatal(err)
	}
	prepared, err := loadPreparedClaims(filepath.Join(stateDir, preparedFile), c.DriverVersion, false)
	if err != nil {
		t.Fatal(err)
	}
	core, err := newDriverCore(c, &DriverAPI{client: fakeClaimsAPI(applied, objects...), driverName: heldTestDriver}, calls, prepared)
	if err != nil {
		t.Fatal(err)
	}
	return core
}

func refOf(claim *resourceapi.ResourceClaim) ClaimRef {
	return ClaimRef{Namespace: claim.Namespace, UID: string(claim.UID), Name: claim.Name}
}

// prepareErrors prepares `claims` in one call and returns each claim's error ("" when prepared).
func prepareErrors(t *testing.T, core *DriverCore, claims ...*resourceapi.ResourceClaim) map[string]string {
	t.Helper()
	refs := make([]ClaimRef, len(claims))
	for i, claim := range claims {
		refs[i] = refOf(claim)
	}
	results, err := core.Prepare(refs)
	if err != nil {
		t.Fatalf("whole-call error: %v", err)
	}
	errs := map[string]string{}
	for uid, result := range results {
		errs[uid] = result.Error
	}
	return errs
}

func TestParseArgsRefusesHeldDevicesOnlyWithTheFlag(t *testing.T) {
	for args, want := range map[string]bool{"": false, "--refuse-devices-held-by-other-claims": true} {
		c, err := parseArgs(strings.Fields("--driver-name=d --node-name=n "+args), noEnv)
		if err != nil || c.RefuseHeldDevices != want {
			t.Errorf("%q: RefuseHeldDevices %v (error %v), want %v", args, c.RefuseHeldDevices, err, want)
		}
	}
}

func TestAClaimWhoseDeviceAnotherClaimHoldsIsRefusedUntilThatClaimIsUnprepared(t *testing.T) {
	old := heldClaim(t, "old", "uid-old", allocated("gpu-0"))
	next := heldClaim(t, "next", "uid-next", allocated("gpu-0"))
	other := heldClaim(t, "other", "uid-other", allocated("gpu-1"))
	core := heldCore(t, t.TempDir(), true, old, next, other)
	if errs := prepareErrors(t, core, old); errs["uid-old"] != "" {
		t.Fatalf("old: %v", errs)
	}
	errs := prepareErrors(t, core, next, other)
	// The refusal the Python build (removed since) gave for the same claims.
	python := "device d.example.com/n1/gpu-0 is still prepared for claim ns/old (uid uid-old) on node n1; retry once that claim is unprepared"
	if errs["uid-next"] != python {
		t.Errorf("refusal %q\nwant %q", errs["uid-next"], python)
	}
	if errs["uid-other"] != "" {
		t.Errorf("the refusal is per claim: the other claim of the call got %q", errs["uid-other"])
	}
	if _, ok, _ := core.prepared.Get("uid-next"); ok {
		t.Error("the refused claim was recorded as prepared")
	}
	if errs := prepareErrors(t, core, old); errs["uid-old"] != "" {
		t.Errorf("the holder's own prepare again (idempotent): %q", errs["uid-old"])
	}
	if errs := core.Unprepare([]ClaimRef{refOf(old)}); errs["uid-old"] != "" {
		t.Fatalf("unprepare old: %v", errs)
	}
	if errs := prepareErrors(t, core, next); errs["uid-next"] != "" {
		t.Errorf("the retry after the holder was unprepared: %q", errs["uid-next"])
	}
}

func TestWithoutTheFlagAHeldDeviceIsPreparedForAnotherClaim(t *testing.T) {
	old := heldClaim(t, "old", "uid-old", allocated("gpu-0"))
	next := heldClaim(t, "next", "uid-next", allocated("gpu-0"))
	core := heldCore(t, t.TempDir(), false, old, next)
	if errs := prepareErrors(t, core, old, next); errs["uid-old"] != "" || errs["uid-next"] != "" {
		t.Errorf("reference behaviour: %v", errs)
	}
}

func TestAdminAccessClaimsNeitherHoldNorAreRefused(t *testing.T) {
	admin := allocated("gpu-0")
	admin["adminAccess"] = true
	monitor := heldClaim(t, "monitor", "uid-monitor", admin)
	workload := heldClaim(t, "workload", "uid-workload", allocated("gpu-0"))
	second := heldClaim(t, "second", "uid-second", allocated("gpu-0"))
	core := heldCore(t, t.TempDir(), true, monitor, workload, second)
	// The monitor first: it does not hold the device for the workload; then it is prepared beside the workload.
	if errs := prepareErrors(t, core, monitor, workload); errs["uid-monitor"] != "" || errs["uid-workload"] != "" {
		t.Fatalf("monitor, then workload: %v", errs)
	}
	record, _, _ := core.prepared.Get("uid-monitor")
	if len(record.Devices) != 1 || !record.Devices[0].AdminAccess {
		t.Errorf("the monitor's record does not say admin access: %+v", record)
	}
	core.Unprepare([]ClaimRef{refOf(monitor)})
	if errs := prepareErrors(t, core, monitor); errs["uid-monitor"] != "" {
		t.Errorf("monitor beside the workload: %q", errs["uid-monitor"])
	}
	if errs := prepareErrors(t, core, second); !strings.Contains(errs["uid-second"], "ns/workload") {
		t.Errorf("a second workload on the device the first holds (not the monitor): %q", errs["uid-second"])
	}
}

func TestOnlyTheSameShareOfADeviceIsHeld(t *testing.T) {
	core := heldCore(t, t.TempDir(), true)
	shares := []PreparedDevice{{PoolName: "n1", DeviceName: "gpu-shared-0", ShareID: "s1"}}
	if err := core.prepared.Put("uid-a", ClaimRecord{Namespace: "ns", Name: "a", Devices: shares}); err != nil {
		t.Fatal(err)
	}
	another := []PreparedDevice{{PoolName: "n1", DeviceName: "gpu-shared-0", ShareID: "s2"}}
	if refused := core.reserveHeld(ClaimRef{"ns", "uid-b", "b"}, another); refused != "" {
		t.Errorf("another share of the device: %q", refused)
	}
	core.releaseHeld("uid-b")
	if refused := core.reserveHeld(ClaimRef{"ns", "uid-c", "c"}, shares); !strings.Contains(refused, "share s1") {
		t.Errorf("the same share for another claim: %q", refused)
	}
}

func TestAHoldSurvivesARestartOfTheDriver(t *testing.T) {
	state := t.TempDir()
	old := heldClaim(t, "old", "uid-old", allocated("gpu-2"))
	next := heldClaim(t, "next", "uid-next", allocated("gpu-2"))
	if errs := prepareErrors(t, heldCore(t, state, true, old, next), old); errs["uid-old"] != "" {
		t.Fatalf("old: %v", errs)
	}
	restarted := heldCore(t, state, true, old, next)
	if errs := prepareErrors(t, restarted, next); !strings.Contains(errs["uid-next"], "uid-old") {
		t.Errorf("after a restart: %q", errs["uid-next"])
	}
}

func TestOfConcurrentPreparesForOneDeviceOnlyOneHoldsIt(t *testing.T) {
	var claims []*resourceapi.ResourceClaim
	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		claims = append(claims, heldClaim(t, name, "uid-"+name, allocated("gpu-3")))
	}
	core := heldCore(t, t.TempDir(), true, claims...)
	var wg sync.WaitGroup
	var mu sync.Mutex
	prepared := 0
	for _, claim := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results, err := core.Prepare([]ClaimRef{refOf(claim)})
			if err == nil && results[string(claim.UID)].Error == "" {
				mu.Lock()
				prepared++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if prepared != 1 {
		t.Errorf("%d of %d claims prepared on one device, want 1", prepared, len(claims))
	}
}
