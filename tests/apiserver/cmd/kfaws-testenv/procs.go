package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// child is one server process whose output goes to a log file.
type child struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{} // closed once the process has been reaped
	err    error         // Wait's result, valid after exited is closed
}

// startChild must run on the main goroutine (see init in main.go) so that the
// parent-death signal fires when the harness process dies.
func startChild(name, bin, logPath string, args []string) (*child, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = os.Environ()
	// SIGKILL rather than SIGTERM: this only fires when the harness was killed
	// without a chance to stop its children in order, and a graceful
	// kube-apiserver shutdown would then wait on an etcd that is going away.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

func (c *child) running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs; it returns once the
// process has been reaped.
func (c *child) stop(grace time.Duration) {
	if !c.running() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(grace):
		fmt.Fprintf(os.Stderr, "kfaws-testenv: %s did not exit %s after SIGTERM, sending SIGKILL\n", c.name, grace)
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// logTail returns the last lines of the child's log for error messages.
func (c *child) logTail(lines int) string {
	data, err := os.ReadFile(c.log)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// freePorts asks the kernel for n distinct unused loopback ports. They are
// released before the servers bind them, so another process may take one in
// between; start retries with new ports when a server reports the address in use.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	data, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "stat"))
	if err != nil {
		return false
	}
	// The state field follows the parenthesised command name.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// processCmdline returns pid's command line with NULs replaced by spaces.
func processCmdline(pid int) (string, error) {
	data, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "cmdline"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", nil
		}
		return "", err
	}
	return strings.ReplaceAll(string(data), "\x00", " "), nil
}
