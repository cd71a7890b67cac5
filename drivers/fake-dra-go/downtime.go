package main

import (
	"fmt"
	"os"
	"path/filepath"

	resourceapi "k8s.io/api/resource/v1"
)

// Broken modes of a graceful stop and restart (issue 44's downtime checks; issue 43's held-out class), of the Go
// build only: passed as --broken-mode arguments, as class-config-over-claim-config is.
const (
	// deletesSlicesOnSigterm: on SIGTERM the driver deletes its slices and forgets its pool generation, so the next
	// start publishes from generation 1 (issue 43's held-out bug). Every restart, however short, takes its devices
	// away from the scheduler, which the kubelet's wiping delay is there to avoid.
	deletesSlicesOnSigterm = "deletes-slices-on-sigterm"
	// restartsGenerationBesideOldSlices: on SIGTERM the driver forgets its pool generation (a tidy stop clears its
	// state), and it names its slices after their generation. The next start writes generation 1 under new names
	// next to the old run's slices of a higher generation, and deletes those only once its own are written.
	restartsGenerationBesideOldSlices = "restarts-generation-beside-old-slices"
	// leavesSocketsOnSigterm: on SIGTERM the driver quits at once, without stopping its gRPC servers, so its
	// registration and DRA sockets are left behind (what the kubelet-plugin helper's doc warns against).
	leavesSocketsOnSigterm = "leaves-sockets-on-sigterm"
	// rewritesSlicesOnRestart: every start republishes the pool at a new generation, whether or not its content
	// changed (this driver's own behaviour before issue 44): each restart or rollout rewrites every slice, so the
	// slices' resourceVersion churns and every consumer (the scheduler's informers) takes in the pool again.
	rewritesSlicesOnRestart = "rewrites-slices-on-restart"
)

// generationFile is where the pool generation survives restarts.
func generationFile(c Config) string { return filepath.Join(c.StateDir, "generation") }

// forgetsGeneration: on SIGTERM the broken driver removes its stored pool generation.
func forgetsGeneration(c Config) bool {
	return c.IsBroken(deletesSlicesOnSigterm) || c.IsBroken(restartsGenerationBesideOldSlices)
}

// restartsAtOne is restarts-generation-beside-old-slices at start: with no stored generation it starts from 1,
// whatever generation the slices still published carry.
func restartsAtOne(c Config) bool {
	if !c.IsBroken(restartsGenerationBesideOldSlices) {
		return false
	}
	_, err := os.Stat(generationFile(c))
	return os.IsNotExist(err)
}

// namedByGeneration is restarts-generation-beside-old-slices' pool: each slice's name carries its generation.
func namedByGeneration(slices []resourceapi.ResourceSlice) []resourceapi.ResourceSlice {
	for i := range slices {
		slices[i].Name = fmt.Sprintf("%s-g%d", slices[i].Name, slices[i].Spec.Pool.Generation)
	}
	return slices
}
