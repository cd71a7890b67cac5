package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// faultModes is the fault vocabulary; the engine's FAULT_SCHEMA (dra_conformance/driver/faults.py, which documents
// each mode) checks scenario faults against it. The protocol-level faults (slow-, hang-, prepare-error,
// unprepare-error, registration-failure) act in the gRPC servers' interceptors (interceptors.go), attach-failure in
// the gpu-fabric profile's attach controller, crash on the control socket, the others in the driver's core.
var faultModes = map[string]bool{
	"unavailable": true, "informational-taint": true, "reduced-capacity": true,
	"slow-prepare": true, "slow-unprepare": true, "prepare-error": true, "unprepare-error": true,
	"hang-prepare": true, "hang-unprepare": true, "status-write-failure": true, "cdi-without-edits": true,
	"registration-failure": true, "crash": true, "attach-failure": true,
}

// sliceModes change what the slice or the health stream says, so setting them republishes.
var sliceModes = map[string]bool{"unavailable": true, "informational-taint": true, "reduced-capacity": true}

const (
	crashExitCode       = 3
	defaultFaultMessage = "injected fault"
)

// Fault is one active fault: `device` and `claim` narrow it; absent means every device or claim.
type Fault struct {
	Mode    string  `json:"mode"`
	Device  *string `json:"device,omitempty"`
	Claim   *string `json:"claim,omitempty"`
	Delay   float64 `json:"delay,omitempty"` // only a zero delay means "not set"
	Devices *int    `json:"devices,omitempty"`
	Message string  `json:"message"`
}

// parseFault validates one fault description as the engine's FAULT_SCHEMA does; the error names the field.
func parseFault(raw json.RawMessage) (Fault, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return Fault{}, fmt.Errorf("fault: not an object: %s", strings.TrimSpace(string(raw)))
	}
	known := map[string]bool{"mode": true, "device": true, "claim": true, "delay": true, "devices": true, "message": true}
	for key := range fields {
		if !known[key] {
			return Fault{}, fmt.Errorf("fault: additional property %q is not allowed", key)
		}
	}
	if _, ok := fields["mode"]; !ok {
		return Fault{}, fmt.Errorf("fault: 'mode' is a required property")
	}
	decoder := json.NewDecoder(bytes.NewReader(raw))
	decoder.UseNumber()
	var values map[string]any
	if err := decoder.Decode(&values); err != nil {
		return Fault{}, err
	}
	fault := Fault{Message: defaultFaultMessage}
	mode, ok := values["mode"].(string)
	if !ok || !faultModes[mode] {
		return Fault{}, fmt.Errorf("mode: %s is not one of %s", pythonRepr(values["mode"], fields["mode"]), pythonList(sortedModes()))
	}
	fault.Mode = mode
	for _, key := range []string{"device", "claim", "message"} {
		value, present := values[key]
		if !present {
			continue
		}
		text, ok := value.(string)
		if !ok {
			return Fault{}, fmt.Errorf("%s: %s is not of type 'string'", key, strings.TrimSpace(string(fields[key])))
		}
		switch key {
		case "device":
			fault.Device = &text
		case "claim":
			fault.Claim = &text
		default:
			fault.Message = text
		}
	}
	if value, present := values["delay"]; present {
		number, ok := value.(json.Number)
		delay, err := number.Float64()
		if !ok || err != nil || delay < 0 {
			return Fault{}, fmt.Errorf("delay: %s is not a number of at least 0", strings.TrimSpace(string(fields["delay"])))
		}
		fault.Delay = delay
	}
	if value, present := values["devices"]; present {
		number, ok := value.(json.Number)
		count, err := number.Int64()
		if !ok || err != nil || count < 0 {
			return Fault{}, fmt.Errorf("devices: %s is not an integer of at least 0", strings.TrimSpace(string(fields["devices"])))
		}
		devices := int(count)
		fault.Devices = &devices
	}
	if (mode == "slow-prepare" || mode == "slow-unprepare") && fault.Delay <= 0 {
		return Fault{}, fmt.Errorf("delay: %s needs a delay greater than 0", mode)
	}
	if mode == "reduced-capacity" && fault.Devices == nil {
		return Fault{}, fmt.Errorf("fault: 'devices' is a required property")
	}
	return fault, nil
}

// pythonRepr writes a value as the engine's schema messages (Python's jsonschema) do: a string in single quotes,
// anything else as its JSON. Checks match on the wording (e.g. "mode: 'melt' is not one of").
func pythonRepr(value any, raw json.RawMessage) string {
	if text, ok := value.(string); ok {
		return "'" + text + "'"
	}
	return strings.TrimSpace(string(raw))
}

func pythonList(items []string) string {
	quoted := make([]string, len(items))
	for i, item := range items {
		quoted[i] = "'" + item + "'"
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

func sortedModes() []string {
	modes := make([]string, 0, len(faultModes))
	for mode := range faultModes {
		modes = append(modes, mode)
	}
	sort.Strings(modes)
	return modes
}

// applies says whether the fault concerns a claim (UID) and/or any of the given devices.
func (f Fault) applies(claim string, devices []string) bool {
	if f.Claim != nil && *f.Claim != claim {
		return false
	}
	if f.Device == nil {
		return true
	}
	for _, device := range devices {
		if device == *f.Device {
			return true
		}
	}
	return false
}

// FaultSet is the active faults of one driver process; a hang wakes up when the faults change.
type FaultSet struct {
	mu      sync.Mutex
	faults  []Fault
	changed chan struct{} // closed (and replaced) on every change
}

func newFaultSet() *FaultSet { return &FaultSet{changed: make(chan struct{})} }

// Replace makes `faults` the active set (an empty list restores normal behaviour).
func (s *FaultSet) Replace(faults []Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append([]Fault(nil), faults...)
	close(s.changed)
	s.changed = make(chan struct{})
}

// Active returns a copy of the active faults.
func (s *FaultSet) Active() []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Fault(nil), s.faults...)
}

// Find returns the first active fault of `mode` that applies.
func (s *FaultSet) Find(mode, claim string, devices []string) (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.findLocked(mode, claim, devices)
}

func (s *FaultSet) findLocked(mode, claim string, devices []string) (Fault, bool) {
	for _, fault := range s.faults {
		if fault.Mode == mode && fault.applies(claim, devices) {
			return fault, true
		}
	}
	return Fault{}, false
}

// WaitCleared blocks while a `mode` fault applies to `claim`; false if it still applies after `timeout`.
func (s *FaultSet) WaitCleared(mode, claim string, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		_, applies := s.findLocked(mode, claim, nil)
		changed := s.changed
		s.mu.Unlock()
		if !applies {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		}
	}
}

// covered lists the devices of `names` a `mode` fault covers.
func (s *FaultSet) covered(mode string, names []string) map[string]bool {
	devices := map[string]bool{}
	for _, name := range names {
		if _, ok := s.Find(mode, "", []string{name}); ok {
			devices[name] = true
		}
	}
	return devices
}

// UnavailableDevices are the devices an `unavailable` fault covers.
func (s *FaultSet) UnavailableDevices(names []string) map[string]bool {
	return s.covered("unavailable", names)
}

// InformationalDevices are the devices an `informational-taint` fault covers.
func (s *FaultSet) InformationalDevices(names []string) map[string]bool {
	return s.covered("informational-taint", names)
}

// PublishedDevices is how many devices the slice lists: `all`, or fewer under `reduced-capacity`.
func (s *FaultSet) PublishedDevices(all int) int {
	if reduced, ok := s.Find("reduced-capacity", "", nil); ok && reduced.Devices != nil {
		return *reduced.Devices
	}
	return all
}

// sliceFaults are the active faults that shape the slice or the health stream.
func sliceFaults(faults []Fault) string {
	var shaping []Fault
	for _, fault := range faults {
		if sliceModes[fault.Mode] {
			shaping = append(shaping, fault)
		}
	}
	encoded, _ := json.Marshal(shaping)
	return string(encoded)
}
