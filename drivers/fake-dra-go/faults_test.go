package main

import (
	"strings"
	"testing"
	"time"
)

func TestFaultsAreValidatedAsThePythonBuildsSchemaSays(t *testing.T) {
	valid := []string{
		`{"mode": "unavailable", "device": "gpu-0"}`,
		`{"mode": "slow-prepare", "delay": 2.5, "claim": "uid"}`,
		`{"mode": "reduced-capacity", "devices": 0}`,
		`{"mode": "prepare-error", "message": "boom"}`,
	}
	for _, raw := range valid {
		if _, err := parseFault([]byte(raw)); err != nil {
			t.Errorf("%s: %v", raw, err)
		}
	}
	invalid := map[string]string{
		`{"device": "gpu-0"}`:                         "'mode' is a required property",
		`{"mode": "melt"}`:                            "mode: 'melt' is not one of ['attach-failure', ",
		`{"mode": "unavailable", "colour": "red"}`:    "additional property",
		`{"mode": "slow-prepare"}`:                    "needs a delay greater than 0",
		`{"mode": "reduced-capacity"}`:                "'devices' is a required property",
		`{"mode": "reduced-capacity", "devices": -1}`: "devices:",
		`{"mode": "unavailable", "device": 3}`:        "device:",
		`["unavailable"]`:                             "not an object",
	}
	for raw, want := range invalid {
		if _, err := parseFault([]byte(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", raw, err, want)
		}
	}
}

func TestAFaultNarrowedToAClaimOrDeviceAppliesOnlyThere(t *testing.T) {
	faults := newFaultSet()
	device, claim := "gpu-1", "uid-1"
	faults.Replace([]Fault{{Mode: "unavailable", Device: &device}, {Mode: "prepare-error", Claim: &claim}})
	if got := faults.UnavailableDevices([]string{"gpu-0", "gpu-1"}); !got["gpu-1"] || got["gpu-0"] {
		t.Errorf("unavailable: %v", got)
	}
	if _, ok := faults.Find("prepare-error", "uid-2", nil); ok {
		t.Error("a claim's fault applied to another claim")
	}
	if _, ok := faults.Find("prepare-error", "uid-1", nil); !ok {
		t.Error("a claim's fault did not apply to its claim")
	}
}

func TestAHangEndsAsSoonAsItsFaultIsCleared(t *testing.T) {
	faults := newFaultSet()
	faults.Replace([]Fault{{Mode: "hang-prepare"}})
	cleared := make(chan bool)
	go func() { cleared <- faults.WaitCleared("hang-prepare", "uid", time.Minute) }()
	faults.Replace(nil)
	select {
	case ok := <-cleared:
		if !ok {
			t.Fatal("WaitCleared reported the fault still applying")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the hang did not end within 10 s of its fault being cleared")
	}
	faults.Replace([]Fault{{Mode: "hang-prepare"}})
	if faults.WaitCleared("hang-prepare", "uid", 10*time.Millisecond) {
		t.Fatal("WaitCleared reported a fault that still applies as cleared")
	}
}
