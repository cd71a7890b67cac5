package main

import (
	"encoding/json"
	"os"
	"sort"
	"sync"
	"time"
)

// CallLog records every gRPC call the driver served, mirrored to a JSON-lines file (calls.jsonl in the state
// directory) in the Python build's format; the control socket serves it.
type CallLog struct {
	node   string
	mu     sync.Mutex
	calls  []map[string]any
	mirror *os.File
}

func openCallLog(path, node string) (*CallLog, error) {
	mirror, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	return &CallLog{node: node, mirror: mirror}, nil
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// Record adds one call that started at `started` and ends now.
func (l *CallLog) Record(method string, started time.Time, claims []string, outcome string, errs map[string]string) {
	if claims == nil {
		claims = []string{}
	}
	entry := map[string]any{
		"method":  method,
		"node":    l.node,
		"claims":  claims,
		"outcome": outcome,
		"started": unixSeconds(started),
		"latency": time.Since(started).Seconds(),
	}
	if errs != nil {
		entry["errors"] = errs
	}
	line, _ := json.Marshal(entry)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, entry)
	_, _ = l.mirror.Write(append(line, '\n'))
}

// Calls returns every record, oldest first.
func (l *CallLog) Calls() []map[string]any {
	l.mu.Lock()
	calls := append([]map[string]any(nil), l.calls...)
	l.mu.Unlock()
	sort.SliceStable(calls, func(i, j int) bool { return calls[i]["started"].(float64) < calls[j]["started"].(float64) })
	return calls
}
