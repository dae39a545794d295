// Command kfaws-testenv runs a throwaway Kubernetes control plane (etcd,
// kube-apiserver, and kube-controller-manager with the controllers that
// finish deletions) on loopback for kfaws's tests and demo, the way
// controller-runtime's envtest does: a generated CA, TLS everywhere, an admin
// client certificate in system:masters, RBAC authorization.
//
//	kfaws-testenv start --dir DIR [flags]   run in the foreground until signalled
//	kfaws-testenv stop  --dir DIR           signal a running `start` and wait for it
//
// See README.md next to this module for the ready-file format.
package main

import (
	"fmt"
	"os"
	"runtime"
)

// Children are started with a parent-death signal, which Linux ties to the
// thread that forked them, not to the process. Pinning the main goroutine to
// the main thread, and starting children only from it, makes that signal mean
// "the harness died".
func init() {
	runtime.LockOSThread()
}

const usage = `usage:
  kfaws-testenv start --dir DIR [flags]   start etcd, kube-apiserver and kube-controller-manager, write DIR/ready.json, run until SIGTERM/SIGINT
  kfaws-testenv stop --dir DIR            stop the harness started with the same DIR and wait until it has exited
Run "kfaws-testenv start -h" for the flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "start":
		os.Exit(runStart(os.Args[2:]))
	case "stop":
		os.Exit(runStop(os.Args[2:]))
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "kfaws-testenv: unknown command %q (want start or stop)\n%s", os.Args[1], usage)
		os.Exit(2)
	}
}
