package main

// The `gpu-shared` device profile: GPUs that several claims share, each claim
// consuming part of their capacity. Every allocation of such a device is a share with an ID of its own
// (`shareID` in the allocation result); each share gets a CDI spec file of its own, named after the share, so
// unpreparing one claim removes its own shares' specs and leaves the other claims on the same device prepared.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// sharedDevice is device `index` of the node: shareable, with consumable memory and compute.
func sharedDevice(c Config, index int) resourceapi.Device {
	return resourceapi.Device{
		Name:                     fmt.Sprintf("%s-%d", sharedProfile, index),
		AllowMultipleAllocations: ptr.To(true),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"model": {StringValue: ptr.To("FakeGPU-9000-shared")},
			"index": {IntValue: ptr.To(int64(index))},
			// Always the reference form: the Python build gives shared devices no `words` identifiers.
			"uuid":          {StringValue: ptr.To(fmt.Sprintf("%s-%s-%d", sharedProfile, c.NodeName, index))},
			"driverVersion": {VersionValue: ptr.To(c.DriverVersion)},
		},
		Capacity: sharedCapacity(),
	}
}

// sharedCapacity is what each device has, and how a request consumes it: memory in whole GiB between 1 and 16
// (4 GiB unless the claim asks), compute in quarters, halves or all of the device (a quarter unless the claim asks).
// One capacity has each form of request policy, so the scheduler rounds and sums both.
func sharedCapacity() map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
	return map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		"memory": {
			Value: resource.MustParse("16Gi"),
			RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default: quantity("4Gi"),
				ValidRange: &resourceapi.CapacityRequestPolicyRange{
					Min: quantity("1Gi"), Max: quantity("16Gi"), Step: quantity("1Gi"),
				},
			},
		},
		"compute": {
			Value: resource.MustParse("100"),
			RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default:     quantity("25"),
				ValidValues: []resource.Quantity{resource.MustParse("25"), resource.MustParse("50"), resource.MustParse("100")},
			},
		},
	}
}

func quantity(value string) *resource.Quantity { return ptr.To(resource.MustParse(value)) }

// writeShareSpecs writes one CDI spec per share of the claim's results (atomically) and returns the CDI device ID
// of each, in order. The edits tell the workload which device, which share and how much of the device it got.
func writeShareSpecs(c Config, claimUID string, results []resourceapi.DeviceRequestAllocationResult) ([]string, error) {
	kind := cdiKind(c)
	ids := make([]string, 0, len(results))
	for _, result := range results {
		ignoreShareID := c.IsBroken(prepareIgnoresShareID)
		share := shareName(result, ignoreShareID)
		env := shareEnv(claimUID, result, ignoreShareID)
		spec := cdiSpec{
			CDIVersion:     cdiVersion,
			Kind:           kind,
			Devices:        []cdiDevice{{Name: share, ContainerEdits: map[string]any{"env": env}}},
			ContainerEdits: map[string]any{},
		}
		body, err := json.Marshal(spec)
		if err != nil {
			return nil, err
		}
		if err := replaceFile(shareSpecPath(c, share), body); err != nil {
			return nil, err
		}
		ids = append(ids, kind+"="+share)
	}
	return ids, nil
}

// shareName names the share an allocation result is: <device>-<shareID>, the device alone when it has no share ID.
// prepare-ignores-share-id (`ignoreShareID`) names every share of a device alike.
func shareName(result resourceapi.DeviceRequestAllocationResult, ignoreShareID bool) string {
	if ignoreShareID || result.ShareID == nil || *result.ShareID == "" {
		return result.Device
	}
	return result.Device + "-" + string(*result.ShareID)
}

// shareEnv is the environment a share's CDI device sets: the device, the claim, the share and, sorted by name, each
// capacity it consumes (FAKE_DRA_<CAPACITY>=<quantity>).
// prepare-ignores-share-id (`ignoreShareID`) leaves the share out.
func shareEnv(claimUID string, result resourceapi.DeviceRequestAllocationResult, ignoreShareID bool) []string {
	shareID := ""
	if result.ShareID != nil {
		shareID = string(*result.ShareID)
	}
	env := []string{"FAKE_DRA_DEVICE=" + result.Device, "FAKE_DRA_CLAIM=" + claimUID}
	if !ignoreShareID {
		env = append(env, "FAKE_DRA_SHARE="+shareID)
	}
	for _, name := range slices.Sorted(maps.Keys(result.ConsumedCapacity)) {
		consumed := result.ConsumedCapacity[name]
		// String() is the canonical form, the one the API server's JSON always carries (Quantity.MarshalJSON), so it
		// is the string the Python build reads from the claim and writes verbatim: "1024Mi" becomes "1Gi" in both.
		env = append(env, "FAKE_DRA_"+strings.ToUpper(string(name))+"="+consumed.String())
	}
	return env
}

// shareSpecPath is where the spec of one share lives.
func shareSpecPath(c Config, share string) string {
	return filepath.Join(c.CDIDir, c.DriverName+"-share-"+share+".json")
}

// removeShareSpecs deletes the specs of the shares a claim was prepared with (as its prepared record lists them); a
// missing file is fine (unprepare is idempotent).
func removeShareSpecs(c Config, prepared []PreparedDevice) error {
	for _, device := range prepared {
		for _, id := range device.CDIDeviceIDs {
			_, share, ok := strings.Cut(id, "=")
			if !ok {
				return fmt.Errorf("CDI device ID %q names no share", id)
			}
			if err := os.Remove(shareSpecPath(c, share)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}
