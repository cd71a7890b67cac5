package main

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

func TestBrokenModeHelpersBehaveAsThePythonBuilds(t *testing.T) {
	if got := productVendorID("d.example.com/gpu=uid-gpu-0"); got != "fake-dra.example.com/gpu=uid-gpu-0" {
		t.Errorf("productVendorID: %s", got)
	}
	if got := nextDevice("gpu-3", 4); got != "gpu-0" {
		t.Errorf("nextDevice wraps around: %s", got)
	}
	if got := legacyNodeName("n1"); got != "n1.nodes.fake-dra.example.com" {
		t.Errorf("legacyNodeName: %s", got)
	}
	swapped := rotated([]string{"a", "b", "c"}, map[string]PrepareResult{"a": {Error: "A"}, "b": {Error: "B"}, "c": {Error: "C"}})
	if swapped["a"].Error != "B" || swapped["b"].Error != "C" || swapped["c"].Error != "A" {
		t.Errorf("rotated: %+v", swapped)
	}
}

func TestDuplicateDeviceNamesRepeatsTheFirstDeviceInASecondSlice(t *testing.T) {
	split := splitWithRepeatedDevice(resourceSlices(config(4), 1, poolShape{published: 4}))
	if len(split) != 2 || split[1].Name != split[0].Name+"-repeat" {
		t.Fatalf("split: %d slices", len(split))
	}
	names := func(devices []resourceapi.Device) []string {
		var out []string
		for _, d := range devices {
			out = append(out, d.Name)
		}
		return out
	}
	first, second := names(split[0].Spec.Devices), names(split[1].Spec.Devices)
	if len(first) != 2 || len(second) != 3 || second[2] != first[0] || split[1].Spec.Pool.ResourceSliceCount != 2 {
		t.Fatalf("first %v, second %v", first, second)
	}
}

func TestIndexAsStringTurnsTheIntIndexAttributeIntoAString(t *testing.T) {
	changed := indexAsString(resourceSlices(config(2), 1, poolShape{published: 2}))
	for _, device := range changed[0].Spec.Devices {
		index := device.Attributes["index"]
		if index.IntValue != nil || index.StringValue == nil || *index.StringValue != device.Name[len(device.Name)-1:] {
			t.Errorf("%s: index %+v", device.Name, index)
		}
	}
}

func TestVersionsAsStringsPublishesEveryVersionAttributeAsItsText(t *testing.T) {
	changed := versionsAsStrings(resourceSlices(config(2), 1, poolShape{published: 2}))
	for _, device := range changed[0].Spec.Devices {
		version := device.Attributes["driverVersion"]
		if version.VersionValue != nil || version.StringValue == nil || *version.StringValue != "2.0.0" {
			t.Errorf("%s: driverVersion %+v", device.Name, version)
		}
		if device.Attributes["index"].IntValue == nil {
			t.Errorf("%s: index changed too: %+v", device.Name, device.Attributes["index"])
		}
	}
}

func TestCheckpointWrittenOutsideTheLockLosesConcurrentChangesOnDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prepared.json")
	claims, _ := loadPreparedClaims(path, "2.0.0", false)
	claims.writesOutsideLock = true
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(uid string) {
			defer wg.Done()
			_ = claims.Put(uid, ClaimRecord{Name: uid})
		}(fmt.Sprintf("uid-%d", i))
	}
	wg.Wait()
	inMemory, _ := claims.All()
	onDisk, _ := loadPreparedClaims(path, "2.0.0", false)
	fromDisk, _ := onDisk.All()
	if len(inMemory) != 4 || len(fromDisk) >= 4 {
		t.Fatalf("in memory %d claims (want 4), on disk %d (want fewer)", len(inMemory), len(fromDisk))
	}
}

func TestReusesRegistrationSocketNameDropsOnlyTheRegistrationSocketsInstanceSuffix(t *testing.T) {
	c := Config{DriverName: "d.example.com", KubeletRoot: "/k", RollingUpdateUID: "uid-1", Broken: map[string]bool{}}
	if got := filepath.Base(c.RegistrationSocket()); got != "d.example.com-uid-1-reg.sock" {
		t.Errorf("registration socket: %s", got)
	}
	c.Broken[reusesRegistrationSocketName] = true
	if got := filepath.Base(c.RegistrationSocket()); got != "d.example.com-reg.sock" {
		t.Errorf("broken registration socket: %s", got)
	}
	if got := filepath.Base(c.DRASocket()); got != "dra-uid-1.sock" {
		t.Errorf("broken DRA socket keeps its instance name: %s", got)
	}
}

func TestHealthV1alpha1UnservedKeepsV1alpha1InGetInfoButServesOnlyV1(t *testing.T) {
	c := config(4)
	c.HealthServices = []string{"v1", "v1alpha1"}
	if got := fmt.Sprint(servedHealthVersions(c)); got != "[v1 v1alpha1]" {
		t.Errorf("served without the bug: %s", got)
	}
	c.Broken = map[string]bool{healthV1alpha1Unserved: true}
	if got := fmt.Sprint(servedHealthVersions(c)); got != "[v1]" {
		t.Errorf("served with the bug: %s", got)
	}
	if got := fmt.Sprint(supportedVersions(c)); got != "[v1.DRAPlugin v1beta1.DRAPlugin v1.DRAResourceHealth v1alpha1.DRAResourceHealth]" {
		t.Errorf("GetInfo with the bug: %s", got)
	}
}

func TestHealthLostForRestoredClaimsLeavesOutOnlyTheDevicesOfClaimsFoundAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prepared.json")
	before, err := loadPreparedClaims(path, "v1", false)
	if err != nil {
		t.Fatal(err)
	}
	atFirstStart := restoredDevices(before) // a process that starts with no record leaves nothing out
	if err := before.Put("uid-1", ClaimRecord{Namespace: "ns", Name: "c", Devices: []PreparedDevice{{PoolName: "n1", DeviceName: "gpu-1"}}}); err != nil {
		t.Fatal(err)
	}
	after, err := loadPreparedClaims(path, "v1", false)
	if err != nil {
		t.Fatal(err)
	}
	restored := restoredDevices(after)
	health := []deviceHealth{{device: "gpu-0", healthy: true}, {device: "gpu-1", healthy: true}, {device: "gpu-2", healthy: false}}
	if got := fmt.Sprint(withoutDevices(health, restored)); got != fmt.Sprint([]deviceHealth{health[0], health[2]}) {
		t.Errorf("reported after a restart with gpu-1 prepared: %s", got)
	}
	if got := len(withoutDevices(health, atFirstStart)); got != 3 {
		t.Errorf("reported by a process that started with no record: %d of 3 devices", got)
	}
}
