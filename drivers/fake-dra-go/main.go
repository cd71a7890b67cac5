// Command fake-dra-go is the reference DRA driver's Go build: one node's driver, until SIGTERM or SIGINT.
//
// Three commands besides: `fake-dra slices [options]` prints the pool the driver would publish, and
// `fake-dra registered --socket=PATH` is its image's readiness probe; `fake-dra health` is its profile's hook that
// makes a device unhealthy (healthhook.go).
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
)

const (
	preparedFile = "prepared.json"
	// shutdownGrace: gRPC servers get this long to finish in-flight calls on shutdown.
	shutdownGrace = 5 * time.Second
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == registeredCommand {
		os.Exit(registered(os.Args[2:], os.Getenv))
	}
	if len(os.Args) > 1 && os.Args[1] == slicesCommand {
		os.Exit(printSlices(os.Args[2:], os.Getenv, os.Stdout))
	}
	if len(os.Args) > 1 && os.Args[1] == healthCommand {
		os.Exit(healthHook(os.Args[2:]))
	}
	os.Exit(run(mustParse()))
}

func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "fake-dra: "+format+"\n", args...)
	return 1
}

func run(c Config) int {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT) // before anything starts: a stop during start-up waits
	if err := os.MkdirAll(c.StateDir, 0o755); err != nil {
		return fail("state directory: %v", err)
	}
	api, err := newDriverAPI(c)
	if err != nil {
		return fail("API client: %v", err)
	}
	calls, err := openCallLog(filepath.Join(c.StateDir, "calls.jsonl"), c.NodeName)
	if err != nil {
		return fail("call log: %v", err)
	}
	if c.IsBroken(losesStateOnRestart) {
		_ = os.Remove(filepath.Join(c.StateDir, preparedFile)) // as if the state had lived in memory
	}
	prepared, err := loadPreparedClaims(filepath.Join(c.StateDir, preparedFile), c.DriverVersion, c.RollingUpdateUID != "")
	if err != nil {
		return fail("prepared claims in %s: %v", c.StateDir, err)
	}
	prepared.writesOutsideLock = c.IsBroken(checkpointWrittenOutsideLock)
	core, err := newDriverCore(c, api, calls, prepared)
	switch {
	case err != nil:
	case prepared.WrittenByMajor > c.Major() && c.IsBroken(dropsPoolAfterDowngrade):
		err = api.DeletePool(c.NodeName) // the bug: a newer release's state makes it give up its pool
	default:
		err = core.Publish()
	}
	if err != nil {
		return fail("publish slices for %s: %s", c.NodeName, denial(err))
	}
	if c.StartFailure != "" {
		return fail("%v", failStart(c, api))
	}
	if c.IsBroken(removesOtherInstancesSockets) {
		removeOtherInstancesSockets(c)
	}
	servers, err := startGRPC(core)
	if err != nil {
		return fail("serve gRPC: %v", err)
	}
	controlListener, err := listenUnix(c.ControlSocket())
	if err != nil {
		return fail("control socket: %v", err)
	}
	crash := func() { os.Exit(crashExitCode) }
	control := &http.Server{Handler: controlHandler(core, crash), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = control.Serve(controlListener) }()
	controllerStop := make(chan struct{})
	defer close(controllerStop)
	if c.ControllerKubeconfig != "" {
		if err := startAttachController(c, core.faults, core.attachments, controllerStop); err != nil {
			return fail("attach controller: %v", err)
		}
	}
	fmt.Printf("fake-dra %s serving node %s, pool generation %d (Go build)\n", c.DriverName, c.NodeName, core.Generation())
	<-stop
	if c.IsBroken(leavesSocketsOnSigterm) {
		return 0 // the bug: it quits at once, its servers never stopped, their sockets left behind
	}
	began := time.Now()
	fmt.Printf("fake-dra stopping: gRPC servers (%g s grace), then the control socket\n", shutdownGrace.Seconds())
	core.StopKeepingPool()
	stopGRPC(servers)
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	_ = control.Shutdown(ctx)
	for _, path := range []string{c.RegistrationSocket(), c.DRASocket(), c.ControlSocket()} {
		_ = os.Remove(path)
	}
	if forgetsGeneration(c) {
		_ = os.Remove(generationFile(c)) // the bug: a tidy stop clears the state the next start needs
	}
	if c.IsBroken(deletesSlicesOnSigterm) && !c.DeleteSlicesOnExit {
		if err := api.DeletePool(c.NodeName); err != nil { // the bug: the kubelet's wiping delay made moot
			return fail("delete slices of %s: %s", c.NodeName, denial(err))
		}
	}
	if c.DeleteSlicesOnExit {
		fmt.Printf("fake-dra stopped serving after %.1f s; deleting its slices\n", time.Since(began).Seconds())
		if err := api.DeletePool(c.NodeName); err != nil {
			return fail("delete slices of %s: %s", c.NodeName, denial(err))
		}
	}
	fmt.Printf("fake-dra stopped after %.1f s\n", time.Since(began).Seconds())
	return 0
}

// stopGRPC lets in-flight calls finish within one grace period shared by all servers, then stops them.
func stopGRPC(servers []*grpc.Server) {
	done := make(chan struct{})
	go func() {
		for _, server := range servers {
			server.GracefulStop()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(shutdownGrace):
		for _, server := range servers {
			server.Stop()
		}
	}
}
