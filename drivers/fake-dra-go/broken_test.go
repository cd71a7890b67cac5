package main

import (
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
