package main

import (
	"os"
	"testing"
)

// A reboot empties the CDI dir while prepared.json survives: a repeated prepare writes the claim's spec again and
// answers as before; replayed-prepare-skips-cdi-specs answers from the record alone.
func TestRepeatedPrepareWritesALostCDISpecAgain(t *testing.T) {
	for _, broken := range []bool{false, true} {
		stateDir := t.TempDir()
		claim := heldClaim(t, "c1", "uid-1", allocated("gpu-0"))
		core := heldCore(t, stateDir, false, claim)
		core.config.Broken[replayedPrepareSkipsCDISpecs] = broken
		first, _ := core.Prepare([]ClaimRef{refOf(claim)})
		spec := cdiSpecPath(core.config, "uid-1")
		if err := os.Remove(spec); err != nil {
			t.Fatalf("spec of the first prepare: %v", err)
		}
		again, _ := core.Prepare([]ClaimRef{refOf(claim)})
		_, err := os.Stat(spec)
		if again["uid-1"].Error != "" || len(again["uid-1"].Devices) != len(first["uid-1"].Devices) {
			t.Fatalf("broken=%v: repeated prepare %+v, first %+v", broken, again["uid-1"], first["uid-1"])
		}
		if rewritten := err == nil; rewritten == broken {
			t.Errorf("broken=%v: spec written again: %v", broken, rewritten)
		}
	}
}
