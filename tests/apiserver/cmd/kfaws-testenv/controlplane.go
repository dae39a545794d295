package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// controlPlane is a running etcd, kube-apiserver and kube-controller-manager.
type controlPlane struct {
	etcd, apiserver   *child
	controllerManager *child
	etcdEndpoint      string
	endpoint          string // kube-apiserver, https://127.0.0.1:PORT
	version           string // gitVersion from /version
}

// controllers are the kube-controller-manager controllers the harness runs
// (names as the pinned release's --controllers flag spells them, from
// k8s.io/kubernetes/cmd/kube-controller-manager/names): the ones that finish
// deletions on a real cluster without any node. The namespace controller
// empties and removes a Namespace being deleted, the garbage collector
// deletes dependents through ownerReferences (foreground and background
// deletion), and the PVC and PV protection controllers remove the
// kubernetes.io/pvc-protection and kubernetes.io/pv-protection finalizers that
// the StorageObjectInUseProtection admission plugin adds, once no Pod uses the
// claim and no claim is bound to the volume. Controllers that need nodes,
// pods, a cloud or signing (and the service-account controller, see the
// ServiceAccount admission flag below) are left out.
var controllers = []string{
	"namespace-controller",
	"garbage-collector-controller",
	"persistentvolumeclaim-protection-controller",
	"persistentvolume-protection-controller",
}

// controllerManagerLease is the Lease the kube-controller-manager leader holds
// (its --leader-elect-resource-namespace and --leader-elect-resource-name
// defaults); kfaws reads it to tell whether a namespace controller runs.
const controllerManagerLease = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager"

// readyInfo is the content of DIR/ready.json, written once /readyz answers.
type readyInfo struct {
	Endpoint             string            `json:"endpoint"`
	CAFile               string            `json:"ca_file"`
	Kubeconfig           string            `json:"kubeconfig"`
	ClientCertFile       string            `json:"client_cert_file"`
	ClientKeyFile        string            `json:"client_key_file"`
	EtcdEndpoint         string            `json:"etcd_endpoint"`
	ServiceAccountIssuer string            `json:"service_account_issuer"`
	KubernetesVersion    string            `json:"kubernetes_version"`
	Pids                 map[string]int    `json:"pids"`
	Logs                 map[string]string `json:"logs"`
	TokenWebhook         string            `json:"token_webhook,omitempty"`
	EKSClusterName       string            `json:"eks_cluster_name,omitempty"`
	PyTorchJobRunner     bool              `json:"pytorchjob_runner,omitempty"`
}

const (
	readyFile = "ready.json"
	readyEnv  = "ready.env"
)

func startControlPlane(o *startOptions, p *pki, signals <-chan os.Signal) (*controlPlane, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, fmt.Errorf("finding free loopback ports: %w", err)
	}
	etcdClientPort, etcdPeerPort, apiPort := ports[0], ports[1], ports[2]
	logDir := filepath.Join(o.dir, "logs")
	dataDir := filepath.Join(o.dir, "etcd")
	// A previous attempt that lost a port race may have left a member behind
	// whose peer URL no longer matches.
	if err := os.RemoveAll(dataDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return nil, err
	}

	cp := &controlPlane{
		etcdEndpoint: fmt.Sprintf("https://127.0.0.1:%d", etcdClientPort),
		endpoint:     fmt.Sprintf("https://127.0.0.1:%d", apiPort),
	}
	peerURL := fmt.Sprintf("https://127.0.0.1:%d", etcdPeerPort)
	etcdArgs := []string{
		"--name=kfaws-testenv",
		"--data-dir=" + dataDir,
		"--listen-client-urls=" + cp.etcdEndpoint,
		"--advertise-client-urls=" + cp.etcdEndpoint,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=kfaws-testenv=" + peerURL,
		"--cert-file=" + p.etcdCert, "--key-file=" + p.etcdKey,
		"--trusted-ca-file=" + p.caCert, "--client-cert-auth=true",
		"--peer-cert-file=" + p.etcdCert, "--peer-key-file=" + p.etcdKey,
		"--peer-trusted-ca-file=" + p.caCert, "--peer-client-cert-auth=true",
		// The data is thrown away with the directory; fsync only slows tests
		// on a shared disk (envtest does the same).
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
	cp.etcd, err = startChild("etcd", o.etcdBin, filepath.Join(logDir, "etcd.log"), append(etcdArgs, o.etcdArgs...))
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(o.readyTimeout)
	etcdClient, err := tlsClient(p.caCert, p.etcdClientCert, p.etcdClientKey)
	if err != nil {
		cp.stop(o.stopTimeout)
		return nil, err
	}
	if err := waitReady(cp.etcd, etcdClient, cp.etcdEndpoint+"/health", bodyContains(`"health":"true"`), deadline, signals, o.parentGone); err != nil {
		cp.stop(o.stopTimeout)
		return nil, err
	}

	apiArgs := []string{
		"--etcd-servers=" + cp.etcdEndpoint,
		"--etcd-cafile=" + p.caCert,
		"--etcd-certfile=" + p.etcdClientCert,
		"--etcd-keyfile=" + p.etcdClientKey,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// The endpoint reconciler refuses a loopback advertise address (it
		// would publish it as the "kubernetes" Service's endpoint to pods);
		// with no pods here, the Service simply has no endpoints.
		"--endpoint-reconciler-type=none",
		fmt.Sprintf("--secure-port=%d", apiPort),
		// Self-signed fallback certificates would otherwise go to /var/run/kubernetes.
		"--cert-dir=" + p.dir,
		"--tls-cert-file=" + p.serverCert,
		"--tls-private-key-file=" + p.serverKey,
		"--client-ca-file=" + p.caCert,
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=" + serviceClusterIPRange,
		"--service-account-issuer=" + o.serviceAccountIssuer,
		"--service-account-key-file=" + p.saPubKey,
		"--service-account-signing-key-file=" + p.saSigningKey,
		// Privileged pods are part of what we apply (the EFS CSI node DaemonSet).
		"--allow-privileged=true",
		// The service-account controller does not run (see controllers), so
		// no namespace gets its "default" ServiceAccount and this plugin would
		// reject every Pod (envtest disables it for the same reason).
		"--disable-admission-plugins=ServiceAccount",
		// Towards kubelets (the PyTorchJob runner's node serves pods/log):
		// verify their serving certificate and present a client certificate.
		"--kubelet-certificate-authority=" + p.caCert,
		"--kubelet-client-certificate=" + p.kubeletClientCert,
		"--kubelet-client-key=" + p.kubeletClientKey,
		"--kubelet-preferred-address-types=InternalIP",
	}
	if o.tokenWebhookConfig != "" {
		apiArgs = append(apiArgs,
			"--authentication-token-webhook-config-file="+o.tokenWebhookConfig,
			"--authentication-token-webhook-version=v1")
	}
	cp.apiserver, err = startChild("kube-apiserver", o.apiBin, filepath.Join(logDir, "kube-apiserver.log"), append(apiArgs, o.apiserverArgs...))
	if err != nil {
		cp.stop(o.stopTimeout)
		return nil, err
	}
	adminClient, err := tlsClient(p.caCert, p.adminCert, p.adminKey)
	if err != nil {
		cp.stop(o.stopTimeout)
		return nil, err
	}
	if err := waitReady(cp.apiserver, adminClient, cp.endpoint+"/readyz", bodyContains("ok"), deadline, signals, o.parentGone); err != nil {
		cp.stop(o.stopTimeout)
		return nil, err
	}
	var version struct {
		GitVersion string `json:"gitVersion"`
	}
	body, err := get(adminClient, cp.endpoint+"/version")
	if err == nil {
		err = json.Unmarshal(body, &version)
	}
	if err != nil {
		cp.stop(o.stopTimeout)
		return nil, fmt.Errorf("reading %s/version: %w", cp.endpoint, err)
	}
	cp.version = version.GitVersion

	kcmKubeconfig := filepath.Join(o.dir, "kube-controller-manager.kubeconfig")
	if err := os.WriteFile(kcmKubeconfig, []byte(renderKubeconfig(cp.endpoint, p.caCert, "system:kube-controller-manager", p.kcmCert, p.kcmKey)), 0o600); err != nil {
		cp.stop(o.stopTimeout)
		return nil, err
	}
	kcmArgs := []string{
		"--kubeconfig=" + kcmKubeconfig,
		"--controllers=" + strings.Join(controllers, ","),
		// As on a real cluster: the leader holds kube-system/kube-controller-manager.
		// Longer than the defaults (15s, 10s) so that a loaded test machine
		// answering slowly does not cost the lease, which ends the process.
		"--leader-elect=true",
		"--leader-elect-lease-duration=60s",
		"--leader-elect-renew-deadline=40s",
		"--leader-elect-retry-period=2s",
		// No health or metrics endpoint: readiness is the lease, and no port
		// can be lost to a race.
		"--secure-port=0",
		// Each controller acts as its own service account in kube-system, bound
		// by the RBAC bootstrap policy to its system:controller:* role, as
		// kubeadm and EKS run it; the system:kube-controller-manager role alone
		// may not delete a namespace's contents.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + p.saSigningKey,
		"--root-ca-file=" + p.caCert,
		// A namespace deletion lists and deletes every namespaced resource
		// type; the default 20 requests per second make that take seconds.
		"--kube-api-qps=200",
		"--kube-api-burst=400",
	}
	cp.controllerManager, err = startChild("kube-controller-manager", o.kcmBin, filepath.Join(logDir, "kube-controller-manager.log"), append(kcmArgs, o.controllerManagerArgs...))
	if err != nil {
		cp.stop(o.stopTimeout)
		return nil, err
	}
	if err := waitReady(cp.controllerManager, adminClient, cp.endpoint+controllerManagerLease, leaseHeld, deadline, signals, o.parentGone); err != nil {
		cp.stop(o.stopTimeout)
		return nil, err
	}
	return cp, nil
}

// bodyContains is a readiness check: the answer contains want.
func bodyContains(want string) func([]byte) error {
	return func(body []byte) error {
		if strings.Contains(string(body), want) {
			return nil
		}
		return fmt.Errorf("answered %q", strings.TrimSpace(string(body)))
	}
}

// leaseHeld is a readiness check on a coordination.k8s.io/v1 Lease: it has a
// holder whose last renewal is within the lease's duration.
func leaseHeld(body []byte) error {
	var lease struct {
		Spec struct {
			HolderIdentity       string    `json:"holderIdentity"`
			LeaseDurationSeconds int       `json:"leaseDurationSeconds"`
			RenewTime            time.Time `json:"renewTime"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(body, &lease); err != nil {
		return fmt.Errorf("not a Lease: %w", err)
	}
	s := lease.Spec
	if s.HolderIdentity == "" || time.Since(s.RenewTime) > time.Duration(s.LeaseDurationSeconds)*time.Second {
		return fmt.Errorf("lease not held (holder %q, renewed %v, duration %ds)", s.HolderIdentity, s.RenewTime, s.LeaseDurationSeconds)
	}
	return nil
}

// waitReady polls url until ready accepts its body, the child exits, a
// signal arrives, the parent is gone or the deadline passes.
func waitReady(c *child, client *http.Client, url string, ready func([]byte) error, deadline time.Time, signals <-chan os.Signal, parentGone func() bool) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		body, err := get(client, url)
		if err == nil {
			if err = ready(body); err == nil {
				return nil
			}
		}
		last = err
		select {
		case <-c.exited:
			tail := c.logTail(20)
			err := fmt.Errorf("%s exited before it was ready (%v); last lines of %s:\n%s", c.name, c.err, c.log, tail)
			if strings.Contains(tail, "address already in use") {
				return fmt.Errorf("%w: %w", errAddrInUse, err)
			}
			return err
		case s := <-signals:
			return fmt.Errorf("interrupted by %v while waiting for %s", s, c.name)
		case <-tick.C:
		}
		if parentGone() {
			return fmt.Errorf("parent process exited while waiting for %s", c.name)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s within --ready-timeout (last: %v); see %s", c.name, url, last, c.log)
		}
	}
}

func tlsClient(caFile, certFile, keyFile string) (*http.Client, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs:      pool,
			Certificates: []tls.Certificate{cert},
			MinVersion:   tls.VersionTLS12,
		}},
	}, nil
}

func get(client *http.Client, url string) ([]byte, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// writeReady writes the kubeconfig, DIR/ready.env and, last and atomically,
// DIR/ready.json, whose appearance tells callers the API server is ready and
// the controller manager holds its lease. It
// returns ready.json's content as one line.
func (cp *controlPlane) writeReady(o *startOptions, p *pki) (string, error) {
	kubeconfig := filepath.Join(o.dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(renderKubeconfig(cp.endpoint, p.caCert, "kfaws-admin", p.adminCert, p.adminKey)), 0o600); err != nil {
		return "", err
	}
	info := readyInfo{
		Endpoint:             cp.endpoint,
		CAFile:               p.caCert,
		Kubeconfig:           kubeconfig,
		ClientCertFile:       p.adminCert,
		ClientKeyFile:        p.adminKey,
		EtcdEndpoint:         cp.etcdEndpoint,
		ServiceAccountIssuer: o.serviceAccountIssuer,
		KubernetesVersion:    cp.version,
		Pids: map[string]int{
			"testenv":                 os.Getpid(),
			"etcd":                    cp.etcd.cmd.Process.Pid,
			"kube_apiserver":          cp.apiserver.cmd.Process.Pid,
			"kube_controller_manager": cp.controllerManager.cmd.Process.Pid,
		},
		Logs: map[string]string{
			"etcd":                    cp.etcd.log,
			"kube_apiserver":          cp.apiserver.log,
			"kube_controller_manager": cp.controllerManager.log,
		},
		TokenWebhook:   o.tokenWebhookURL,
		EKSClusterName: o.eksClusterName,
	}
	if o.pytorchJobRunner {
		info.PyTorchJobRunner = true
		info.Logs["pytorchjob_runner"] = filepath.Join(o.dir, "logs", "pytorchjob-runner.log")
		info.Logs["pytorchjobs"] = filepath.Join(o.dir, "logs", "pytorchjobs")
	}
	if o.tokenWebhookURL != "" {
		info.Logs["token_webhook"] = filepath.Join(o.dir, "logs", "token-webhook.log")
	}
	env := fmt.Sprintf("KFAWS_TESTENV_ENDPOINT=%s\nKFAWS_TESTENV_CA_FILE=%s\nKFAWS_TESTENV_CLIENT_CERT_FILE=%s\nKFAWS_TESTENV_CLIENT_KEY_FILE=%s\nKFAWS_TESTENV_PID=%d\nKUBECONFIG=%s\n",
		shellQuote(info.Endpoint), shellQuote(info.CAFile), shellQuote(info.ClientCertFile),
		shellQuote(info.ClientKeyFile), os.Getpid(), shellQuote(kubeconfig))
	if err := writeAtomic(filepath.Join(o.dir, readyEnv), []byte(env)); err != nil {
		return "", err
	}
	data, err := json.Marshal(info)
	if err != nil {
		return "", err
	}
	if err := writeAtomic(filepath.Join(o.dir, readyFile), append(data, '\n')); err != nil {
		return "", err
	}
	return string(data), nil
}

// removeReady runs first on shutdown so that nobody picks up an endpoint
// that is about to go away.
func (cp *controlPlane) removeReady(dir string) {
	os.Remove(filepath.Join(dir, readyFile))
	os.Remove(filepath.Join(dir, readyEnv))
}

// wait blocks until a signal, the death of the starting process (when
// exitWithParent) or the unexpected exit of a server, and returns the exit
// code for the harness.
func (cp *controlPlane) wait(signals <-chan os.Signal, o *startOptions) int {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case s := <-signals:
			fmt.Fprintf(os.Stderr, "kfaws-testenv: %v received, stopping\n", s)
			return 0
		case <-cp.etcd.exited:
			fmt.Fprintf(os.Stderr, "kfaws-testenv: etcd exited unexpectedly (%v); see %s\n", cp.etcd.err, cp.etcd.log)
			return 1
		case <-cp.apiserver.exited:
			fmt.Fprintf(os.Stderr, "kfaws-testenv: kube-apiserver exited unexpectedly (%v); see %s\n", cp.apiserver.err, cp.apiserver.log)
			return 1
		case <-cp.controllerManager.exited:
			fmt.Fprintf(os.Stderr, "kfaws-testenv: kube-controller-manager exited unexpectedly (%v); see %s\n", cp.controllerManager.err, cp.controllerManager.log)
			return 1
		case <-tick.C:
			if o.parentGone() {
				fmt.Fprintf(os.Stderr, "kfaws-testenv: parent process %d exited, stopping\n", o.parent)
				return 0
			}
		}
	}
}

// stop takes the controller manager down before the API server, and the API
// server before its storage.
func (cp *controlPlane) stop(grace time.Duration) {
	if cp.controllerManager != nil {
		cp.controllerManager.stop(grace)
	}
	if cp.apiserver != nil {
		cp.apiserver.stop(grace)
	}
	if cp.etcd != nil {
		cp.etcd.stop(grace)
	}
}

// renderKubeconfig writes a kubeconfig for one client-certificate user.
func renderKubeconfig(endpoint, caCert, user, cert, key string) string {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) } // JSON strings are YAML scalars
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kfaws-testenv
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: kfaws-testenv
  context:
    cluster: kfaws-testenv
    user: %s
current-context: kfaws-testenv
`, q(endpoint), q(caCert), q(user), q(cert), q(key), q(user))
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
