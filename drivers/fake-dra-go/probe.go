package main

import (
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// registeredCommand is the readiness probe of an image without a shell: `fake-dra registered --socket=PATH` exits 0
// once PATH is a socket. $VAR and ${VAR} in PATH are read from the environment, as the probe's exec gets none of the
// kubelet's $(VAR) expansion (the pod's UID names the socket of one instance in a rolling update).
const registeredCommand = "registered"

func registered(args []string, getenv func(string) string) int {
	const flagPrefix = "--socket="
	if len(args) != 1 || !strings.HasPrefix(args[0], flagPrefix) {
		return fail("usage: fake-dra %s --socket=PATH", registeredCommand)
	}
	path := os.Expand(strings.TrimPrefix(args[0], flagPrefix), getenv)
	info, err := os.Stat(path)
	if err != nil {
		return fail("%s: not registered yet: %v", path, err)
	}
	if info.Mode().Type() != fs.ModeSocket {
		return fail("%s: not a socket (%s)", path, info.Mode().Type())
	}
	fmt.Printf("registered: %s\n", path)
	return 0
}
