package main

import "fmt"

// A release that cannot start (issue 44, item 4): `--start-failure=after-publish` makes the process publish its
// pool and then give up before it serves, as a release missing something it needs only to serve would. The
// upgrade check rolls a DaemonSet to such a release and expects the old instance to keep serving meanwhile. Its bug,
// failed-start-deletes-pool, is among the broken modes (broken.go).
const (
	startFailureAfterPublish = "after-publish"
)

var startFailures = []string{"", startFailureAfterPublish}

// failStart ends a start that published its pool and cannot serve: with failed-start-deletes-pool it deletes the
// pool first. The error is the one line the process exits with.
func failStart(c Config, api *DriverAPI) error {
	if c.IsBroken(failedStartDeletesPool) {
		if err := api.DeletePool(c.NodeName); err != nil {
			return fmt.Errorf("start-up failed (--start-failure=%s); deleting the pool of %s: %s", c.StartFailure, c.NodeName, denial(err))
		}
	}
	return fmt.Errorf("start-up failed after publishing the pool of %s (--start-failure=%s)", c.NodeName, c.StartFailure)
}
