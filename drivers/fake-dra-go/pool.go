package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// slicesCommand prints, for a driver command line, the pool that driver publishes first (generation 1, every
// device, no fault) as a JSON list of ResourceSlices, and exits: benchmarks publish it for nodes that run no driver.
const slicesCommand = "slices"

func printSlices(args []string, getenv func(string) string, out io.Writer) int {
	c, err := parseArgs(args, getenv)
	if err != nil {
		return fail("%s: %s", slicesCommand, strings.TrimPrefix(fmt.Sprint(err), "usage: "))
	}
	slices := resourceSlices(c, 1, poolShape{published: c.Devices})
	for i := range slices {
		slices[i].APIVersion, slices[i].Kind = "resource.k8s.io/v1", "ResourceSlice"
	}
	if err := json.NewEncoder(out).Encode(slices); err != nil {
		return fail("%s: %v", slicesCommand, err)
	}
	return 0
}
