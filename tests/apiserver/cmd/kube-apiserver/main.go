// Command kube-apiserver is the upstream Kubernetes API server, built from the
// pinned k8s.io/kubernetes module so that tests run against the real thing.
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
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
