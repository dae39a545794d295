// Command kube-controller-manager is the upstream Kubernetes controller
// manager, built from the pinned k8s.io/kubernetes module. kfaws-testenv runs
// it with only the controllers a cluster without nodes needs (namespace
// deletion, garbage collection, PVC/PV protection), so that deletions in
// tests finish as they do on a real cluster.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	// Registers the JSON log format and the client-go/version metrics, as the
	// upstream main package does; without them the corresponding flags and
	// metrics are missing.
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
