package main

import (
	"encoding/json"
	"os"
	"path/filepath"
)

const cdiVersion = "0.8.0"

// cdiKind is the CDI kind <vendor>/<class>: the driver name is the vendor, the device profile the class.
func cdiKind(c Config) string { return c.DriverName + "/" + c.Profile }

func cdiSpecPath(c Config, claimUID string) string {
	return filepath.Join(c.CDIDir, c.DriverName+"-"+claimUID+".json")
}

// cdiDeviceID is the fully qualified CDI device name the runtime injects.
func cdiDeviceID(c Config, claimUID, device string) string {
	return cdiKind(c) + "=" + claimUID + "-" + device
}

type cdiDevice struct {
	Name           string         `json:"name"`
	ContainerEdits map[string]any `json:"containerEdits"`
}

type cdiSpec struct {
	CDIVersion     string         `json:"cdiVersion"`
	Kind           string         `json:"kind"`
	Devices        []cdiDevice    `json:"devices"`
	ContainerEdits map[string]any `json:"containerEdits"`
}

// writeCDISpec writes the claim's spec (atomically), one CDI device per allocated device, and returns its IDs.
// Without `edits` (the cdi-without-edits fault) the spec leaves out what identifies the device; it stays valid, as a
// CDI device needs some edit.
//
// `setUp` names the device each CDI device's edits set up (the device itself, but for cdi-edits-name-other-device);
// `sharing` is each device's sharing mode from its opaque configs ("": none, nil: none for any), set as
// FAKE_DRA_SHARING.
func writeCDISpec(c Config, claimUID string, devices, setUp, sharing []string, edits bool) ([]string, error) {
	spec := cdiSpec{CDIVersion: cdiVersion, Kind: cdiKind(c), ContainerEdits: map[string]any{}}
	ids := make([]string, len(devices))
	for i, device := range devices {
		env := []string{"FAKE_DRA_DEVICE=" + setUp[i], "FAKE_DRA_CLAIM=" + claimUID}
		if !edits {
			env = env[1:]
		}
		if i < len(sharing) && sharing[i] != "" {
			env = append(env, sharingEnv+"="+sharing[i])
		}
		spec.Devices = append(spec.Devices, cdiDevice{Name: claimUID + "-" + device, ContainerEdits: map[string]any{"env": env}})
		ids[i] = cdiDeviceID(c, claimUID, device)
	}
	body, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	return ids, replaceFile(cdiSpecPath(c, claimUID), body)
}

// removeCDISpec deletes the claim's spec; a missing file is fine (unprepare is idempotent).
func removeCDISpec(c Config, claimUID string) error {
	if err := os.Remove(cdiSpecPath(c, claimUID)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// removeDriverSpecs deletes every spec of the driver (by its file prefix): what unprepare-removes-other-claims-cdi
// does.
func removeDriverSpecs(c Config) {
	specs, _ := filepath.Glob(filepath.Join(c.CDIDir, c.DriverName+"-*.json"))
	for _, path := range specs {
		_ = os.Remove(path)
	}
}
