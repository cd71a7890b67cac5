package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"time"
)

// healthCommand makes one device of a running driver unhealthy, or healthy again, through its control sockets: the
// hook its profile declares (health.makeUnhealthy, health.makeHealthy), as a vendor's driver would ship a command
// that fails a device on purpose.
//
//	fake-dra health --plugins-dir=DIR --device=NAME --set=unhealthy|healthy
//
// It adds (or removes) an `unavailable` fault for the device on every instance whose control socket is in DIR
// (control.sock, control-<uid>.sock during a rolling update), keeping their other faults; each instance answers once
// its health stream has sent the change.
const healthCommand = "health"

// healthHookTimeout bounds each request to a control socket.
const healthHookTimeout = 10 * time.Second

func healthHook(args []string) int {
	flags := flag.NewFlagSet(healthCommand, flag.ContinueOnError)
	dir := flags.String("plugins-dir", "", "the driver's plugins/<driver> directory, holding its control sockets")
	device := flags.String("device", "", "the device to change")
	set := flags.String("set", "", "unhealthy or healthy")
	if err := flags.Parse(args); err != nil || *dir == "" || *device == "" || (*set != "unhealthy" && *set != "healthy") {
		return fail("usage: fake-dra %s --plugins-dir=DIR --device=NAME --set=unhealthy|healthy", healthCommand)
	}
	sockets, _ := filepath.Glob(filepath.Join(*dir, "control*.sock"))
	if len(sockets) == 0 {
		return fail("%s: no control socket (control*.sock) in %s", healthCommand, *dir)
	}
	for _, socket := range sockets {
		if err := setDeviceHealth(socket, *device, *set == "unhealthy"); err != nil {
			return fail("%s: %s: %v", healthCommand, socket, err)
		}
		fmt.Printf("%s: device %s %s\n", socket, *device, *set)
	}
	return 0
}

// setDeviceHealth replaces the instance's `unavailable` faults for `device` with one (unhealthy) or none.
func setDeviceHealth(socket, device string, unhealthy bool) error {
	client := &http.Client{
		Timeout: healthHookTimeout,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}},
	}
	var current struct {
		Faults []map[string]any `json:"faults"`
	}
	if err := controlRequest(client, http.MethodGet, nil, &current); err != nil {
		return err
	}
	faults := []map[string]any{}
	for _, fault := range current.Faults {
		if fault["mode"] == "unavailable" && fault["device"] == device {
			continue
		}
		faults = append(faults, fault)
	}
	if unhealthy {
		faults = append(faults, map[string]any{"mode": "unavailable", "device": device, "message": "made unhealthy by the health hook"})
	}
	return controlRequest(client, http.MethodPut, map[string]any{"faults": faults}, nil)
}

func controlRequest(client *http.Client, method string, body any, answer any) error {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(data)
	}
	request, err := http.NewRequest(method, "http://fake-dra/faults", reader)
	if err != nil {
		return err
	}
	response, err := client.Do(request)
	if err != nil {
		return err
	}
	defer response.Body.Close()
	data, err := io.ReadAll(response.Body)
	if err != nil {
		return err
	}
	if response.StatusCode != http.StatusOK {
		return fmt.Errorf("%s /faults: %s: %s", method, response.Status, bytes.TrimSpace(data))
	}
	if answer != nil {
		return json.Unmarshal(data, answer)
	}
	return nil
}
