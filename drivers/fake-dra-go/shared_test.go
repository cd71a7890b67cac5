package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

func sharedConfig(cdiDir string) Config {
	return Config{
		DriverName: "d.example.com", NodeName: "n1", CDIDir: cdiDir, Profile: sharedProfile, Devices: 2,
		DriverVersion: "2.0.0", IDFormat: referenceIDs,
	}
}

// sameJSON says whether two JSON documents hold the same values, whatever their spacing and key order.
func sameJSON(t *testing.T, got, want []byte) bool {
	t.Helper()
	var gotValue, wantValue any
	if err := json.Unmarshal(got, &gotValue); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if err := json.Unmarshal(want, &wantValue); err != nil {
		t.Fatalf("%s: %v", want, err)
	}
	return reflect.DeepEqual(gotValue, wantValue)
}

func TestSharedDevicesAreThePythonBuilds(t *testing.T) {
	words := sharedConfig("")
	words.NodeName, words.DriverVersion, words.IDFormat = "kwok-node-7", "1.3.0", wordsIDs
	// json.dumps(fake_dra.shared.shared_device(config, index), sort_keys=True) for the same configuration; the words
	// ID format changes nothing in this profile.
	for _, tc := range []struct {
		config Config
		index  int
		python string
	}{
		{sharedConfig(""), 1, `{"allowMultipleAllocations": true, "attributes": {"driverVersion": {"version": "2.0.0"}, "index": {"int": 1}, "model": {"string": "FakeGPU-9000-shared"}, "uuid": {"string": "gpu-shared-n1-1"}}, "capacity": {"compute": {"requestPolicy": {"default": "25", "validValues": ["25", "50", "100"]}, "value": "100"}, "memory": {"requestPolicy": {"default": "4Gi", "validRange": {"max": "16Gi", "min": "1Gi", "step": "1Gi"}}, "value": "16Gi"}}, "name": "gpu-shared-1"}`},
		{words, 12, `{"allowMultipleAllocations": true, "attributes": {"driverVersion": {"version": "1.3.0"}, "index": {"int": 12}, "model": {"string": "FakeGPU-9000-shared"}, "uuid": {"string": "gpu-shared-kwok-node-7-12"}}, "capacity": {"compute": {"requestPolicy": {"default": "25", "validValues": ["25", "50", "100"]}, "value": "100"}, "memory": {"requestPolicy": {"default": "4Gi", "validRange": {"max": "16Gi", "min": "1Gi", "step": "1Gi"}}, "value": "16Gi"}}, "name": "gpu-shared-12"}`},
	} {
		device, err := json.Marshal(sharedDevice(tc.config, tc.index))
		if err != nil {
			t.Fatal(err)
		}
		if !sameJSON(t, device, []byte(tc.python)) {
			t.Errorf("device %d:\n got %s\nwant %s", tc.index, device, tc.python)
		}
	}
}

// shareResults are allocation results as the driver reads them from a claim: two shares and a result without one.
func shareResults(t *testing.T) []resourceapi.DeviceRequestAllocationResult {
	t.Helper()
	claimJSON := `[
		{"device": "gpu-shared-0", "pool": "n1", "request": "r", "driver": "d.example.com", "shareID": "abc",
		 "consumedCapacity": {"memory": "4Gi", "compute": "25"}},
		{"device": "gpu-shared-1", "pool": "n1", "request": "r2", "driver": "d.example.com", "shareID": "def",
		 "consumedCapacity": {"memory": "16Gi", "compute": "100", "example.com/bandwidth": "1500m"}},
		{"device": "gpu-shared-0", "pool": "n1", "request": "r3", "driver": "d.example.com"}
	]`
	var results []resourceapi.DeviceRequestAllocationResult
	if err := json.Unmarshal([]byte(claimJSON), &results); err != nil {
		t.Fatal(err)
	}
	return results
}

func TestShareSpecsAreThePythonBuilds(t *testing.T) {
	dir := t.TempDir()
	c := sharedConfig(filepath.Join(dir, "cdi")) // missing: the first write creates it
	ids, err := writeShareSpecs(c, "uid-1", shareResults(t))
	if err != nil {
		t.Fatal(err)
	}
	// fake_dra.shared.write_share_specs(config, "uid-1", <the same results>): its return value and the files it wrote.
	wantIDs := []string{
		"d.example.com/gpu-shared=gpu-shared-0-abc", "d.example.com/gpu-shared=gpu-shared-1-def",
		"d.example.com/gpu-shared=gpu-shared-0",
	}
	pythonSpecs := map[string]string{
		"d.example.com-share-gpu-shared-0-abc.json": `{"cdiVersion": "0.8.0", "kind": "d.example.com/gpu-shared", "devices": [{"name": "gpu-shared-0-abc", "containerEdits": {"env": ["FAKE_DRA_DEVICE=gpu-shared-0", "FAKE_DRA_CLAIM=uid-1", "FAKE_DRA_SHARE=abc", "FAKE_DRA_COMPUTE=25", "FAKE_DRA_MEMORY=4Gi"]}}], "containerEdits": {}}`,
		"d.example.com-share-gpu-shared-0.json":     `{"cdiVersion": "0.8.0", "kind": "d.example.com/gpu-shared", "devices": [{"name": "gpu-shared-0", "containerEdits": {"env": ["FAKE_DRA_DEVICE=gpu-shared-0", "FAKE_DRA_CLAIM=uid-1", "FAKE_DRA_SHARE="]}}], "containerEdits": {}}`,
		"d.example.com-share-gpu-shared-1-def.json": `{"cdiVersion": "0.8.0", "kind": "d.example.com/gpu-shared", "devices": [{"name": "gpu-shared-1-def", "containerEdits": {"env": ["FAKE_DRA_DEVICE=gpu-shared-1", "FAKE_DRA_CLAIM=uid-1", "FAKE_DRA_SHARE=def", "FAKE_DRA_COMPUTE=100", "FAKE_DRA_EXAMPLE.COM/BANDWIDTH=1500m", "FAKE_DRA_MEMORY=16Gi"]}}], "containerEdits": {}}`,
	}
	if !slices.Equal(ids, wantIDs) {
		t.Errorf("IDs: %q, want %q", ids, wantIDs)
	}
	if names := specNames(t, c.CDIDir); len(names) != len(pythonSpecs) {
		t.Errorf("spec files: %q, want the %d of the Python build", names, len(pythonSpecs))
	}
	for name, python := range pythonSpecs {
		spec, err := os.ReadFile(filepath.Join(c.CDIDir, name))
		if err != nil {
			t.Error(err)
		} else if !sameJSON(t, spec, []byte(python)) {
			t.Errorf("%s:\n got %s\nwant %s", name, spec, python)
		}
	}
}

func TestRemovingAClaimsSharesLeavesOtherShares(t *testing.T) {
	c := sharedConfig(t.TempDir())
	ids, err := writeShareSpecs(c, "uid-1", shareResults(t))
	if err != nil {
		t.Fatal(err)
	}
	first := []PreparedDevice{{DeviceName: "gpu-shared-0", CDIDeviceIDs: ids[:1]}}
	if err := removeShareSpecs(c, first); err != nil {
		t.Fatal(err)
	}
	if names := specNames(t, c.CDIDir); !slices.Equal(names, []string{"d.example.com-share-gpu-shared-0.json", "d.example.com-share-gpu-shared-1-def.json"}) {
		t.Errorf("after removing one share: %q", names)
	}
	all := []PreparedDevice{{CDIDeviceIDs: ids[:2]}, {CDIDeviceIDs: ids[2:]}}
	for range 2 { // the second time every file is already gone
		if err := removeShareSpecs(c, all); err != nil {
			t.Fatal(err)
		}
	}
	if names := specNames(t, c.CDIDir); len(names) != 0 {
		t.Errorf("after removing all shares: %q", names)
	}
}

func TestConsumedCapacityIsWrittenInCanonicalForm(t *testing.T) {
	var result resourceapi.DeviceRequestAllocationResult
	if err := json.Unmarshal([]byte(`{"device": "gpu-shared-0", "consumedCapacity": {"memory": "1024Mi"}}`), &result); err != nil {
		t.Fatal(err)
	}
	// The API server would serve "1Gi", and the Python build writes what it is served.
	if env := shareEnv("uid-1", result, false); env[len(env)-1] != "FAKE_DRA_MEMORY=1Gi" {
		t.Errorf("env: %q", env)
	}
}

// specNames lists the files in the CDI directory, sorted.
func specNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, entry := range entries {
		names = append(names, entry.Name())
	}
	return names
}
