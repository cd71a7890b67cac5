package main

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The most devices one ResourceSlice may list, and the lower limit once any of them has taints (the `unavailable`
// fault taints devices): ResourceSliceMaxDevices and ResourceSliceMaxDevicesWithAdvancedFeatures in k8s.io/api
// v0.37.2 resource/v1/types.go, enforced per slice by the API server. A larger pool is split over several slices.
const (
	maxDevicesPerSlice        = 128
	maxTaintedDevicesPerSlice = 64
	unavailableTaintKey       = "fake-dra.example.com/unavailable"
	informationalTaintKey     = "fake-dra.example.com/informational"
)

// wordsPrefix starts every value of the `words` identifier format: no IP, MAC, UUID or hex pattern matches it.
const wordsPrefix = "zq7"

var words = []string{
	"amber", "bristle", "cobalt", "dune", "ember", "fjord", "gable", "heron",
	"islet", "juniper", "kestrel", "lumen", "moraine", "nimbus", "opal", "quill",
}

// wordID is a `words` value, stable per kind, node and device index: zq7-<word>-<word>-<word>-<index as a word>.
func wordID(kind, node string, index int) string {
	digest := sha256.Sum256([]byte(kind + "/" + node))
	parts := []string{wordsPrefix}
	for _, b := range digest[:3] {
		parts = append(parts, words[int(b)%len(words)])
	}
	ordinal := words[index%len(words)]
	if index >= len(words) {
		ordinal += strconv.Itoa(index / len(words))
	}
	return strings.Join(append(parts, ordinal), "-")
}

func deviceUUID(c Config, index int) string {
	if c.IDFormat == wordsIDs {
		return wordID("uuid", c.NodeName, index)
	}
	return fmt.Sprintf("%s-%s-%d", c.Profile, c.NodeName, index)
}

func serial(node string, index int) string { return wordID("serial", node, index) }

func deviceName(c Config, index int) string { return fmt.Sprintf("%s-%d", c.Profile, index) }

// deviceNames lists every device of the node's pool, in index order.
func deviceNames(c Config) []string {
	if c.Profile == partitionsProfile {
		return partitionDeviceNames(c)
	}
	names := make([]string, c.Devices)
	for i := range names {
		names[i] = deviceName(c, i)
	}
	return names
}

func gpuDevice(c Config, index int) resourceapi.Device {
	attributes := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"model":         {StringValue: ptr.To("FakeGPU-9000")},
		"index":         {IntValue: ptr.To(int64(index))},
		"uuid":          {StringValue: ptr.To(deviceUUID(c, index))},
		"driverVersion": {VersionValue: ptr.To(c.DriverVersion)},
	}
	if c.Major() >= 2 {
		attributes["firmware"] = resourceapi.DeviceAttribute{StringValue: ptr.To(fmt.Sprintf("fw-%d", c.Major()))}
	}
	if c.IDFormat == wordsIDs {
		attributes["serialNumber"] = resourceapi.DeviceAttribute{StringValue: ptr.To(serial(c.NodeName, index))}
	}
	return resourceapi.Device{
		Name:       deviceName(c, index),
		Attributes: attributes,
		Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("16Gi")}},
	}
}

// profileDevice is device `index` of the node's pool in the device profile (gpu-partitions has its own slices).
func profileDevice(c Config, index int) resourceapi.Device {
	switch c.Profile {
	case nicProfile:
		return nicDevice(c, index)
	case sharedProfile:
		return sharedDevice(c, index)
	case fabricProfile:
		return fabricDevice(c, index)
	}
	return gpuDevice(c, index)
}

func nicDevice(c Config, index int) resourceapi.Device {
	attributes := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"interfaceName": {StringValue: ptr.To(interfaceName(c, index))},
		"index":         {IntValue: ptr.To(int64(index))},
		"mac":           {StringValue: ptr.To(hardwareAddress(c, index))},
	}
	if c.IDFormat == wordsIDs {
		attributes["serialNumber"] = resourceapi.DeviceAttribute{StringValue: ptr.To(serial(c.NodeName, index))}
		attributes["uuid"] = resourceapi.DeviceAttribute{StringValue: ptr.To(deviceUUID(c, index))}
	}
	return resourceapi.Device{
		Name:       deviceName(c, index),
		Attributes: attributes,
		Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"bandwidth": {Value: resource.MustParse("10G")}},
	}
}

// interfaceName is the interface name of NIC `index`.
func interfaceName(c Config, index int) string {
	if c.IDFormat == wordsIDs {
		return wordID("interface", c.NodeName, index)
	}
	return fmt.Sprintf("fake%d", index)
}

// hardwareAddress is NIC `index`'s hardware address: a locally administered MAC, stable per node and index.
func hardwareAddress(c Config, index int) string {
	if c.IDFormat == wordsIDs {
		return wordID("hardware", c.NodeName, index)
	}
	nodeByte := 0
	for _, b := range []byte(c.NodeName) {
		nodeByte += int(b)
	}
	return fmt.Sprintf("02:fa:00:00:%02x:%02x", nodeByte%256, index)
}

// ipCIDR is the documentation-range address NIC `index` reports (RFC 5737, RFC 3849), in canonical CIDR form.
func ipCIDR(c Config, index int) string {
	if c.IDFormat == wordsIDs {
		return fmt.Sprintf("2001:db8:7a7::%x/64", 10+index)
	}
	return fmt.Sprintf("192.0.2.%d/24", 10+index)
}

// networkData is the status.devices[].networkData of NIC `index`.
func networkData(c Config, index int) map[string]any {
	return map[string]any{
		"interfaceName":   interfaceName(c, index),
		"ips":             []string{ipCIDR(c, index)},
		"hardwareAddress": hardwareAddress(c, index),
	}
}

func deviceIndex(device string) int {
	index, _ := strconv.Atoi(device[strings.LastIndex(device, "-")+1:])
	return index
}

// deviceData is what status.devices[].data says of a prepared device beyond the reference data: its identifiers
// in the `words` format, as drivers do that quote the attributes of the device they prepared.
func deviceData(c Config, device string) map[string]any {
	if c.IDFormat != wordsIDs || (c.Profile != gpuProfile && c.Profile != nicProfile) {
		return nil
	}
	index := deviceIndex(device)
	return map[string]any{
		"uuid":         map[string]string{"string": wordID("uuid", c.NodeName, index)},
		"serialNumber": serial(c.NodeName, index),
	}
}

func sliceName(c Config, index int) string {
	return fmt.Sprintf("%s-%s-%d", c.NodeName, c.DriverName, index)
}

// poolShape is what the active faults make of the pool: how many devices it lists, and which are tainted.
type poolShape struct {
	published                  int
	unavailable, informational map[string]bool
}

// resourceSlices is the node's pool at `generation`: the first `shape.published` devices, split into slices that
// all carry the same pool name, generation and resourceSliceCount, so the pool is complete once all of them are
// written. A pool without devices is still one (empty) slice.
func resourceSlices(c Config, generation int64, shape poolShape) []resourceapi.ResourceSlice {
	if c.Profile == partitionsProfile {
		return partitionSlices(c, generation, shape)
	}
	var listed []resourceapi.Device
	tainted := false
	for index := range max(0, min(shape.published, c.Devices)) {
		device := profileDevice(c, index)
		device.Taints = taintsFor(device.Name, shape)
		tainted = tainted || len(device.Taints) > 0
		listed = append(listed, device)
	}
	return slicesOf(c, generation, listed, tainted)
}

// taintsFor is what `device` is tainted with in its slice: NoSchedule while unavailable, effect None while
// informational.
func taintsFor(device string, shape poolShape) []resourceapi.DeviceTaint {
	var taints []resourceapi.DeviceTaint
	if shape.unavailable[device] {
		taints = append(taints, resourceapi.DeviceTaint{Key: unavailableTaintKey, Value: "true", Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	if shape.informational[device] {
		taints = append(taints, resourceapi.DeviceTaint{Key: informationalTaintKey, Value: "true", Effect: resourceapi.DeviceTaintEffectNone})
	}
	return taints
}

// slicesOf splits `listed` into the pool's slices of at most the API's limit each (the lower one when any device
// is tainted), all at `generation` with the same resourceSliceCount; no devices is still one (empty) slice.
func slicesOf(c Config, generation int64, listed []resourceapi.Device, tainted bool) []resourceapi.ResourceSlice {
	perSlice := maxDevicesPerSlice
	if tainted {
		perSlice = maxTaintedDevicesPerSlice
	}
	var chunks [][]resourceapi.Device
	for start := 0; start < len(listed); start += perSlice {
		chunks = append(chunks, listed[start:min(start+perSlice, len(listed))])
	}
	if len(chunks) == 0 {
		chunks = [][]resourceapi.Device{{}}
	}
	slices := make([]resourceapi.ResourceSlice, len(chunks))
	for i, chunk := range chunks {
		slices[i] = resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: sliceName(c, i)},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:   c.DriverName,
				NodeName: ptr.To(c.NodeName),
				Pool:     resourceapi.ResourcePool{Name: c.NodeName, Generation: generation, ResourceSliceCount: int64(len(chunks))},
				Devices:  chunk,
			},
		}
	}
	return slices
}
