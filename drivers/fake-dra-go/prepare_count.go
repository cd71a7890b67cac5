package main

import "sync"

// prepareCounts is counts-prepares-per-claim's bookkeeping: how many successful prepares of each claim this process
// answered since its last cleanup. The bug takes every prepare of a claim for one more user of it (as if each were
// another pod's use of a shared claim) and cleans up only when as many unprepares balanced them. The kubelet asks
// again for a claim it did not mark prepared: when another driver's claim of the same pod failed, every retry of the
// pod prepares this driver's claim once more (k8s.io/kubernetes v1.37.2 pkg/kubelet/cm/dra/manager.go: "a retry of
// a prepare that had partially succeeded"), and the pod's end unprepares it once; the claim's CDI spec, its
// status.devices entries and its record stay (k/k#137819).
type prepareCounts struct {
	mu     sync.Mutex
	counts map[string]int
}

// add counts one more successful prepare of each claim answered without an error.
func (p *prepareCounts) add(results map[string]PrepareResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.counts == nil {
		p.counts = map[string]int{}
	}
	for uid, result := range results {
		if result.Error == "" {
			p.counts[uid]++
		}
	}
}

// release takes one unprepare off the claim's count: true while prepares are left over (the bug then answers the
// unprepare without undoing anything), false when this was the last one and the claim is cleaned up.
func (p *prepareCounts) release(uid string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.counts[uid] > 1 {
		p.counts[uid]--
		return true
	}
	delete(p.counts, uid)
	return false
}
