package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// The Service network of the test cluster; kube-apiserver reserves its first
// address for the "kubernetes" Service, so the serving certificate names it.
const serviceClusterIPRange = "10.0.0.0/24"

var serviceClusterIP = net.IPv4(10, 0, 0, 1)

// eksClusterName is EKS CreateCluster's rule for cluster names.
var eksClusterName = regexp.MustCompile(`^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$`)

type startOptions struct {
	dir                   string
	binDir                string
	etcdBin, apiBin       string
	kcmBin                string
	readyTimeout          time.Duration
	stopTimeout           time.Duration
	serviceAccountIssuer  string
	tokenWebhookConfig    string
	awsSTSEndpoint        string // serve the EKS token webhook against this STS
	eksClusterName        string
	awsEmulatorControl    string
	tokenWebhookURL       string // set once the webhook listens
	pytorchJobRunner      bool   // run PyTorchJobs as local processes (pytorchjob.go)
	exitWithParent        bool
	parent                int // process id of whoever started the harness
	apiserverArgs         multiFlag
	controllerManagerArgs multiFlag
	etcdArgs              multiFlag
}

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// errAddrInUse marks a start attempt that lost a port race and may be retried.
var errAddrInUse = errors.New("address already in use")

// startAttempts bounds retries of the free-port race (see freePorts).
const startAttempts = 3

func runStart(args []string) int {
	var o startOptions
	fs := flag.NewFlagSet("start", flag.ContinueOnError)
	fs.StringVar(&o.dir, "dir", "", "directory for certificates, kubeconfig, etcd data, logs and ready.json (required; created, must be empty)")
	fs.StringVar(&o.binDir, "bin-dir", "", "directory holding etcd, kube-apiserver and kube-controller-manager (default: the directory of this executable, where build.sh puts them)")
	fs.StringVar(&o.etcdBin, "etcd", "", "path of the etcd binary (default: BIN-DIR/etcd)")
	fs.StringVar(&o.apiBin, "kube-apiserver", "", "path of the kube-apiserver binary (default: BIN-DIR/kube-apiserver)")
	fs.StringVar(&o.kcmBin, "kube-controller-manager", "", "path of the kube-controller-manager binary (default: BIN-DIR/kube-controller-manager)")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", 3*time.Minute, "how long to wait for etcd /health, kube-apiserver /readyz and the kube-controller-manager lease")
	fs.DurationVar(&o.stopTimeout, "stop-timeout", 15*time.Second, "how long each server gets to exit after SIGTERM before SIGKILL")
	fs.StringVar(&o.serviceAccountIssuer, "service-account-issuer", "https://kubernetes.default.svc.cluster.local", "issuer (iss) of service-account tokens, as kube-apiserver's flag of that name")
	fs.StringVar(&o.tokenWebhookConfig, "authentication-token-webhook-config-file", "", "kubeconfig-format file of a TokenReview webhook (authentication.k8s.io/v1) that kube-apiserver consults for bearer tokens")
	fs.StringVar(&o.awsSTSEndpoint, "aws-sts-endpoint", "", "serve an EKS token webhook (TokenReview, authentication.k8s.io/v1) that checks k8s-aws-v1. tokens as aws-iam-authenticator does against this STS endpoint (the AWS emulator's URL) and pass it to kube-apiserver; needs --eks-cluster-name")
	fs.StringVar(&o.eksClusterName, "eks-cluster-name", "", "the EKS cluster name tokens must be signed for (their x-k8s-aws-id header)")
	fs.StringVar(&o.awsEmulatorControl, "aws-emulator-control", "", "the AWS emulator's control API, where the webhook looks up who created the cluster and the PyTorchJob runner finds the registry and the local EFS (default: --aws-sts-endpoint + /_kfaws)")
	fs.BoolVar(&o.pytorchJobRunner, "pytorchjob-runner", false, "run kubeflow.org/v1 PyTorchJobs like the training operator plus a kubelet: each replica's pytorch container becomes a local process from the image in the emulated ECR, EFS claims map to the emulator's local EFS directories (needs --aws-emulator-control or --aws-sts-endpoint)")
	fs.BoolVar(&o.exitWithParent, "exit-with-parent", true, "stop when the process that started the harness exits")
	fs.Var(&o.apiserverArgs, "apiserver-arg", "extra kube-apiserver flag such as --v=4 (repeatable; appended after the harness's own flags, so a single-value flag given here wins, while a list flag such as --disable-admission-plugins adds to the harness's value)")
	fs.Var(&o.controllerManagerArgs, "controller-manager-arg", "extra kube-controller-manager flag such as --v=4 (repeatable; appended after the harness's own flags, so a flag given here wins)")
	fs.Var(&o.etcdArgs, "etcd-arg", "extra etcd flag (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "kfaws-testenv start: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if err := o.complete(); err != nil {
		fmt.Fprintf(os.Stderr, "kfaws-testenv start: %v\n", err)
		return 2
	}

	o.parent = os.Getppid()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	if err := os.WriteFile(filepath.Join(o.dir, "testenv.pid"), fmt.Appendf(nil, "%d\n", os.Getpid()), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "kfaws-testenv start: %v\n", err)
		return 1
	}
	p, err := newPKI(filepath.Join(o.dir, "pki"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfaws-testenv start: generating certificates: %v\n", err)
		return 1
	}

	if o.awsSTSEndpoint != "" {
		wh, err := startTokenWebhook(&o, p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kfaws-testenv start: token webhook: %v\n", err)
			return 1
		}
		defer wh.close()
		o.tokenWebhookURL = wh.url
	}

	var cp *controlPlane
	for attempt := 1; ; attempt++ {
		cp, err = startControlPlane(&o, p, signals)
		if err == nil {
			break
		}
		if errors.Is(err, errAddrInUse) && attempt < startAttempts {
			fmt.Fprintf(os.Stderr, "kfaws-testenv: %v; retrying with new ports\n", err)
			continue
		}
		fmt.Fprintf(os.Stderr, "kfaws-testenv start: %v\n", err)
		return 1
	}

	var runner *pytorchJobRunner
	if o.pytorchJobRunner {
		if runner, err = startPyTorchJobRunner(&o, cp.endpoint, cp.version, p); err != nil {
			cp.stop(o.stopTimeout)
			fmt.Fprintf(os.Stderr, "kfaws-testenv start: PyTorchJob runner: %v\n", err)
			return 1
		}
	}
	stopRunner := func() {
		if runner != nil {
			runner.stop()
		}
	}

	info, err := cp.writeReady(&o, p)
	if err != nil {
		stopRunner()
		cp.stop(o.stopTimeout)
		fmt.Fprintf(os.Stderr, "kfaws-testenv start: %v\n", err)
		return 1
	}
	fmt.Println(info)
	fmt.Fprintf(os.Stderr, "kfaws-testenv: ready at %s; stop with SIGTERM or `kfaws-testenv stop --dir %s`\n", cp.endpoint, o.dir)

	code := cp.wait(signals, &o)
	cp.removeReady(o.dir)
	stopRunner() // replicas first: they may use the API server until the end
	cp.stop(o.stopTimeout)
	return code
}

// parentGone reports whether the process that started the harness has exited
// (we were re-parented) and --exit-with-parent asks us to follow it. Polling the
// parent id works whichever thread of the parent started us, unlike
// PR_SET_PDEATHSIG: a Rust test thread that ends would otherwise take a harness
// shared by the whole test binary with it.
func (o *startOptions) parentGone() bool {
	return o.exitWithParent && os.Getppid() != o.parent
}

func (o *startOptions) complete() error {
	if o.dir == "" {
		return errors.New("--dir is required")
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	o.dir = dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("--dir %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("--dir %s: %w", dir, err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("--dir %s must be empty (it holds %s); every run gets fresh certificates and etcd data", dir, entries[0].Name())
	}
	if o.binDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		o.binDir = filepath.Dir(exe)
	}
	if o.etcdBin == "" {
		o.etcdBin = filepath.Join(o.binDir, "etcd")
	}
	if o.apiBin == "" {
		o.apiBin = filepath.Join(o.binDir, "kube-apiserver")
	}
	if o.kcmBin == "" {
		o.kcmBin = filepath.Join(o.binDir, "kube-controller-manager")
	}
	for flagName, path := range map[string]string{"--etcd": o.etcdBin, "--kube-apiserver": o.apiBin, "--kube-controller-manager": o.kcmBin} {
		if st, err := os.Stat(path); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("%s %s: not an executable file (build it with tests/apiserver/build.sh)", flagName, path)
		}
	}
	if o.tokenWebhookConfig != "" {
		if o.tokenWebhookConfig, err = filepath.Abs(o.tokenWebhookConfig); err != nil {
			return err
		}
		if _, err := os.Stat(o.tokenWebhookConfig); err != nil {
			return fmt.Errorf("--authentication-token-webhook-config-file: %w", err)
		}
	}
	if o.awsSTSEndpoint != "" {
		if o.tokenWebhookConfig != "" {
			return errors.New("--aws-sts-endpoint serves its own token webhook; do not also pass --authentication-token-webhook-config-file")
		}
		u, err := url.Parse(o.awsSTSEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--aws-sts-endpoint %q must be an http(s) URL such as the AWS emulator's http://127.0.0.1:PORT", o.awsSTSEndpoint)
		}
		if !eksClusterName.MatchString(o.eksClusterName) {
			return fmt.Errorf("--eks-cluster-name %q must be an EKS cluster name (1 to 100 letters, digits, - and _, starting with a letter or digit); it is required with --aws-sts-endpoint", o.eksClusterName)
		}
		if o.awsEmulatorControl == "" {
			o.awsEmulatorControl = strings.TrimRight(o.awsSTSEndpoint, "/") + "/_kfaws"
		}
	} else if o.eksClusterName != "" {
		return errors.New("--eks-cluster-name only applies with --aws-sts-endpoint")
	} else if o.awsEmulatorControl != "" && !o.pytorchJobRunner {
		return errors.New("--aws-emulator-control only applies with --aws-sts-endpoint or --pytorchjob-runner")
	}
	if o.pytorchJobRunner && o.awsEmulatorControl == "" {
		return errors.New("--pytorchjob-runner needs the AWS emulator's control API (--aws-emulator-control URL, or --aws-sts-endpoint): images come from its registry and EFS volumes from its local EFS")
	}
	if o.readyTimeout <= 0 || o.stopTimeout <= 0 {
		return errors.New("--ready-timeout and --stop-timeout must be positive durations")
	}
	return nil
}
