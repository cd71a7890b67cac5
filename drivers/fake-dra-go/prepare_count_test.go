package main

import "testing"

func TestPrepareCountsHoldTheClaimUntilEveryPrepareIsUnprepared(t *testing.T) {
	var counts prepareCounts
	counts.add(map[string]PrepareResult{"a": {}, "b": {Error: "failed"}})
	counts.add(map[string]PrepareResult{"a": {}}) // the kubelet's retry after another driver's claim failed
	if !counts.release("a") {
		t.Fatal("the first unprepare of a claim prepared twice undid it")
	}
	if counts.release("a") {
		t.Fatal("the second unprepare of a claim prepared twice left it prepared")
	}
	if counts.release("b") || counts.release("never-prepared") {
		t.Fatal("a claim whose prepare failed, or one never prepared, is held")
	}
}
