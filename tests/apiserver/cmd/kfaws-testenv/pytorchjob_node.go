package main

// The node of the PyTorchJob runner: a Node object "kfaws-local" whose
// kubelet endpoint is served here, so that pods/log (kubectl logs, kube-rs
// Api::logs and log_stream) works for replica Pods as on a cluster:
// kube-apiserver looks up the Pod's node, connects to its InternalIP and
// kubelet port over TLS (verifying the kubelet's certificate against the
// harness CA, presenting its kubelet client certificate) and relays
// GET /containerLogs/<namespace>/<pod>/<container>.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// kubeletClientCN is the common name of kube-apiserver's client certificate
// towards kubelets; the log endpoint serves no one else.
const kubeletClientCN = "kube-apiserver-kubelet-client"

// logRun records where each run of a Pod's container starts in its log
// file, so that a log request shows the current run (or, with previous, the
// one before) as the kubelet does.
type logRun struct {
	uid     types.UID
	starts  []int64
	running bool
}

func podKey(namespace, name string) string { return namespace + "/" + name }

// logPath is where a replica Pod's pytorch container writes.
func (r *pytorchJobRunner) logPath(namespace, pod string) string {
	return filepath.Join(r.dir, "logs", "pytorchjobs", namespace, pod+".log")
}

// runStarted and runEnded keep the log runs of a Pod (a new Pod UID starts afresh).
func (r *pytorchJobRunner) runStarted(pod *corev1.Pod, offset int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := podKey(pod.Namespace, pod.Name)
	lr := r.logRuns[k]
	if lr == nil || lr.uid != pod.UID {
		lr = &logRun{uid: pod.UID}
		r.logRuns[k] = lr
	}
	lr.starts = append(lr.starts, offset)
	lr.running = true
}

func (r *pytorchJobRunner) runEnded(pod *corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if lr := r.logRuns[podKey(pod.Namespace, pod.Name)]; lr != nil && lr.uid == pod.UID {
		lr.running = false
	}
}

// startKubelet serves the kubelet endpoint on a free loopback port and
// registers the Node with that port and address 127.0.0.1.
func (r *pytorchJobRunner) startKubelet(p *pki, version string) error {
	cert, err := tls.LoadX509KeyPair(p.kubeletCert, p.kubeletKey)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(p.caCert)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", r.serveLogs)
	r.kubelet = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go r.kubelet.Serve(ln)
	port := ln.Addr().(*net.TCPAddr).Port

	nodes := r.kube.CoreV1().Nodes()
	node, err := nodes.Create(r.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: localNodeName,
		Labels: map[string]string{
			"kubernetes.io/hostname": localNodeName,
			"kubernetes.io/os":       "linux",
			"kubernetes.io/arch":     runtime.GOARCH,
		},
	}}, metav1.CreateOptions{FieldManager: kubeletManager})
	if apierrors.IsAlreadyExists(err) {
		node, err = nodes.Get(r.ctx, localNodeName, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("registering node %s: %w", localNodeName, err)
	}
	now := metav1.Now()
	var si syscall.Sysinfo_t
	_ = syscall.Sysinfo(&si)
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(int64(si.Totalram)*int64(si.Unit), resource.BinarySI),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node.Status = corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
			{Type: corev1.NodeHostName, Address: localNodeName},
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message:           "kfaws-testenv's PyTorchJob runner runs this node's Pods as local processes",
			LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion:          version,
			OperatingSystem:         "linux",
			Architecture:            runtime.GOARCH,
			ContainerRuntimeVersion: "kfaws-testenv://local-processes",
		},
	}
	if _, err := nodes.UpdateStatus(r.ctx, node, metav1.UpdateOptions{FieldManager: kubeletManager}); err != nil {
		return fmt.Errorf("node %s status: %w", localNodeName, err)
	}
	r.logf("node %s registered; kubelet endpoint https://127.0.0.1:%d", localNodeName, port)
	return nil
}

// logQuery is what a container log request asks for (the kubelet's
// parameters; sinceSeconds, sinceTime and timestamps are not supported: the
// runner keeps no time per line).
type logQuery struct {
	follow, previous bool
	tailLines        int   // -1: all
	limitBytes       int64 // 0: no limit
}

func parseLogQuery(q map[string][]string) (logQuery, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	lq := logQuery{follow: get("follow") == "true", previous: get("previous") == "true", tailLines: -1}
	if v := get("tailLines"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return lq, fmt.Errorf("tailLines %q is not a non-negative integer", v)
		}
		lq.tailLines = n
	}
	if v := get("limitBytes"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return lq, fmt.Errorf("limitBytes %q is not a positive integer", v)
		}
		lq.limitBytes = n
	}
	return lq, nil
}

// lastLines returns the last n lines of data (all of it when n < 0).
func lastLines(data []byte, n int) []byte {
	if n < 0 {
		return data
	}
	if n == 0 {
		return nil
	}
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		if data[i] == '\n' {
			if n--; n == 0 {
				return data[i+1:]
			}
		}
	}
	return data
}

// limitWriter stops after n bytes (n 0: unlimited) and reports it.
type limitWriter struct {
	w    io.Writer
	left int64
	on   bool
}

var errLimit = errors.New("limitBytes reached")

func (l *limitWriter) Write(b []byte) (int, error) {
	if !l.on {
		return l.w.Write(b)
	}
	if int64(len(b)) > l.left {
		n, err := l.w.Write(b[:l.left])
		l.left -= int64(n)
		if err == nil {
			err = errLimit
		}
		return n, err
	}
	n, err := l.w.Write(b)
	l.left -= int64(n)
	return n, err
}

func (r *pytorchJobRunner) serveLogs(w http.ResponseWriter, req *http.Request) {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 || req.TLS.PeerCertificates[0].Subject.CommonName != kubeletClientCN {
		http.Error(w, "forbidden: only kube-apiserver reads logs here", http.StatusForbidden)
		return
	}
	ns, pod, container := req.PathValue("namespace"), req.PathValue("pod"), req.PathValue("container")
	if container != pytorchContainer {
		http.Error(w, fmt.Sprintf("container %q in pod %q is not run by the local PyTorchJob runner (only %q is)", container, pod, pytorchContainer), http.StatusBadRequest)
		return
	}
	lq, err := parseLogQuery(req.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	key := podKey(ns, pod)
	r.mu.Lock()
	var starts []int64
	if lr := r.logRuns[key]; lr != nil {
		starts = append(starts, lr.starts...)
	}
	r.mu.Unlock()
	if len(starts) == 0 {
		http.Error(w, fmt.Sprintf("container %q in pod %q is waiting to start", container, pod), http.StatusBadRequest)
		return
	}
	start, end := starts[len(starts)-1], int64(-1)
	if lq.previous {
		if len(starts) < 2 {
			http.Error(w, fmt.Sprintf("previous terminated container %q in pod %q not found", container, pod), http.StatusBadRequest)
			return
		}
		start, end, lq.follow = starts[len(starts)-2], starts[len(starts)-1], false
	}
	f, err := os.Open(r.logPath(ns, pod))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if end < 0 {
		end = st.Size()
	}
	data := make([]byte, max(end-start, 0))
	n, _ := f.ReadAt(data, start)
	pos := start + int64(n)
	w.Header().Set("Content-Type", "text/plain")
	out := &limitWriter{w: w, left: lq.limitBytes, on: lq.limitBytes > 0}
	if _, err := out.Write(lastLines(data[:n], lq.tailLines)); err != nil || !lq.follow {
		return
	}
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		if flusher != nil {
			flusher.Flush()
		}
		r.mu.Lock()
		lr := r.logRuns[key]
		running := lr != nil && lr.running && len(lr.starts) == len(starts)
		r.mu.Unlock()
		n, _ := f.ReadAt(buf, pos)
		if n > 0 {
			pos += int64(n)
			if _, err := out.Write(buf[:n]); err != nil {
				return
			}
			continue
		}
		if !running {
			return // the run ended and everything it wrote was sent
		}
		select {
		case <-req.Context().Done():
			return
		case <-r.ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stopKubelet closes the endpoint (followers' streams end).
func (r *pytorchJobRunner) stopKubelet() {
	if r.kubelet != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := r.kubelet.Shutdown(ctx); err != nil {
			r.kubelet.Close()
		}
	}
}
