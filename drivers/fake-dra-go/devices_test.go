package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

func TestWordIDsAreThePythonBuilds(t *testing.T) {
	// Values of fake_dra.identifiers.word_id for the same arguments.
	for _, tc := range []struct {
		kind, node string
		index      int
		want       string
	}{
		{"uuid", "kwok-node-0", 3, "zq7-lumen-heron-islet-dune"},
		{"serial", "kwok-node-1", 17, "zq7-heron-fjord-lumen-bristle1"},
	} {
		if got := wordID(tc.kind, tc.node, tc.index); got != tc.want {
			t.Errorf("wordID(%s, %s, %d) = %s, want %s", tc.kind, tc.node, tc.index, got, tc.want)
		}
	}
	if got := deviceUUID(Config{Profile: "gpu", NodeName: "n1", IDFormat: referenceIDs}, 2); got != "gpu-n1-2" {
		t.Errorf("reference uuid: %s", got)
	}
}

func config(devices int) Config {
	return Config{DriverName: "d.example.com", NodeName: "n1", Profile: gpuProfile, Devices: devices, DriverVersion: "2.0.0", IDFormat: referenceIDs}
}

func TestAPoolIsSplitIntoSlicesOfTheAPIsLimitAllCompleteTogether(t *testing.T) {
	slices := resourceSlices(config(300), 7, poolShape{published: 300})
	if len(slices) != 3 || len(slices[0].Spec.Devices) != 128 || len(slices[2].Spec.Devices) != 44 {
		t.Fatalf("split: %d slices", len(slices))
	}
	for i, slice := range slices {
		pool := slice.Spec.Pool
		if pool.Name != "n1" || pool.Generation != 7 || pool.ResourceSliceCount != 3 || slice.Name != sliceName(config(300), i) {
			t.Errorf("slice %d: %s %+v", i, slice.Name, pool)
		}
	}
	if firmware := slices[0].Spec.Devices[0].Attributes["firmware"]; firmware.StringValue == nil || *firmware.StringValue != "fw-2" {
		t.Errorf("release 2 devices carry firmware: %+v", firmware)
	}
}

func TestTaintedDevicesUseTheLowerLimitAndReducedCapacityPublishesFewer(t *testing.T) {
	shape := poolShape{published: 100, unavailable: map[string]bool{"gpu-1": true}, informational: map[string]bool{"gpu-2": true}}
	slices := resourceSlices(config(200), 1, shape)
	if len(slices) != 2 || len(slices[0].Spec.Devices) != maxTaintedDevicesPerSlice {
		t.Fatalf("tainted split: %d slices, %d devices in the first", len(slices), len(slices[0].Spec.Devices))
	}
	if taints := slices[0].Spec.Devices[1].Taints; len(taints) != 1 || taints[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Errorf("unavailable taint: %+v", taints)
	}
	if taints := slices[0].Spec.Devices[2].Taints; len(taints) != 1 || taints[0].Effect != resourceapi.DeviceTaintEffectNone {
		t.Errorf("informational taint: %+v", taints)
	}
	empty := resourceSlices(config(4), 1, poolShape{published: 0})
	if len(empty) != 1 || len(empty[0].Spec.Devices) != 0 || empty[0].Spec.Pool.ResourceSliceCount != 1 {
		t.Errorf("a pool without devices is one empty slice: %+v", empty)
	}
}

func TestAllocatedNodeIsOnlyASingleNodeByName(t *testing.T) {
	byName := func(values ...string) *resourceapi.AllocationResult {
		return &resourceapi.AllocationResult{NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: values}},
		}}}}
	}
	if got := allocatedNode(byName("n1")); got != "n1" {
		t.Errorf("one node: %q", got)
	}
	if got := allocatedNode(byName("n1", "n2")); got != "" {
		t.Errorf("two nodes: %q", got)
	}
	if got := allocatedNode(&resourceapi.AllocationResult{}); got != "" {
		t.Errorf("no selector: %q", got)
	}
}
