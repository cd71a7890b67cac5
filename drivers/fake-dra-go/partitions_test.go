package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func partitionsConfig(devices int) Config {
	return Config{
		DriverName: "d.example.com", NodeName: "n1", Profile: partitionsProfile, Devices: devices,
		DriverVersion: "2.0.0", IDFormat: referenceIDs,
	}
}

func deviceSet(values ...string) map[string]bool {
	set := map[string]bool{}
	for _, value := range values {
		set[value] = true
	}
	return set
}

// Each testdata/partitions-<fixture>.json is json.dumps(fake_dra.partitions.resource_slices(config, generation,
// unavailable=..., informational=..., published=...), sort_keys=True) for the config and shape of its case, with
// DriverConfig(driver_name="d.example.com", node_name="n1", profile="gpu-partitions", driver_version="2.0.0") unless
// the case says otherwise.
func TestPartitionSlicesAreThePythonBuilds(t *testing.T) {
	release1Words := partitionsConfig(2)
	release1Words.DriverVersion, release1Words.IDFormat = "1.3.0", wordsIDs
	oversubscribed := partitionsConfig(2)
	oversubscribed.Broken = deviceSet(partitionsOversubscribeCounter)
	for _, tc := range []struct {
		fixture    string
		config     Config
		generation int64
		shape      poolShape
	}{
		// devices=3, generation 5, published=3
		{"three-devices", partitionsConfig(3), 5, poolShape{published: 3}},
		// devices=20, generation 9, published=20: 140 devices over 3 slices, 20 counter sets over 3 more
		{"twenty-devices", partitionsConfig(20), 9, poolShape{published: 20}},
		// devices=3, generation 2, unavailable={gpu-1-half-0, gpu-0-quarter-3},
		// informational={gpu-2, gpu-0-quarter-3}, published=3
		{"tainted", partitionsConfig(3), 2, poolShape{
			published:     3,
			unavailable:   deviceSet("gpu-1-half-0", "gpu-0-quarter-3"),
			informational: deviceSet("gpu-2", "gpu-0-quarter-3"),
		}},
		// devices=4, generation 3, unavailable={gpu-3, gpu-1-quarter-2}, published=2 (gpu-3 is not published)
		{"reduced-capacity", partitionsConfig(4), 3, poolShape{published: 2, unavailable: deviceSet("gpu-3", "gpu-1-quarter-2")}},
		// devices=4, generation 4, published=0
		{"no-devices", partitionsConfig(4), 4, poolShape{published: 0}},
		// devices=2, driver_version="1.3.0", id_format="words", generation 1, published=7
		{"release-1-words", release1Words, 1, poolShape{published: 7}},
		// devices=2, broken={PARTITIONS_OVERSUBSCRIBE_COUNTERS}, generation 1, published=2
		{"oversubscribed", oversubscribed, 1, poolShape{published: 2}},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			want := pythonPool(t, "testdata/partitions-"+tc.fixture+".json")
			got := asJSONValue(t, partitionSlices(tc.config, tc.generation, tc.shape))
			if !reflect.DeepEqual(got, want) {
				t.Errorf("the Go pool differs from the Python build's: %s", firstDifference(t, got, want))
			}
		})
	}
}

// pythonPool reads a Python build's pool as the API server sees it from a typed client: apiVersion and kind are
// what the Go client sends for a v1 ResourceSlice, and an empty `devices` list is the same as none (the Go types
// omit it).
func pythonPool(t *testing.T, path string) []any {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pool []any
	if err := json.Unmarshal(text, &pool); err != nil {
		t.Fatal(err)
	}
	for _, item := range pool {
		slice := item.(map[string]any)
		if slice["apiVersion"] != "resource.k8s.io/v1" || slice["kind"] != "ResourceSlice" {
			t.Fatalf("%s: not a v1 ResourceSlice: %v %v", path, slice["apiVersion"], slice["kind"])
		}
		delete(slice, "apiVersion")
		delete(slice, "kind")
		spec := slice["spec"].(map[string]any)
		if devices, ok := spec["devices"].([]any); ok && len(devices) == 0 {
			delete(spec, "devices")
		}
	}
	return pool
}

func asJSONValue(t *testing.T, value any) []any {
	t.Helper()
	text, err := json.Marshal(value)
	if err != nil {
		t.Fatal(err)
	}
	var decoded []any
	if err := json.Unmarshal(text, &decoded); err != nil {
		t.Fatal(err)
	}
	return decoded
}

// firstDifference shows where two JSON values first differ, line by line of their indented form.
func firstDifference(t *testing.T, got, want any) string {
	t.Helper()
	gotLines, wantLines := indentedLines(t, got), indentedLines(t, want)
	for i := range max(len(gotLines), len(wantLines)) {
		if i >= len(gotLines) || i >= len(wantLines) || gotLines[i] != wantLines[i] {
			start := max(0, i-8)
			return fmt.Sprintf("at line %d\ngot:\n%s\nwant:\n%s", i,
				strings.Join(gotLines[start:min(i+3, len(gotLines))], "\n"),
				strings.Join(wantLines[start:min(i+3, len(wantLines))], "\n"))
		}
	}
	return "none"
}

func indentedLines(t *testing.T, value any) []string {
	t.Helper()
	text, err := json.MarshalIndent(value, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(text), "\n")
}

func TestPartitionDeviceNamesAreThePythonBuilds(t *testing.T) {
	// fake_dra.partitions.device_names(config) for devices=2.
	want := []string{
		"gpu-0", "gpu-0-half-0", "gpu-0-half-1", "gpu-0-quarter-0", "gpu-0-quarter-1", "gpu-0-quarter-2", "gpu-0-quarter-3",
		"gpu-1", "gpu-1-half-0", "gpu-1-half-1", "gpu-1-quarter-0", "gpu-1-quarter-1", "gpu-1-quarter-2", "gpu-1-quarter-3",
	}
	if got := partitionDeviceNames(partitionsConfig(2)); !slices.Equal(got, want) {
		t.Errorf("device names: %v", got)
	}
	if got := deviceNames(partitionsConfig(2)); !slices.Equal(got, want) {
		t.Errorf("deviceNames does not defer to the profile: %v", got)
	}
	// Every device of the pool, in the order its slices list them (a reduced-capacity fault publishes a prefix).
	config := partitionsConfig(20)
	var published []string
	for _, slice := range partitionSlices(config, 1, poolShape{published: 20}) {
		for _, device := range slice.Spec.Devices {
			published = append(published, device.Name)
		}
	}
	if got := partitionDeviceNames(config); len(got) != 140 || !slices.Equal(got, published) {
		t.Errorf("%d device names, not the %d the pool publishes in its order", len(got), len(published))
	}
}

func TestALargePoolSpreadsDevicesAndCounterSetsOverSlicesOfTheAPIsLimits(t *testing.T) {
	pool := partitionSlices(partitionsConfig(20), 9, poolShape{published: 20})
	var shape []string
	for i, slice := range pool {
		shape = append(shape, fmt.Sprintf("%d/%d", len(slice.Spec.Devices), len(slice.Spec.SharedCounters)))
		if slice.Spec.Pool.ResourceSliceCount != int64(len(pool)) || slice.Name != sliceName(partitionsConfig(20), i) {
			t.Errorf("slice %d: %s %+v", i, slice.Name, slice.Spec.Pool)
		}
	}
	// 140 devices at 64 a slice (they consume counters), then 20 counter sets at 8 a slice.
	if want := []string{"64/0", "64/0", "12/0", "0/8", "0/8", "0/4"}; !slices.Equal(shape, want) {
		t.Errorf("devices/counter sets per slice: %v, want %v", shape, want)
	}
}
