// Command pause is the pod-sandbox process of the local node's container runtime: it does
// nothing until SIGINT or SIGTERM, then exits 0. It plays the part of Kubernetes' own pause
// image (registry.k8s.io/pause), which cannot be pulled here (no registry is reachable); the
// behaviour (sleep, exit cleanly on a termination signal, reap children when PID 1) is the
// one that image documents.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		os.Stdout.WriteString("iadeep pause\n")
		return
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s == syscall.SIGCHLD {
			// PID 1 of a shared PID namespace inherits orphans: reap them.
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
