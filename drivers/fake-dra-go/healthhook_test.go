package main

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// fakeControl serves GET and PUT /faults on a unix socket, as control.go does, keeping what was PUT.
func fakeControl(t *testing.T, socket string, faults []map[string]any) func() []map[string]any {
	t.Helper()
	var mu sync.Mutex
	listener, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	server := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Method == http.MethodPut {
			var body struct {
				Faults []map[string]any `json:"faults"`
			}
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			faults = body.Faults
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"faults": faults})
	})}
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(func() { _ = server.Close() })
	return func() []map[string]any {
		mu.Lock()
		defer mu.Unlock()
		return faults
	}
}

func TestTheHealthCommandFailsADeviceOnEveryInstanceAndRestoresIt(t *testing.T) {
	dir, err := os.MkdirTemp("", "hook") // short: a unix socket path has a length limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	other := map[string]any{"mode": "slow-prepare", "delay": 1.0, "message": "injected fault"}
	instances := []func() []map[string]any{
		fakeControl(t, filepath.Join(dir, "control.sock"), []map[string]any{other}),
		fakeControl(t, filepath.Join(dir, "control-uid.sock"), nil),
	}
	if code := healthHook([]string{"--plugins-dir=" + dir, "--device=gpu-7", "--set=unhealthy"}); code != 0 {
		t.Fatalf("--set=unhealthy exited %d", code)
	}
	first, second := instances[0](), instances[1]()
	if len(first) != 2 || first[0]["mode"] != "slow-prepare" || first[1]["mode"] != "unavailable" || first[1]["device"] != "gpu-7" {
		t.Fatalf("first instance's faults: %v", first)
	}
	if len(second) != 1 || second[0]["device"] != "gpu-7" {
		t.Fatalf("second instance's faults: %v", second)
	}
	if code := healthHook([]string{"--plugins-dir=" + dir, "--device=gpu-7", "--set=healthy"}); code != 0 {
		t.Fatalf("--set=healthy exited %d", code)
	}
	if first, second := instances[0](), instances[1](); len(first) != 1 || first[0]["mode"] != "slow-prepare" || len(second) != 0 {
		t.Fatalf("after --set=healthy: %v, %v", first, second)
	}
	if code := healthHook([]string{"--plugins-dir=" + dir, "--device=gpu-7"}); code == 0 {
		t.Fatal("no --set: exited 0")
	}
	if code := healthHook([]string{"--plugins-dir=" + t.TempDir(), "--device=gpu-7", "--set=healthy"}); code == 0 {
		t.Fatal("no control socket: exited 0")
	}
}

func TestAnUnhealthyReportKeepsItsMessageUnlessTheModeDropsIt(t *testing.T) {
	for _, broken := range []bool{false, true} {
		c := Config{DriverName: "gpu.example.com", NodeName: "node-a", Profile: gpuProfile, Devices: 2}
		if broken {
			c.Broken = map[string]bool{unhealthyWithoutMessage: true}
		}
		core := &DriverCore{config: c, faults: newFaultSet(), healthChanged: make(chan struct{})}
		names := deviceNames(c)
		device := names[len(names)-1]
		core.faults.Replace([]Fault{{Mode: "unavailable", Device: &device, Message: defaultFaultMessage}})
		for _, health := range core.Health() {
			if health.device != device {
				continue
			}
			if health.healthy || (health.message == "") != broken {
				t.Fatalf("broken=%v: %+v", broken, health)
			}
		}
	}
}
