// Command dra-test-driver is the pinned upstream DRA test driver:
//
//	dra-test-driver [shared flags] kubelet-plugin [flags...]
//
// It runs the command of k8s.io/kubernetes/test/e2e/dra/test-driver/app the way upstream's own main does.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo/leaderelection"
	_ "k8s.io/component-base/metrics/prometheus/restclient"
	_ "k8s.io/component-base/metrics/prometheus/version"
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
	"k8s.io/kubernetes/test/e2e/dra/test-driver/app"
)

func main() {
	os.Exit(cli.Run(app.NewCommand()))
}
