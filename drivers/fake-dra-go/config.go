package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	// devicesEnv: the device count may come from the environment instead of --devices, as many drivers'
	// DaemonSets set it.
	devicesEnv = "FAKE_DRA_DEVICES"
	// standardKubeletRoot: the kubelet root many vendor drivers hard-code (--standard-paths).
	standardKubeletRoot = "/var/lib/kubelet"
	gpuProfile          = "gpu"
	nicProfile          = "nic"
	partitionsProfile   = "gpu-partitions"
	sharedProfile       = "gpu-shared"
	fabricProfile       = "gpu-fabric"
	referenceIDs        = "reference"
	wordsIDs            = "words"
)

// profiles are the device profiles.
var profiles = []string{gpuProfile, nicProfile, partitionsProfile, sharedProfile, fabricProfile}

// healthServices: --health-service values and the DRAResourceHealth versions each serves and lists in GetInfo.
var healthServices = map[string][]string{
	"v1+v1alpha1": {"v1", "v1alpha1"},
	"v1":          {"v1"},
	"v1alpha1":    {"v1alpha1"},
	"none":        {},
}

var driverVersionPattern = regexp.MustCompile(`^[12]\.\d+\.\d+$`)

// Config is everything one driver process needs, from its command line.
type Config struct {
	DriverName, NodeName     string
	KubeletRoot, CDIDir      string
	StateDir, Kubeconfig     string
	Profile                  string
	Devices                  int
	DeleteSlicesOnExit       bool
	DriverVersion            string
	HealthServices           []string
	ReadyCondition           bool
	KeepStatusAfterUnprepare bool
	WholeCallRefusal         bool
	RefuseHeldDevices        bool // --refuse-devices-held-by-other-claims (held.go)
	IDFormat                 string
	APIQPS                   float64
	APIBurst                 int
	// gpu-fabric: the attach controller's own kubeconfig ("": no controller runs), and how long one attach takes.
	ControllerKubeconfig string
	AttachDelay          time.Duration
	// RollingUpdateUID is its pod's UID: every socket's name carries it, so an old and a new instance can both be
	// registered with the kubelet, and the prepared claims are shared between them through a file lock.
	RollingUpdateUID string
	// StartFailure is "" or after-publish: a release that publishes its pool and cannot serve (upgrade.go).
	StartFailure string
	// Broken is the set of broken modes (bugs) it runs with: empty for the correct driver.
	Broken map[string]bool
}

// IsBroken says whether the driver was started with the bug `mode`.
func (c Config) IsBroken(mode string) bool { return c.Broken[mode] }

// Major is the major number of the driver release this process plays.
func (c Config) Major() int {
	major, _ := strconv.Atoi(strings.SplitN(c.DriverVersion, ".", 2)[0])
	return major
}

// PluginDir holds the DRA service socket and the control socket.
func (c Config) PluginDir() string { return filepath.Join(c.KubeletRoot, "plugins", c.DriverName) }

// instanceSuffix names this instance's sockets during a rolling update (the upstream kubeletplugin helper's naming).
func (c Config) instanceSuffix() string {
	if c.RollingUpdateUID == "" {
		return ""
	}
	return "-" + c.RollingUpdateUID
}

// RegistrationSocket is where the kubelet's plugin watcher looks for this driver.
func (c Config) RegistrationSocket() string {
	suffix := c.instanceSuffix()
	if c.IsBroken(reusesRegistrationSocketName) {
		suffix = "" // the bug: every instance of a rolling update registers through the same file name
	}
	return filepath.Join(c.KubeletRoot, "plugins_registry", c.DriverName+suffix+"-reg.sock")
}

// DRASocket serves DRAPlugin and DRAResourceHealth.
func (c Config) DRASocket() string {
	return filepath.Join(c.PluginDir(), "dra"+c.instanceSuffix()+".sock")
}

// ControlSocket serves the HTTP control endpoint (control.go).
func (c Config) ControlSocket() string {
	return filepath.Join(c.PluginDir(), "control"+c.instanceSuffix()+".sock")
}

// errUsage marks a command line that cannot run; its message is the one line to print.
var errUsage = errors.New("usage")

func usageError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// parseArgs reads the command line (and FAKE_DRA_DEVICES, which --devices overrides); a command line that cannot
// run is refused with one line that says why.
func parseArgs(args []string, getenv func(string) string) (Config, error) {
	flags := flag.NewFlagSet("fake-dra", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	c := Config{}
	flags.StringVar(&c.DriverName, "driver-name", "", "DRA driver name (required)")
	flags.StringVar(&c.NodeName, "node-name", "", "the node this process serves (required)")
	kubeletRoot := flags.String("kubelet-root", "", "kubelet root directory (default "+standardKubeletRoot+")")
	standardPaths := flags.Bool("standard-paths", false, "hard-code the sockets under "+standardKubeletRoot)
	flags.StringVar(&c.RollingUpdateUID, "rolling-update-uid", "", "its pod's UID, for seamless rolling updates")
	flags.StringVar(&c.CDIDir, "cdi-dir", "/var/run/cdi", "where CDI specs are written")
	flags.StringVar(&c.StateDir, "state-dir", "/var/lib/fake-dra", "prepared claims and the pool generation")
	flags.StringVar(&c.Profile, "profile", gpuProfile, "device profile")
	devices := flags.String("devices", "", "devices in the node's pool (default $"+devicesEnv+", else 4)")
	flags.StringVar(&c.Kubeconfig, "kubeconfig", "", "default: in-cluster configuration")
	flags.BoolVar(&c.DeleteSlicesOnExit, "delete-slices-on-exit", false, "delete this node's slices on a clean exit")
	flags.StringVar(&c.DriverVersion, "driver-version", "1.0.0", "release to play: 1.x.y or 2.x.y")
	var broken []string
	flags.Func("broken-mode", "not in the Go build yet", func(mode string) error {
		broken = append(broken, mode)
		return nil
	})
	health := flags.String("health-service", "v1+v1alpha1", "DRAResourceHealth versions served")
	conditions := flags.String("status-conditions", "ready", "ready or none")
	flags.BoolVar(&c.KeepStatusAfterUnprepare, "keep-status-after-unprepare", false, "leave status.devices entries")
	unknown := flags.String("unknown-claim-answer", "per-claim", "per-claim or whole-call")
	flags.BoolVar(&c.RefuseHeldDevices, "refuse-devices-held-by-other-claims", false, "refuse a claim whose device another claim still holds")
	flags.StringVar(&c.IDFormat, "device-id-format", referenceIDs, "reference or words")
	flags.Float64Var(&c.APIQPS, "api-qps", 0, "client-side API rate limit (0: none)")
	flags.IntVar(&c.APIBurst, "api-burst", 10, "requests allowed at once under --api-qps")
	flags.StringVar(&c.ControllerKubeconfig, "controller-kubeconfig", "", "gpu-fabric: the attach controller's identity")
	flags.StringVar(&c.StartFailure, "start-failure", "", "after-publish: a release that publishes its pool, then cannot serve")
	attachDelay := flags.Float64("attach-delay", 1.0, "gpu-fabric: seconds one attach takes")
	if err := flags.Parse(args); errors.Is(err, flag.ErrHelp) {
		flags.SetOutput(os.Stderr)
		fmt.Fprintln(os.Stderr, "usage: fake-dra --driver-name=NAME --node-name=NODE [options]; fake-dra registered --socket=PATH; fake-dra slices [the driver's options]")
		flags.PrintDefaults()
		return c, err
	} else if err != nil {
		return c, usageError("%v", err)
	}
	if flags.NArg() > 0 {
		return c, usageError("unexpected arguments: %s", strings.Join(flags.Args(), " "))
	}
	switch {
	case c.DriverName == "" || c.NodeName == "":
		return c, usageError("--driver-name and --node-name are required")
	case *standardPaths && *kubeletRoot != "":
		return c, usageError("--standard-paths fixes the kubelet root at %s: drop --kubelet-root", standardKubeletRoot)
	case *attachDelay < 0:
		return c, usageError("--attach-delay must not be negative, got %g", *attachDelay)
	case c.APIQPS < 0 || c.APIBurst < 1:
		return c, usageError("--api-qps must be 0 or more and --api-burst at least 1, got %g and %d", c.APIQPS, c.APIBurst)
	case !driverVersionPattern.MatchString(c.DriverVersion):
		return c, usageError("--driver-version must be 1.x.y or 2.x.y, got %s", c.DriverVersion)
	case c.IDFormat != referenceIDs && c.IDFormat != wordsIDs:
		return c, usageError("--device-id-format must be %s or %s, got %s", referenceIDs, wordsIDs, c.IDFormat)
	case *conditions != "ready" && *conditions != "none":
		return c, usageError("--status-conditions must be ready or none, got %s", *conditions)
	case *unknown != "per-claim" && *unknown != "whole-call":
		return c, usageError("--unknown-claim-answer must be per-claim or whole-call, got %s", *unknown)
	case !slices.Contains(startFailures, c.StartFailure):
		return c, usageError("--start-failure must be %s or empty, got %s", startFailureAfterPublish, c.StartFailure)
	}
	if !slices.Contains(profiles, c.Profile) {
		return c, usageError("--profile must be one of %s; got %s", strings.Join(profiles, ", "), c.Profile)
	}
	c.AttachDelay = time.Duration(*attachDelay * float64(time.Second))
	c.Broken = map[string]bool{}
	for _, mode := range broken {
		if !slices.Contains(brokenModes, mode) {
			return c, usageError("--broken-mode must be one of %s; got %s", strings.Join(brokenModes, ", "), mode)
		}
		c.Broken[mode] = true
	}
	services, ok := healthServices[*health]
	if !ok {
		return c, usageError("--health-service must be v1+v1alpha1, v1, v1alpha1 or none, got %s", *health)
	}
	c.HealthServices = services
	c.ReadyCondition = *conditions == "ready"
	c.WholeCallRefusal = *unknown == "whole-call"
	c.KubeletRoot = *kubeletRoot
	if c.KubeletRoot == "" {
		c.KubeletRoot = standardKubeletRoot
	}
	count := *devices
	name := "--devices"
	if count == "" {
		count, name = getenv(devicesEnv), devicesEnv
		if count == "" {
			count = "4"
		}
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 {
		return c, usageError("%s must be a whole number of at least 1, got %q", name, count)
	}
	c.Devices = n
	return c, nil
}

func mustParse() Config {
	c, err := parseArgs(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0) // the flag set printed its usage, as -h asks
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fake-dra: error: %s\n", strings.TrimPrefix(err.Error(), "usage: "))
		os.Exit(2)
	}
	return c
}
