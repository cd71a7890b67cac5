package main

// The `gpu-partitions` device profile: each physical GPU `gpu-<i>` has one counter set, `gpu-<i>-counters` (its
// 16Gi of memory and one counter per quarter of its compute, `slot-0`..`slot-3`), published in a slice of the same
// pool that lists shared counters only (the API allows one of `devices` and `sharedCounters` per slice), and is
// published as seven devices that consume from it: the whole device `gpu-<i>` (every counter), two halves
// `gpu-<i>-half-<j>` (8Gi, slots 2j and 2j+1) and four quarters `gpu-<i>-quarter-<k>` (4Gi, slot k). Partitions on
// the same part of a GPU never fit together, so at most the four quarters are allocated at once; the scheduler
// enforces it from the counters. Three levels is the smallest shape in which partitions of different sizes overlap,
// as MIG-style profiles do.

import (
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	// deviceMemoryGiB is the memory of one physical device; slotsPerDevice the parts its compute splits into.
	deviceMemoryGiB = 16
	slotsPerDevice  = 4
	// reservedMemoryGiB: the partitions-oversubscribe-counters bug publishes the memory left after a reservation
	// of its own as the counter set, while its partitions consume their nominal sizes.
	reservedMemoryGiB = 1
	// maxCounterSetsPerSlice is the most counter sets one ResourceSlice may list: ResourceSliceMaxCounterSets,
	// k8s.io/api v0.37.2 resource/v1/types.go:356. A larger pool spreads its counter sets over several slices.
	maxCounterSetsPerSlice = resourceapi.ResourceSliceMaxCounterSets
	// maxPartitionsPerSlice: devices that consume counters lower the per-slice limit as taints do
	// (ResourceSliceMaxDevicesWithAdvancedFeatures), so every device slice of this profile holds at most that many.
	maxPartitionsPerSlice = maxTaintedDevicesPerSlice
)

// partitionKind is one size of partition: each kind covers a device's slots in equal consecutive runs of `slots`.
type partitionKind struct {
	name  string
	slots int
}

// partitionKinds are the partitions of every device after the whole device, in publishing order.
var partitionKinds = []partitionKind{{"half", 2}, {"quarter", 1}}

// counterSetName names the counter set of physical device `index`.
func counterSetName(index int) string { return fmt.Sprintf("gpu-%d-counters", index) }

// slotCounter names the counter that stands for one quarter of a device's compute.
func slotCounter(slot int) string { return fmt.Sprintf("slot-%d", slot) }

// slotRun is the consecutive slots [first, first+count) of one device.
type slotRun struct{ first, count int }

// wholeDevice covers every slot of a device.
var wholeDevice = slotRun{0, slotsPerDevice}

// memoryGiB is the share of a device's memory that goes with the run's share of its compute.
func (run slotRun) memoryGiB() int { return deviceMemoryGiB * run.count / slotsPerDevice }

// counterAmounts is `memoryGiB` of memory and one of each slot of `run`: a counter set's content or a consumption.
func counterAmounts(memoryGiB int, run slotRun) map[string]resourceapi.Counter {
	amounts := map[string]resourceapi.Counter{"memory": {Value: gibibytes(memoryGiB)}}
	for slot := run.first; slot < run.first+run.count; slot++ {
		amounts[slotCounter(slot)] = resourceapi.Counter{Value: resource.MustParse("1")}
	}
	return amounts
}

func gibibytes(amount int) resource.Quantity { return resource.MustParse(fmt.Sprintf("%dGi", amount)) }

// partitionCounterSet is what physical device `index` has to share: its memory and one counter per slot.
func partitionCounterSet(c Config, index int) resourceapi.CounterSet {
	memory := deviceMemoryGiB
	if c.IsBroken(partitionsOversubscribeCounter) {
		memory -= reservedMemoryGiB // the bug: the set holds less than its partitions consume
	}
	return resourceapi.CounterSet{Name: counterSetName(index), Counters: counterAmounts(memory, wholeDevice)}
}

// partitionDevice is the device `name` of physical device `index`, of kind `kind`, that takes up the slots of
// `run`. Its attributes are its own (a UUID per partition, no serial number in any ID format), not gpuDevice's.
func partitionDevice(c Config, index int, name, kind string, run slotRun) resourceapi.Device {
	attributes := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"model":         {StringValue: ptr.To("FakeGPU-9000")},
		"index":         {IntValue: ptr.To(int64(index))},
		"uuid":          {StringValue: ptr.To(c.NodeName + "-" + name)},
		"partition":     {StringValue: ptr.To(kind)},
		"driverVersion": {VersionValue: ptr.To(c.DriverVersion)},
	}
	if c.Major() >= 2 {
		attributes["firmware"] = resourceapi.DeviceAttribute{StringValue: ptr.To(fmt.Sprintf("fw-%d", c.Major()))}
	}
	return resourceapi.Device{
		Name:       name,
		Attributes: attributes,
		Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: gibibytes(run.memoryGiB())}},
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{
			{CounterSet: counterSetName(index), Counters: counterAmounts(run.memoryGiB(), run)},
		},
	}
}

// physicalDevice is every device of physical device `index`: the whole device first, then its halves and quarters.
func physicalDevice(c Config, index int) []resourceapi.Device {
	whole := fmt.Sprintf("gpu-%d", index)
	devices := []resourceapi.Device{partitionDevice(c, index, whole, "whole", wholeDevice)}
	for _, kind := range partitionKinds {
		for part := range slotsPerDevice / kind.slots {
			name := fmt.Sprintf("%s-%s-%d", whole, kind.name, part)
			devices = append(devices, partitionDevice(c, index, name, kind.name, slotRun{part * kind.slots, kind.slots}))
		}
	}
	return devices
}

// partitionDeviceNames lists every device of the node's pool (whole devices, halves, quarters), in pool order.
func partitionDeviceNames(c Config) []string {
	var names []string
	for index := range c.Devices {
		for _, device := range physicalDevice(c, index) {
			names = append(names, device.Name)
		}
	}
	return names
}

// partitionSlices is the node's pool at `generation` with the first `shape.published` physical devices: device
// slices, then counter-set slices (the API allows one of devices and sharedCounters per slice). Every slice carries
// the pool's name, generation and a resourceSliceCount that counts both kinds; a pool without devices is one empty
// device slice, as for the plain profiles.
func partitionSlices(c Config, generation int64, shape poolShape) []resourceapi.ResourceSlice {
	count := max(0, min(shape.published, c.Devices))
	var listed []resourceapi.Device
	var counterSets []resourceapi.CounterSet
	for index := range count {
		for _, device := range physicalDevice(c, index) {
			device.Taints = taintsFor(device.Name, shape)
			listed = append(listed, device)
		}
		counterSets = append(counterSets, partitionCounterSet(c, index))
	}
	var specs []resourceapi.ResourceSliceSpec
	for chunk := range slices.Chunk(listed, maxPartitionsPerSlice) {
		specs = append(specs, resourceapi.ResourceSliceSpec{Devices: chunk})
	}
	if len(specs) == 0 {
		specs = append(specs, resourceapi.ResourceSliceSpec{})
	}
	for chunk := range slices.Chunk(counterSets, maxCounterSetsPerSlice) {
		specs = append(specs, resourceapi.ResourceSliceSpec{SharedCounters: chunk})
	}
	return poolSlices(c, generation, specs)
}

// poolSlices makes one slice of the node's pool of each spec (its devices or its counter sets), in order.
func poolSlices(c Config, generation int64, specs []resourceapi.ResourceSliceSpec) []resourceapi.ResourceSlice {
	pool := make([]resourceapi.ResourceSlice, len(specs))
	for i, spec := range specs {
		spec.Driver = c.DriverName
		spec.NodeName = ptr.To(c.NodeName)
		spec.Pool = resourceapi.ResourcePool{Name: c.NodeName, Generation: generation, ResourceSliceCount: int64(len(specs))}
		pool[i] = resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: sliceName(c, i)}, Spec: spec}
	}
	return pool
}
