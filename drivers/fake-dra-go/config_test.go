package main

import (
	"strings"
	"testing"
)

func noEnv(string) string { return "" }

func TestParseArgsTakesThePythonBuildsDefaults(t *testing.T) {
	c, err := parseArgs([]string{"--driver-name=d.example.com", "--node-name=n1"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.KubeletRoot != standardKubeletRoot || c.Devices != 4 || c.Profile != gpuProfile || c.DriverVersion != "1.0.0" {
		t.Fatalf("defaults: %+v", c)
	}
	if !c.ReadyCondition || c.WholeCallRefusal || len(c.HealthServices) != 2 {
		t.Fatalf("variant defaults: %+v", c)
	}
	if c.RegistrationSocket() != "/var/lib/kubelet/plugins_registry/d.example.com-reg.sock" {
		t.Fatalf("registration socket: %s", c.RegistrationSocket())
	}
}

func TestParseArgsReadsTheDeviceCountFromTheEnvironmentWithoutTheFlag(t *testing.T) {
	env := func(name string) string {
		if name == devicesEnv {
			return "12"
		}
		return ""
	}
	c, err := parseArgs([]string{"--driver-name=d", "--node-name=n"}, env)
	if err != nil || c.Devices != 12 {
		t.Fatalf("devices %d, error %v", c.Devices, err)
	}
	c, err = parseArgs([]string{"--driver-name=d", "--node-name=n", "--devices=3"}, env)
	if err != nil || c.Devices != 3 {
		t.Fatalf("the flag wins: devices %d, error %v", c.Devices, err)
	}
}

func TestParseArgsRefusesWhatTheGoBuildDoesNotHaveWithOneLine(t *testing.T) {
	for args, want := range map[string]string{
		"--broken-mode=melts":    "--broken-mode must be one of",
		"--profile=tpu":          "--profile must be one of",
		"--driver-version=3.0.0": "--driver-version must be 1.x.y or 2.x.y",
		"--devices=0":            "--devices must be a whole number of at least 1",
		"--health-service=v2":    "--health-service must be",
		"--no-such-flag":         "flag provided but not defined",
	} {
		_, err := parseArgs([]string{"--driver-name=d", "--node-name=n", args}, noEnv)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: got %v, want one line with %q", args, err, want)
		}
	}
}
