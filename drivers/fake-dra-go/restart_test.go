package main

import (
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// restartedCore starts the driver core of `args` on the API of `client` over `stateDir`, publishes its pool, and
// returns it with the slice writes (create, update) the start made.
func restartedCore(t *testing.T, client *fake.Clientset, stateDir, args string) (*DriverCore, []string) {
	t.Helper()
	c, err := parseArgs(strings.Fields("--driver-name=d.example.com --node-name=n1 --devices=3 --state-dir="+stateDir+" "+args), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	core, err := newDriverCore(c, &DriverAPI{client: client, driverName: c.DriverName}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := core.Publish(); err != nil {
		t.Fatal(err)
	}
	var writes []string
	for _, action := range client.Actions() {
		if action.GetResource().Resource == "resourceslices" && (action.GetVerb() == "create" || action.GetVerb() == "update") {
			writes = append(writes, action.GetVerb()+" "+action.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice).Name)
		}
	}
	return core, writes
}

func TestARestartWithTheSameContentLeavesTheSlicesUntouchedAndANewContentGetsANewGeneration(t *testing.T) {
	client, dir := fake.NewClientset(), t.TempDir()
	first, writes := restartedCore(t, client, dir, "")
	if first.Generation() != 1 || len(writes) != 1 {
		t.Fatalf("first start: generation %d, writes %v", first.Generation(), writes)
	}
	again, writes := restartedCore(t, client, dir, "")
	if again.Generation() != 1 || len(writes) != 0 {
		t.Errorf("restart with the same content: generation %d (want 1), writes %v (want none)", again.Generation(), writes)
	}
	upgraded, writes := restartedCore(t, client, dir, "--driver-version=2.0.0")
	if upgraded.Generation() != 2 || len(writes) != 1 || !strings.HasPrefix(writes[0], "update ") {
		t.Errorf("restart as another version: generation %d (want 2), writes %v (want one update)", upgraded.Generation(), writes)
	}
	if err := upgraded.SetFaults([]Fault{{Mode: "unavailable", Device: ptr.To("gpu-0")}}); err != nil || upgraded.Generation() != 3 {
		t.Fatalf("taint: generation %d (want 3), %v", upgraded.Generation(), err)
	}
	untainted, writes := restartedCore(t, client, dir, "--driver-version=2.0.0")
	if untainted.Generation() != 4 || len(writes) != 1 {
		t.Errorf("restart without the taint: generation %d (want 4), writes %v", untainted.Generation(), writes)
	}
	broken, writes := restartedCore(t, client, dir, "--driver-version=2.0.0 --broken-mode="+rewritesSlicesOnRestart)
	if broken.Generation() != 5 || len(writes) != 1 {
		t.Errorf("%s: generation %d (want 5), writes %v (want the slice rewritten)", rewritesSlicesOnRestart, broken.Generation(), writes)
	}
}

func TestARestartAfterTheSlicesWereDeletedPublishesANewerGeneration(t *testing.T) {
	client, dir := fake.NewClientset(), t.TempDir()
	restartedCore(t, client, dir, "")
	core, _ := restartedCore(t, client, dir, "--driver-version=2.0.0")
	if err := core.api.DeletePool("n1"); err != nil {
		t.Fatal(err)
	}
	again, writes := restartedCore(t, client, dir, "--driver-version=2.0.0")
	if again.Generation() != 3 || len(writes) != 1 {
		t.Errorf("restart after a wipe: generation %d (want 3, above the stored 2), writes %v", again.Generation(), writes)
	}
}

func TestASliceWhoseTaintGotItsTimeFromTheServerIsTheSame(t *testing.T) {
	c := config(2)
	shape := poolShape{published: 2, unavailable: map[string]bool{"gpu-1": true}}
	desired := resourceSlices(c, 3, shape)[0]
	stored := *desired.DeepCopy()
	stored.Spec.Devices[1].Taints[0].TimeAdded = &metav1.Time{Time: time.Now().Truncate(time.Second)}
	if !sameSlice(stored, desired) || !samePool([]resourceapi.ResourceSlice{stored}, []resourceapi.ResourceSlice{desired}) {
		t.Error("a taint the server gave a TimeAdded reads as a change")
	}
	if got := withServerTaintTimes(desired, stored).Spec.Devices[1].Taints[0].TimeAdded; got == nil {
		t.Error("the update of a slice drops the taint's TimeAdded")
	}
	other := resourceSlices(c, 3, poolShape{published: 2})[0]
	if sameSlice(stored, other) || samePool([]resourceapi.ResourceSlice{stored}, []resourceapi.ResourceSlice{other}) {
		t.Error("a taint cleared reads as no change")
	}
	older := resourceSlices(c, 2, shape)[0]
	older.Name += "-old"
	if !samePool([]resourceapi.ResourceSlice{stored, older}, []resourceapi.ResourceSlice{desired}) {
		t.Error("a slice of an older generation left over makes the current one read as changed")
	}
}
