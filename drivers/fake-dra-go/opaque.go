package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// The driver's opaque configuration API: the parameters of a DeviceClass's or a ResourceClaim's config[].opaque
// addressed to this driver. One kind, GpuConfig, with one setting, the sharing mode of the devices it applies to:
//
//	{"apiVersion": "config.fake-dra.example.com/v1alpha1", "kind": "GpuConfig", "sharing": "TimeSlicing"}
//
// A device's sharing mode is set in its CDI container edits (FAKE_DRA_SHARING=<mode>) and in its status.devices
// entry's data ("sharing"). The configs that apply to a device are those its request is named in (or that name no
// request: all of them), as DeviceAllocationConfiguration.requests says (a subrequest's device gets the configs of
// its main request too). They apply in this order, the last one winning: the class's, then the claim's, each in the
// order of the allocation result, as upstream's test driver joins them (k8s.io/kubernetes
// test/e2e/dra/test-driver/app/kubeletplugin.go). A config of this driver it cannot decode (another apiVersion or
// kind, an unknown field, a value of the wrong type, an unknown mode) fails that claim's prepare, and only that
// claim's: the answer carries the error for the claim. The gpu-shared device profile writes its shares' specs
// without the setting.
const (
	configAPIVersion = "config.fake-dra.example.com/v1alpha1"
	configKind       = "GpuConfig"
	// sharingEnv is the CDI container edit's environment variable that carries a device's sharing mode.
	sharingEnv = "FAKE_DRA_SHARING"
	// sharingData is the key of a status.devices entry's data that carries it.
	sharingData = "sharing"
	// classConfigOverClaimConfig is the broken mode that applies the claim's configs first and the class's over them.
	classConfigOverClaimConfig = "class-config-over-claim-config"
)

// sharingModes are the values GpuConfig.sharing takes.
var sharingModes = []string{"Exclusive", "TimeSlicing"}

// gpuConfig is the one kind of the config API.
type gpuConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Sharing    string `json:"sharing"`
}

// decodeConfig reads parameters strictly: its apiVersion and kind, no unknown field, a known sharing mode.
func decodeConfig(raw []byte) (gpuConfig, error) {
	var config gpuConfig
	decoder := json.NewDecoder(bytes.NewReader(raw))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&config); err != nil {
		return config, fmt.Errorf("decode %s: %w", configKind, err)
	}
	if config.APIVersion != configAPIVersion || config.Kind != configKind {
		return config, fmt.Errorf("unsupported parameters %s %s: this driver reads %s %s", config.APIVersion, config.Kind, configAPIVersion, configKind)
	}
	if !slices.Contains(sharingModes, config.Sharing) {
		return config, fmt.Errorf("%s.sharing must be one of %s, got %q", configKind, strings.Join(sharingModes, ", "), config.Sharing)
	}
	return config, nil
}

// configApplies says whether a config naming `requests` applies to a device allocated for `request`
// (`<request>` or `<request>/<subrequest>`).
func configApplies(requests []string, request string) bool {
	if len(requests) == 0 || slices.Contains(requests, request) {
		return true
	}
	base, _, _ := strings.Cut(request, "/")
	return slices.Contains(requests, base)
}

// sharingOf is the sharing mode of each of `mine` ("" where no config of `driver` applies), from the allocation's
// configs: the class's, then the claim's, the last one winning (the claim's first with `classOverClaim`, the bug).
// A config of `driver` that does not decode is the error, naming its place in the allocation result.
func sharingOf(driver string, configs []resourceapi.DeviceAllocationConfiguration, mine []resourceapi.DeviceRequestAllocationResult, classOverClaim bool) ([]string, error) {
	first, second := resourceapi.AllocationConfigSourceClass, resourceapi.AllocationConfigSourceClaim
	if classOverClaim {
		first, second = second, first // the bug: the administrator's defaults overwrite what the claim asked for
	}
	type decoded struct {
		requests []string
		sharing  string
	}
	var ordered []decoded
	for _, source := range []resourceapi.AllocationConfigSource{first, second} {
		for index, config := range configs {
			if config.Source != source || config.Opaque == nil || config.Opaque.Driver != driver {
				continue
			}
			parsed, err := decodeConfig(config.Opaque.Parameters.Raw)
			if err != nil {
				return nil, fmt.Errorf("opaque config #%d (%s, requests %v): %w", index, config.Source, config.Requests, err)
			}
			ordered = append(ordered, decoded{config.Requests, parsed.Sharing})
		}
	}
	sharing := make([]string, len(mine))
	for i, result := range mine {
		for _, config := range ordered {
			if configApplies(config.requests, result.Request) {
				sharing[i] = config.sharing
			}
		}
	}
	return sharing, nil
}

// claimSharing is sharingOf for a claim read for prepare.
func (d *DriverCore) claimSharing(found *lookup) ([]string, error) {
	var configs []resourceapi.DeviceAllocationConfiguration
	if found.claim != nil && found.claim.Status.Allocation != nil {
		configs = found.claim.Status.Allocation.Devices.Config
	}
	return sharingOf(d.config.DriverName, configs, found.mine, d.config.IsBroken(classConfigOverClaimConfig))
}
