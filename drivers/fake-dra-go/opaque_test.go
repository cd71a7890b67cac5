package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

// opaque is one config[] entry of an allocation result, for heldTestDriver unless `driver` says otherwise.
func opaque(source string, requests []string, parameters map[string]any) map[string]any {
	return map[string]any{
		"source": source, "requests": requests,
		"opaque": map[string]any{"driver": heldTestDriver, "parameters": parameters},
	}
}

func sharingParameters(mode any) map[string]any {
	return map[string]any{"apiVersion": configAPIVersion, "kind": configKind, "sharing": mode}
}

// configuredClaim is heldClaim with the allocation's config and each result's request set as given.
func configuredClaim(t *testing.T, name, uid string, configs []map[string]any, requests ...string) *resourceapi.ResourceClaim {
	t.Helper()
	results := make([]map[string]any, len(requests))
	for i := range requests {
		results[i] = allocated("gpu-" + string(rune('0'+i)))
	}
	claim := heldClaim(t, name, uid, results...)
	for i, request := range requests {
		claim.Status.Allocation.Devices.Results[i].Request = request
	}
	encoded, _ := json.Marshal(configs)
	if err := json.Unmarshal(encoded, &claim.Status.Allocation.Devices.Config); err != nil {
		t.Fatal(err)
	}
	return claim
}

// sharingInSpec is FAKE_DRA_SHARING of each CDI device of the claim's spec, in order ("" where it is not set).
func sharingInSpec(t *testing.T, core *DriverCore, uid string) []string {
	t.Helper()
	raw, err := os.ReadFile(cdiSpecPath(core.config, uid))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdiSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	var modes []string
	for _, device := range spec.Devices {
		mode := ""
		for _, entry := range device.ContainerEdits["env"].([]any) {
			if value, ok := strings.CutPrefix(entry.(string), sharingEnv+"="); ok {
				mode = value
			}
		}
		modes = append(modes, mode)
	}
	return modes
}

func TestDecodeConfigReadsOnlyItsOwnKindStrictly(t *testing.T) {
	good, _ := json.Marshal(sharingParameters("TimeSlicing"))
	if config, err := decodeConfig(good); err != nil || config.Sharing != "TimeSlicing" {
		t.Fatalf("good parameters: %+v, %v", config, err)
	}
	for name, parameters := range map[string]map[string]any{
		"wrong type":    sharingParameters(map[string]any{"strategy": "TimeSlicing"}),
		"unknown mode":  sharingParameters("Sometimes"),
		"unknown field": {"apiVersion": configAPIVersion, "kind": configKind, "sharing": "Exclusive", "extra": 1},
		"other kind":    {"apiVersion": configAPIVersion, "kind": "NicConfig", "sharing": "Exclusive"},
		"other version": {"apiVersion": "config.fake-dra.example.com/v2", "kind": configKind, "sharing": "Exclusive"},
	} {
		raw, _ := json.Marshal(parameters)
		if _, err := decodeConfig(raw); err == nil {
			t.Errorf("%s: %s decoded", name, raw)
		}
	}
}

func TestClaimConfigAppliesOverClassConfigPerRequestAndTheBrokenModeReversesIt(t *testing.T) {
	configs := []map[string]any{
		opaque("FromClass", []string{"a"}, sharingParameters("Exclusive")),
		opaque("FromClass", []string{"b"}, sharingParameters("Exclusive")),
		opaque("FromClaim", []string{"a"}, sharingParameters("TimeSlicing")),
		{"source": "FromClaim", "opaque": map[string]any{"driver": "other.example.com", "parameters": map[string]any{"x": 1}}},
	}
	for broken, want := range map[bool][]string{false: {"TimeSlicing", "TimeSlicing", "Exclusive"}, true: {"Exclusive", "Exclusive", "Exclusive"}} {
		claim := configuredClaim(t, "c1", "uid-1", configs, "a", "a/sub", "b")
		core := heldCore(t, t.TempDir(), false, claim)
		core.config.Broken[classConfigOverClaimConfig] = broken
		if errs := prepareErrors(t, core, claim); errs["uid-1"] != "" {
			t.Fatalf("broken=%v: %s", broken, errs["uid-1"])
		}
		if got := sharingInSpec(t, core, "uid-1"); !slices.Equal(got, want) {
			t.Errorf("broken=%v: sharing per device %v, want %v", broken, got, want)
		}
	}
}

func TestAConfigNamingNoRequestAppliesToEveryDeviceAndNoConfigSetsNothing(t *testing.T) {
	configured := configuredClaim(t, "c1", "uid-1", []map[string]any{opaque("FromClaim", nil, sharingParameters("TimeSlicing"))}, "a", "b")
	plain := configuredClaim(t, "c2", "uid-2", nil, "a")
	core := heldCore(t, t.TempDir(), false, configured, plain)
	if errs := prepareErrors(t, core, configured, plain); errs["uid-1"] != "" || errs["uid-2"] != "" {
		t.Fatalf("prepare: %v", errs)
	}
	if got := sharingInSpec(t, core, "uid-1"); !slices.Equal(got, []string{"TimeSlicing", "TimeSlicing"}) {
		t.Errorf("config for every request: %v", got)
	}
	if got := sharingInSpec(t, core, "uid-2"); !slices.Equal(got, []string{""}) {
		t.Errorf("no config: %v", got)
	}
}

func TestAnUndecodableConfigFailsOnlyItsClaimInTheBatchAndWritesNothingForIt(t *testing.T) {
	bad := configuredClaim(t, "bad", "uid-bad", []map[string]any{opaque("FromClaim", nil, sharingParameters([]string{"TimeSlicing"}))}, "a")
	good := configuredClaim(t, "good", "uid-good", []map[string]any{opaque("FromClass", nil, sharingParameters("Exclusive"))}, "a")
	good.Status.Allocation.Devices.Results[0].Device = "gpu-1"
	core := heldCore(t, t.TempDir(), false, bad, good)
	errs := prepareErrors(t, core, bad, good)
	if !strings.Contains(errs["uid-bad"], "opaque config #0") || errs["uid-good"] != "" {
		t.Fatalf("answers: %v", errs)
	}
	if _, err := os.Stat(cdiSpecPath(core.config, "uid-bad")); !os.IsNotExist(err) {
		t.Errorf("spec of the refused claim: %v", err)
	}
	if _, known, _ := core.prepared.Get("uid-bad"); known {
		t.Error("the refused claim is recorded as prepared")
	}
	if got := sharingInSpec(t, core, "uid-good"); !slices.Equal(got, []string{"Exclusive"}) {
		t.Errorf("the other claim's sharing: %v", got)
	}
}

func TestParseArgsTakesTheGoOnlyBrokenMode(t *testing.T) {
	c, err := parseArgs(strings.Fields("--driver-name=d --node-name=n --broken-mode="+classConfigOverClaimConfig), noEnv)
	if err != nil || !c.IsBroken(classConfigOverClaimConfig) {
		t.Fatalf("broken modes %v, error %v", c.Broken, err)
	}
}
