// Command kubelet is the pinned upstream kubelet for the real node tier, as its own binary:
//
//	kubelet [flags...]
//
// It runs the command of k8s.io/kubernetes/cmd/kubelet/app the way upstream's cmd/kubelet does, with the same
// log-format and metrics registrations.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
