// Command kube is a multi-call binary for the pinned Kubernetes control plane:
//
//	kube apiserver|controller-manager|scheduler [flags...]
//
// Linking the three components once saves several minutes of a cold build on small machines.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

var components = map[string]func() *cobra.Command{
	"apiserver":          apiserver.NewAPIServerCommand,
	"controller-manager": controllermanager.NewControllerManagerCommand,
	"scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
}

func main() {
	if len(os.Args) < 2 || components[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: kube apiserver|controller-manager|scheduler [flags...]")
		os.Exit(2)
	}
	command := components[os.Args[1]]()
	command.SetArgs(os.Args[2:])
	os.Exit(cli.Run(command))
}
