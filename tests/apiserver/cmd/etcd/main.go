// Command etcd is the etcd server, built from the pinned go.etcd.io/etcd/server/v3
// module as storage for the test kube-apiserver.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
