// Command pause is the sandbox process of every pod on the real node: it holds the pod's
// namespaces open, reaps the zombies it inherits as PID 1, and exits on SIGINT or SIGTERM.
// A Go version of kubernetes' build/pause/linux/pause.c, so that the image is built from
// source here instead of pulled from a registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
