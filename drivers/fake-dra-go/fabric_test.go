package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

const fabricTestDriver = "d.example.com"

func fabricConfig() Config {
	return Config{
		DriverName: fabricTestDriver, NodeName: "n1", Profile: fabricProfile, Devices: 2, DriverVersion: "2.0.0",
		IDFormat: referenceIDs,
	}
}

// asJSON is `value` marshalled and read back as plain JSON values, to compare with the Python build's output.
func asJSON(t *testing.T, value any) any {
	t.Helper()
	encoded, err := json.Marshal(value)
	if err != nil {
		t.Fatal(err)
	}
	var decoded any
	if err := json.Unmarshal(encoded, &decoded); err != nil {
		t.Fatal(err)
	}
	return decoded
}

func parseJSON(t *testing.T, text string) any {
	t.Helper()
	var decoded any
	if err := json.Unmarshal([]byte(text), &decoded); err != nil {
		t.Fatal(err)
	}
	return decoded
}

func TestFabricDevicesAreThePythonBuilds(t *testing.T) {
	// fake_dra.fabric.device(config, i) for the same config (driver d.example.com, node n1, release 2.0.0); the
	// same with --device-id-format=words: the fabric profile's uuid does not follow it.
	python := []string{
		`{"attributes": {"driverVersion": {"version": "2.0.0"}, "fabric": {"string": "fake-fabric"}, "index": {"int": 0}, "model": {"string": "FakeGPU-9000"}, "uuid": {"string": "gpu-fabric-n1-0"}}, "bindingConditions": ["attached"], "bindingFailureConditions": ["attach-failed"], "bindsToNode": true, "capacity": {"memory": {"value": "16Gi"}}, "name": "gpu-fabric-0"}`,
		`{"attributes": {"driverVersion": {"version": "2.0.0"}, "fabric": {"string": "fake-fabric"}, "index": {"int": 1}, "model": {"string": "FakeGPU-9000"}, "uuid": {"string": "gpu-fabric-n1-1"}}, "bindingConditions": ["attached"], "bindingFailureConditions": ["attach-failed"], "bindsToNode": true, "capacity": {"memory": {"value": "16Gi"}}, "name": "gpu-fabric-1"}`,
	}
	words := fabricConfig()
	words.IDFormat = wordsIDs
	for _, c := range []Config{fabricConfig(), words} {
		for index, want := range python {
			if got := asJSON(t, fabricDevice(c, index)); !reflect.DeepEqual(got, parseJSON(t, want)) {
				t.Errorf("fabricDevice(%s, %d) = %v\nwant %s", c.IDFormat, index, got, want)
			}
		}
	}
}

// fabricClaim is a claim allocated gpu-fabric-0 of `driver` on pool n1, with a status.devices entry for `entryDevice`
// carrying `conditions` when they are given (the Python build's tests/unit/test_binding.py _claim).
func fabricClaim(t *testing.T, driver string, binding bool, entryDevice string, conditions ...string) *resourceapi.ResourceClaim {
	t.Helper()
	result := map[string]any{"request": "req", "driver": driver, "pool": "n1", "device": "gpu-fabric-0"}
	if binding {
		result["bindingConditions"] = []string{fabricBindingCondition}
		result["bindingFailureConditions"] = []string{fabricFailureCondition}
	}
	status := map[string]any{"allocation": map[string]any{
		"allocationTimestamp": "2026-12-02T03:00:00Z",
		"devices":             map[string]any{"results": []any{result}},
	}}
	if conditions != nil {
		var written []any
		for _, condition := range conditions {
			kind, state := cutCondition(condition)
			written = append(written, map[string]any{
				"type": kind, "status": state, "reason": "R", "message": "m", "lastTransitionTime": "2026-12-02T03:00:05Z",
			})
		}
		status["devices"] = []any{map[string]any{"driver": fabricTestDriver, "pool": "n1", "device": entryDevice, "conditions": written}}
	}
	return claimFromJSON(t, map[string]any{
		"metadata": map[string]any{"uid": "u", "name": "c", "namespace": "n", "resourceVersion": "5"},
		"status":   status,
	})
}

// cutCondition reads "type" or "type=Status" (True when not given).
func cutCondition(condition string) (kind, state string) {
	kind, state, found := strings.Cut(condition, "=")
	if !found {
		state = "True"
	}
	return kind, state
}

func claimFromJSON(t *testing.T, manifest map[string]any) *resourceapi.ResourceClaim {
	t.Helper()
	encoded, err := json.Marshal(manifest)
	if err != nil {
		t.Fatal(err)
	}
	claim := &resourceapi.ResourceClaim{}
	if err := json.Unmarshal(encoded, claim); err != nil {
		t.Fatal(err)
	}
	return claim
}

func pendingNames(claim *resourceapi.ResourceClaim) []string {
	names := []string{}
	for _, result := range pendingDevices(claim, fabricTestDriver) {
		names = append(names, result.Device)
	}
	return names
}

func TestPendingDevicesAreThePythonBuilds(t *testing.T) {
	// fake_dra.fabric.pending_devices of the same claims.
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  []string
	}{
		{"allocated with binding conditions, no entry", fabricClaim(t, fabricTestDriver, true, ""), []string{"gpu-fabric-0"}},
		{"Ready is not a binding condition", fabricClaim(t, fabricTestDriver, true, "gpu-fabric-0", "Ready"), []string{"gpu-fabric-0"}},
		{"already attached", fabricClaim(t, fabricTestDriver, true, "gpu-fabric-0", "attached"), []string{}},
		{"attached=False was written: handled", fabricClaim(t, fabricTestDriver, true, "gpu-fabric-0", "attached=False"), []string{}},
		{"failure written", fabricClaim(t, fabricTestDriver, true, "gpu-fabric-0", "attach-failed"), []string{}},
		{"another device's entry", fabricClaim(t, fabricTestDriver, true, "gpu-fabric-1", "attached"), []string{"gpu-fabric-0"}},
		{"no binding conditions", fabricClaim(t, fabricTestDriver, false, ""), []string{}},
		{"another driver's device", fabricClaim(t, "other.example.com", true, ""), []string{}},
		{"deallocated", &resourceapi.ResourceClaim{}, []string{}},
	} {
		if got := pendingNames(tc.claim); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: pending %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestEachAllocationIsAttachedOnceAndAgainAfterADeallocation(t *testing.T) {
	ledger := newAttachLedger()
	allocated := fabricClaim(t, fabricTestDriver, true, "")
	deallocated := allocated.DeepCopy()
	deallocated.Status = resourceapi.ResourceClaimStatus{}
	var started []int
	for _, claim := range []*resourceapi.ResourceClaim{
		allocated,
		allocated, // the claim changed again before the condition landed
		deallocated,
		allocated, // allocated again within the same second
	} {
		started = append(started, len(ledger.toStart(claim, fabricTestDriver)))
	}
	if !reflect.DeepEqual(started, []int{1, 0, 0, 1}) {
		t.Errorf("attaches started per observation: %v, want [1 0 0 1]", started)
	}
}

func TestEachStatusApplyCarriesEveryEntryWrittenForTheCurrentAllocation(t *testing.T) {
	// Server-side apply takes a manager's fields away when its next apply leaves them out: an apply naming only the
	// second device would delete the first device's entry.
	writes := newStatusWrites()
	var applied [][]string
	apply := func(entries []deviceStatusEntry) time.Time {
		var devices []string
		for _, entry := range entries {
			devices = append(devices, entry.Device)
		}
		applied = append(applied, devices)
		return time.Now()
	}
	entry := func(device string) deviceStatusEntry {
		return deviceStatusEntry{Driver: fabricTestDriver, Pool: "n1", Device: device, Conditions: []attachCondition{attachedCondition(time.Now())}}
	}
	writes.write("u", "2026-12-02T03:00:00Z", entry("gpu-fabric-0"), apply)
	writes.write("u", "2026-12-02T03:00:00Z", entry("gpu-fabric-1"), apply)
	writes.write("u", "2026-12-02T03:00:00Z", entry("gpu-fabric-0"), apply) // rewritten: keeps its place
	writes.write("u", "2026-12-02T03:00:09Z", entry("gpu-fabric-1"), apply) // allocated again
	want := [][]string{{"gpu-fabric-0"}, {"gpu-fabric-0", "gpu-fabric-1"}, {"gpu-fabric-0", "gpu-fabric-1"}, {"gpu-fabric-1"}}
	if !reflect.DeepEqual(applied, want) {
		t.Errorf("applied %v, want %v", applied, want)
	}
}

func TestConditionTimesHaveWholeSecondsInUTC(t *testing.T) {
	at := time.Date(2026, 12, 2, 4, 0, 5, 900_000_000, time.FixedZone("CET", 3600))
	if got := attachedCondition(at).LastTransitionTime; got != "2026-12-02T03:00:05Z" {
		t.Errorf("lastTransitionTime %s", got)
	}
}

func TestAttachLogJSONIsThePythonBuildsShapeOldestFirst(t *testing.T) {
	log := newAttachLog()
	if encoded, _ := json.Marshal(log.JSON()); string(encoded) != "[]" {
		t.Errorf("empty log: %s, want []", encoded)
	}
	at := func(seconds float64) time.Time { return time.Unix(0, int64(seconds*1e9)) }
	log.Record(Attachment{"u", "n", "c", "gpu-fabric-0", attachedOutcome, at(1.0), at(3.0), at(3.5)})
	log.Record(Attachment{"v", "n", "d", "gpu-fabric-1", failedOutcome, at(4.0), at(4.0), time.Time{}})
	want := []map[string]any{
		{"claim": "u", "namespace": "n", "name": "c", "device": "gpu-fabric-0", "outcome": "attached", "startedAt": 1.0, "finishedAt": 3.0, "conditionWrittenAt": 3.5},
		{"claim": "v", "namespace": "n", "name": "d", "device": "gpu-fabric-1", "outcome": "failed", "startedAt": 4.0, "finishedAt": 4.0, "conditionWrittenAt": 0.0},
	}
	if got := log.JSON(); !reflect.DeepEqual(got, want) {
		t.Errorf("JSON() = %v\nwant %v", got, want)
	}
}

// patches records the status applies the fake API server received; `refuse` makes it refuse them.
type patches struct {
	mu      sync.Mutex
	actions []clienttesting.PatchActionImpl
	at      []time.Time
	refuse  error
}

func (p *patches) react(action clienttesting.Action) (bool, runtime.Object, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.actions = append(p.actions, action.(clienttesting.PatchActionImpl))
	p.at = append(p.at, time.Now())
	if p.refuse != nil {
		return true, nil, p.refuse
	}
	return true, &resourceapi.ResourceClaim{}, nil
}

func (p *patches) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.actions)
}

func fakeClaimsAPI(applied *patches, objects ...runtime.Object) *fake.Clientset {
	client := fake.NewClientset(objects...)
	client.PrependReactor("patch", "resourceclaims", applied.react)
	return client
}

// withoutTransitionTimes blanks every lastTransitionTime of an apply body (they are the time of the write).
func withoutTransitionTimes(t *testing.T, body []byte) any {
	t.Helper()
	return parseJSON(t, regexp.MustCompile(`"lastTransitionTime":"[^"]*"`).ReplaceAllString(string(body), `"lastTransitionTime":""`))
}

func TestAttachWritesTheConditionAfterTheAttachAsThePythonBuildDoes(t *testing.T) {
	c := fabricConfig()
	c.AttachDelay = 30 * time.Millisecond
	applied := &patches{}
	faults, log, stop := newFaultSet(), newAttachLog(), make(chan struct{})
	defer close(stop)
	controller := newAttachController(c, fakeClaimsAPI(applied), faults, log, stop)
	claim := claimFromJSON(t, map[string]any{
		"metadata": map[string]any{"uid": "u1", "name": "c", "namespace": "n", "resourceVersion": "5"},
		"status": map[string]any{"allocation": map[string]any{"allocationTimestamp": "2026-12-02T03:00:00Z", "devices": map[string]any{"results": []any{
			map[string]any{"request": "req", "driver": fabricTestDriver, "pool": "n1", "device": "gpu-fabric-0", "bindingConditions": []string{"attached"}, "bindingFailureConditions": []string{"attach-failed"}},
			map[string]any{"request": "req", "driver": fabricTestDriver, "pool": "n1", "device": "gpu-fabric-1", "bindingConditions": []string{"attached"}, "bindingFailureConditions": []string{"attach-failed"}},
		}}}},
	})
	results := claim.Status.Allocation.Devices.Results
	controller.attach(claim, results[0])
	faults.Replace([]Fault{{Mode: attachFailureFault, Device: ptr.To("gpu-fabric-1"), Message: "fabric port down"}})
	controller.attach(claim, results[1])

	// The bodies the Python build's AttachController._attach applied for the same two attaches (lastTransitionTime
	// blanked), each under field manager d.example.com/attach-controller with force.
	python := []string{
		`{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "n", "uid": "u1"}, "status": {"devices": [{"conditions": [{"lastTransitionTime": "", "message": "attached to the node", "reason": "Attached", "status": "True", "type": "attached"}], "device": "gpu-fabric-0", "driver": "d.example.com", "pool": "n1"}]}}`,
		`{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "n", "uid": "u1"}, "status": {"devices": [{"conditions": [{"lastTransitionTime": "", "message": "attached to the node", "reason": "Attached", "status": "True", "type": "attached"}], "device": "gpu-fabric-0", "driver": "d.example.com", "pool": "n1"}, {"conditions": [{"lastTransitionTime": "", "message": "attach failed (injected): fabric port down", "reason": "AttachFailed", "status": "True", "type": "attach-failed"}], "device": "gpu-fabric-1", "driver": "d.example.com", "pool": "n1"}]}}`,
	}
	if len(applied.actions) != len(python) {
		t.Fatalf("%d applies, want %d", len(applied.actions), len(python))
	}
	for i, action := range applied.actions {
		if got := withoutTransitionTimes(t, action.Patch); !reflect.DeepEqual(got, parseJSON(t, python[i])) {
			t.Errorf("apply %d: %s\nwant %s", i, action.Patch, python[i])
		}
		options := action.PatchOptions
		if action.PatchType != types.ApplyPatchType || action.Subresource != "status" || action.Namespace != "n" || action.Name != "c" ||
			options.FieldManager != "d.example.com/attach-controller" || options.Force == nil || !*options.Force {
			t.Errorf("apply %d: %s %s/%s/%s manager %s force %v", i, action.PatchType, action.Namespace, action.Name, action.Subresource, options.FieldManager, options.Force)
		}
	}

	attachments := log.JSON()
	if len(attachments) != 2 || attachments[0]["outcome"] != "attached" || attachments[1]["outcome"] != "failed" {
		t.Fatalf("attachments %v", attachments)
	}
	for i, attachment := range attachments {
		started, finished, written := attachment["startedAt"].(float64), attachment["finishedAt"].(float64), attachment["conditionWrittenAt"].(float64)
		if finished-started < c.AttachDelay.Seconds() || unixSeconds(applied.at[i]) < finished || written < unixSeconds(applied.at[i]) {
			t.Errorf("attach %d: started %f, finished %f, applied %f, written %f", i, started, finished, unixSeconds(applied.at[i]), written)
		}
	}
}

func TestARefusedWriteIsRecordedAsNeverWritten(t *testing.T) {
	applied := &patches{refuse: apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, "c")}
	stop := make(chan struct{})
	defer close(stop)
	log := newAttachLog()
	controller := newAttachController(fabricConfig(), fakeClaimsAPI(applied), newFaultSet(), log, stop)
	claim := fabricClaim(t, fabricTestDriver, true, "")
	controller.attach(claim, claim.Status.Allocation.Devices.Results[0])
	if attachments := log.JSON(); len(attachments) != 1 || attachments[0]["conditionWrittenAt"] != 0.0 {
		t.Errorf("attachments %v", attachments)
	}
}

func TestAStoppedControllerAbandonsAnAttachInFlight(t *testing.T) {
	c := fabricConfig()
	c.AttachDelay = time.Hour
	applied, log, stop := &patches{}, newAttachLog(), make(chan struct{})
	controller := newAttachController(c, fakeClaimsAPI(applied), newFaultSet(), log, stop)
	controller.observe(fabricClaim(t, fabricTestDriver, true, ""))
	close(stop)
	controller.attaches.Wait()
	if applied.count() != 0 || len(log.JSON()) != 0 {
		t.Errorf("after stop: %d applies, %d attachments", applied.count(), len(log.JSON()))
	}
}

func TestTheControllerAttachesListedAndWatchedClaimsOnce(t *testing.T) {
	listed := fabricClaim(t, fabricTestDriver, true, "")
	watched := listed.DeepCopy()
	watched.UID, watched.Name = "w", "watched"
	applied, log, stop := &patches{}, newAttachLog(), make(chan struct{})
	client := fakeClaimsAPI(applied, listed)
	events := watch.NewFake()
	client.PrependWatchReactor("resourceclaims", func(clienttesting.Action) (bool, watch.Interface, error) {
		return true, events, nil
	})
	controller := newAttachController(fabricConfig(), client, newFaultSet(), log, stop)
	done := make(chan struct{})
	go func() {
		controller.run()
		close(done)
	}()
	events.Modify(listed) // changed again before the condition landed: no second attach
	events.Add(watched)
	events.Delete(watched)
	waitFor(t, func() bool { return applied.count() == 2 })
	close(stop)
	events.Stop() // the fake watch does not end with the request's context
	<-done
	controller.attaches.Wait()
	if applied.count() != 2 {
		t.Fatalf("%d applies, want 2", applied.count())
	}
	claims := map[string]bool{}
	for _, attachment := range log.JSON() {
		claims[attachment["claim"].(string)] = true
	}
	if !reflect.DeepEqual(claims, map[string]bool{"u": true, "w": true}) {
		t.Errorf("attached claims %v", claims)
	}
}

func waitFor(t *testing.T, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTheControllerStartsOnlyWithAUsableKubeconfig(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken")
	usable := filepath.Join(dir, "usable")
	if err := os.WriteFile(broken, []byte("not: [a kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	if err := os.WriteFile(usable, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	close(stop) // it starts, then ends at once
	for path, startable := range map[string]bool{filepath.Join(dir, "missing"): false, broken: false, usable: true} {
		c := fabricConfig()
		c.ControllerKubeconfig = path
		if err := startAttachController(c, newFaultSet(), newAttachLog(), stop); (err == nil) != startable {
			t.Errorf("%s: error %v", filepath.Base(path), err)
		}
	}
}
