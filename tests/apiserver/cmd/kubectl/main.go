// Command kubectl is the upstream kubectl at the same pinned release as the
// test kube-apiserver; `make bench` compares kfaws's apply against its
// `apply --server-side`, and smoke.sh checks the harness's kubeconfig with it.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
