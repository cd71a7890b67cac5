// Command pause is the sandbox ("infra") container of pods on the local cluster's real node: it holds the pod's
// namespaces and does nothing else until it is told to stop. The pinned upstream pause image lives in a registry,
// and the local cluster has none, so the backend packs this binary into an OCI image of its own.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
