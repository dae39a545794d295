package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runStop signals the harness whose pid is in DIR/testenv.pid and waits for
// it, which in turn waits for its servers.
func runStop(args []string) int {
	fs := flag.NewFlagSet("stop", flag.ContinueOnError)
	dir := fs.String("dir", "", "the --dir given to start (required)")
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for the harness to exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "kfaws-testenv stop: --dir DIR is required and no other argument is allowed")
		return 2
	}
	pidFile := filepath.Join(*dir, "testenv.pid")
	data, err := os.ReadFile(pidFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfaws-testenv stop: %v\n", err)
		return 1
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		fmt.Fprintf(os.Stderr, "kfaws-testenv stop: %s: not a process id: %q\n", pidFile, data)
		return 1
	}
	// Guards against signalling an unrelated process that reused the pid.
	cmdline, err := processCmdline(pid)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfaws-testenv stop: %v\n", err)
		return 1
	}
	if !strings.Contains(cmdline, "kfaws-testenv") || !processAlive(pid) {
		fmt.Fprintf(os.Stderr, "kfaws-testenv: harness %d is not running\n", pid)
		return 0
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		fmt.Fprintf(os.Stderr, "kfaws-testenv stop: signalling %d: %v\n", pid, err)
		return 1
	}
	deadline := time.Now().Add(*timeout)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "kfaws-testenv stop: harness %d still running after %s\n", pid, *timeout)
			return 1
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0
}
