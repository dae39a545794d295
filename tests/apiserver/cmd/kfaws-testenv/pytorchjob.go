package main

// The PyTorchJob runner (`start --pytorchjob-runner`): towards the API server
// it behaves like the Kubeflow training operator (kubeflow.org/v1
// PyTorchJob: replica Pods, job conditions and replica statuses) plus a
// kubelet for the node "kfaws-local" (each replica's "pytorch" container
// runs as a local process from the image in the emulated ECR; Pod phase and
// container statuses; graceful deletions completed). See README.md,
// "PyTorchJob runner", for what differs from a cluster.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

var pytorchJobsGVR = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "pytorchjobs"}

// Field managers of the runner's writes, named after whom it stands in for.
const (
	operatorManager = "training-operator"
	kubeletManager  = "kubelet"
)

// replicaStopGrace is how long a replica process gets between SIGTERM and
// SIGKILL when its job is deleted or the harness stops.
const replicaStopGrace = 5 * time.Second

// pytorchJobRunner watches PyTorchJobs and runs their replicas.
type pytorchJobRunner struct {
	dir     string // the harness directory
	control string // the AWS emulator's control API
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	images  *imageStore
	http    *http.Client
	log     *os.File // DIR/logs/pytorchjob-runner.log

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	kubelet *http.Server // the node's kubelet endpoint (pytorchjob_node.go)

	mu       sync.Mutex
	jobs     map[types.UID]*jobRun
	procs    map[types.UID]*replicaProc // by Pod UID
	deleting map[types.UID]bool         // Pods whose deletion is being completed
	logRuns  map[string]*logRun         // by namespace/pod
}

// startPyTorchJobRunner registers the node, serves its kubelet endpoint and
// starts watching Pods of the node and PyTorchJobs. version is the API
// server's, reported as the kubelet's.
func startPyTorchJobRunner(o *startOptions, endpoint, version string, p *pki) (*pytorchJobRunner, error) {
	cfg := &rest.Config{
		Host:            endpoint,
		TLSClientConfig: rest.TLSClientConfig{CAFile: p.caCert, CertFile: p.adminCert, KeyFile: p.adminKey},
		QPS:             50,
		Burst:           100,
		UserAgent:       "kfaws-testenv/pytorchjob-runner",
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(filepath.Join(o.dir, "logs", "pytorchjob-runner.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &pytorchJobRunner{
		dir:      o.dir,
		control:  strings.TrimRight(o.awsEmulatorControl, "/"),
		kube:     kube,
		dyn:      dyn,
		images:   newImageStore(filepath.Join(o.dir, "images")),
		http:     &http.Client{Timeout: 30 * time.Second},
		log:      logFile,
		ctx:      ctx,
		cancel:   cancel,
		jobs:     map[types.UID]*jobRun{},
		procs:    map[types.UID]*replicaProc{},
		deleting: map[types.UID]bool{},
		logRuns:  map[string]*logRun{},
	}
	if err := r.startKubelet(p, version); err != nil {
		cancel()
		r.stopKubelet()
		return nil, err
	}

	// The stand-in kubelet: Pods on the local node that are being deleted
	// are stopped and then removed (a bound Pod's graceful deletion waits for
	// its kubelet; without one, namespaces and garbage collection would hang).
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = "spec.nodeName=" + localNodeName
	}))
	podInformer := factory.Core().V1().Pods().Informer()
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.onPod,
		UpdateFunc: func(_, obj any) { r.onPod(obj) },
	}); err != nil {
		cancel()
		return nil, err
	}
	factory.Start(ctx.Done())

	r.wg.Add(1)
	go r.watchJobs()
	r.logf("watching kubeflow.org/v1 PyTorchJobs in all namespaces; emulator control %s", r.control)
	return r, nil
}

func (r *pytorchJobRunner) logf(format string, args ...any) {
	fmt.Fprintf(r.log, "%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
}

// stop kills every replica (SIGTERM, then SIGKILL after replicaStopGrace)
// and waits for the runner's goroutines.
func (r *pytorchJobRunner) stop() {
	r.cancel()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * replicaStopGrace):
	}
	r.mu.Lock()
	for _, p := range r.procs {
		p.signal(syscall.SIGKILL)
	}
	r.mu.Unlock()
	r.stopKubelet()
	r.logf("stopped")
	r.log.Close()
}

// watchJobs waits until the PyTorchJob CRD is served (kfaws applies the
// training operator after the harness starts), then runs an informer.
func (r *pytorchJobRunner) watchJobs() {
	defer r.wg.Done()
	for {
		list, err := r.kube.Discovery().ServerResourcesForGroupVersion(pytorchJobsGVR.GroupVersion().String())
		if err == nil && slices.ContainsFunc(list.APIResources, func(a metav1.APIResource) bool { return a.Name == pytorchJobsGVR.Resource }) {
			break
		}
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	r.logf("PyTorchJob CRD served; starting the informer")
	inf := dynamicinformer.NewFilteredDynamicInformer(r.dyn, pytorchJobsGVR, metav1.NamespaceAll, 0, cache.Indexers{}, nil)
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.onJob,
		UpdateFunc: func(_, obj any) { r.onJob(obj) },
		DeleteFunc: r.onJobDeleted,
	}); err != nil {
		r.logf("informer: %v", err)
		return
	}
	inf.Informer().Run(r.ctx.Done())
}

func (r *pytorchJobRunner) onJob(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if u.GetDeletionTimestamp() != nil {
		if j := r.jobs[u.GetUID()]; j != nil {
			j.cancel()
		}
		return
	}
	if _, seen := r.jobs[u.GetUID()]; seen || r.ctx.Err() != nil {
		return
	}
	var st jobStatus
	if raw, ok := u.Object["status"]; ok {
		b, _ := json.Marshal(raw)
		_ = json.Unmarshal(b, &st)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	j := &jobRun{r: r, obj: u.DeepCopy(), ctx: ctx, cancel: cancel, status: st, events: make(chan replicaEvent)}
	r.jobs[u.GetUID()] = j
	if st.finished() {
		return // finished before this harness saw it
	}
	r.wg.Add(1)
	go j.run()
}

func (r *pytorchJobRunner) onJobDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if j := r.jobs[u.GetUID()]; j != nil {
		r.logf("PyTorchJob %s/%s deleted; stopping its replicas", u.GetNamespace(), u.GetName())
		j.cancel()
		delete(r.jobs, u.GetUID())
	}
}

// onPod completes the deletion of a local Pod as its kubelet would: stop the
// process, then delete with grace period 0.
func (r *pytorchJobRunner) onPod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.DeletionTimestamp == nil {
		return
	}
	r.mu.Lock()
	if r.deleting[pod.UID] || r.ctx.Err() != nil {
		r.mu.Unlock()
		return
	}
	r.deleting[pod.UID] = true
	proc := r.procs[pod.UID]
	r.mu.Unlock()
	go func() {
		if proc != nil {
			grace := replicaStopGrace
			if s := pod.DeletionGracePeriodSeconds; s != nil && time.Duration(*s)*time.Second < grace {
				grace = time.Duration(*s) * time.Second
			}
			proc.kill(grace)
		}
		zero := int64(0)
		err := r.kube.CoreV1().Pods(pod.Namespace).Delete(r.ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero,
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			r.logf("deleting pod %s/%s: %v", pod.Namespace, pod.Name, err)
		}
		r.mu.Lock()
		delete(r.deleting, pod.UID)
		r.mu.Unlock()
	}()
}

// controlGet GETs the emulator control API path into out.
func (r *pytorchJobRunner) controlGet(path string, out any) error {
	if r.control == "" {
		return fmt.Errorf("no --aws-emulator-control given")
	}
	resp, err := r.http.Get(r.control + path)
	if err != nil {
		return fmt.Errorf("GET %s%s: %w", r.control, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s%s: HTTP %d: %s", r.control, path, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(body, out)
}

// configMap and secret implement envLookup.
func (r *pytorchJobRunner) configMap(ns, name string) (map[string]string, error) {
	cm, err := r.kube.CoreV1().ConfigMaps(ns).Get(r.ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s: %w", ns, name, err)
	}
	return cm.Data, nil
}

func (r *pytorchJobRunner) secret(ns, name string) (map[string]string, error) {
	s, err := r.kube.CoreV1().Secrets(ns).Get(r.ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("Secret %s/%s: %w", ns, name, err)
	}
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	for k, v := range s.StringData {
		out[k] = v
	}
	return out, nil
}

// ---- job status, as the training operator writes it ----

type jobCondition struct {
	Type               string      `json:"type"`
	Status             string      `json:"status"`
	Reason             string      `json:"reason,omitempty"`
	Message            string      `json:"message,omitempty"`
	LastUpdateTime     metav1.Time `json:"lastUpdateTime,omitempty"`
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
}

type replicaStatus struct {
	Active    int32  `json:"active,omitempty"`
	Succeeded int32  `json:"succeeded,omitempty"`
	Failed    int32  `json:"failed,omitempty"`
	Selector  string `json:"selector,omitempty"`
}

type jobStatus struct {
	Conditions      []jobCondition            `json:"conditions,omitempty"`
	ReplicaStatuses map[string]*replicaStatus `json:"replicaStatuses,omitempty"`
	StartTime       *metav1.Time              `json:"startTime,omitempty"`
	CompletionTime  *metav1.Time              `json:"completionTime,omitempty"`
}

func (s *jobStatus) condition(t string) *jobCondition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

// finished: a Succeeded or Failed condition is true.
func (s *jobStatus) finished() bool {
	for _, t := range []string{"Succeeded", "Failed"} {
		if c := s.condition(t); c != nil && c.Status == "True" {
			return true
		}
	}
	return false
}

// setCondition follows the operator's rules: nothing changes once Failed;
// Running and Restarting replace each other; Succeeded or Failed turn
// Running to False; the transition time only moves when the status does.
func (s *jobStatus) setCondition(t, reason, message string) {
	if c := s.condition("Failed"); c != nil && c.Status == "True" {
		return
	}
	now := metav1.Now()
	cond := jobCondition{Type: t, Status: "True", Reason: reason, Message: message, LastUpdateTime: now, LastTransitionTime: now}
	if cur := s.condition(t); cur != nil && cur.Status == "True" {
		if cur.Reason == reason {
			return
		}
		cond.LastTransitionTime = cur.LastTransitionTime
	}
	var out []jobCondition
	for _, c := range s.Conditions {
		switch {
		case c.Type == t,
			t == "Restarting" && c.Type == "Running",
			t == "Running" && c.Type == "Restarting":
			continue
		case (t == "Succeeded" || t == "Failed") && c.Type == "Running" && c.Status == "True":
			c.Status = "False"
			c.LastTransitionTime = now
			c.LastUpdateTime = now
		}
		out = append(out, c)
	}
	s.Conditions = append(out, cond)
}

// ---- one job ----

type replicaState int

const (
	replicaPending replicaState = iota
	replicaRunning
	replicaSucceeded
	replicaFailed
	replicaCleaned // deleted by cleanPodPolicy: counted nowhere, as its Pod is gone
)

// decision is the job's answer to a replica's exit.
type decision int

const (
	decideStop     decision = iota // the Pod ends in its terminal phase
	decideRestart                  // the kubelet restarts the container in place
	decideRecreate                 // the operator deletes and recreates the Pod
)

type replicaEvent struct {
	rep     replica
	running bool // started (else exited)
	code    int32
	message string
	reply   chan decision
}

type jobRun struct {
	r      *pytorchJobRunner
	obj    *unstructured.Unstructured
	ctx    context.Context
	cancel context.CancelFunc
	status jobStatus
	events chan replicaEvent
}

func (j *jobRun) logf(format string, args ...any) {
	j.r.logf("%s/%s: %s", j.obj.GetNamespace(), j.obj.GetName(), fmt.Sprintf(format, args...))
}

// pushStatus writes the job's status through the status subresource.
func (j *jobRun) pushStatus() {
	raw, _ := json.Marshal(j.status)
	var st map[string]any
	_ = json.Unmarshal(raw, &st)
	res := j.r.dyn.Resource(pytorchJobsGVR).Namespace(j.obj.GetNamespace())
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := res.Get(j.ctx, j.obj.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.GetUID() != j.obj.GetUID() {
			return apierrors.NewNotFound(pytorchJobsGVR.GroupResource(), j.obj.GetName())
		}
		cur.Object["status"] = st
		_, err = res.UpdateStatus(j.ctx, cur, metav1.UpdateOptions{FieldManager: operatorManager})
		return err
	})
	if err != nil && j.ctx.Err() == nil {
		j.logf("updating status: %v", err)
	}
}

// exists reports whether the job is still there and not being deleted.
func (j *jobRun) exists() bool {
	cur, err := j.r.dyn.Resource(pytorchJobsGVR).Namespace(j.obj.GetNamespace()).Get(j.ctx, j.obj.GetName(), metav1.GetOptions{})
	return err == nil && cur.GetUID() == j.obj.GetUID() && cur.GetDeletionTimestamp() == nil
}

func (j *jobRun) run() {
	defer j.r.wg.Done()
	defer j.cancel()
	name := j.obj.GetName()
	var spec pytorchJobSpec
	raw, _ := json.Marshal(j.obj.Object["spec"])
	err := json.Unmarshal(raw, &spec)
	var replicas []replica
	if err == nil {
		replicas, err = validateJobSpec(&spec)
	}
	if j.status.StartTime == nil {
		now := metav1.Now()
		j.status.StartTime = &now
	}
	j.status.setCondition("Created", "PyTorchJobCreated", fmt.Sprintf("PyTorchJob %s is created.", name))
	if err != nil {
		j.logf("invalid: %v", err)
		j.status.setCondition("Failed", "PyTorchJobFailedValidation", err.Error())
		now := metav1.Now()
		j.status.CompletionTime = &now
		j.pushStatus()
		return
	}
	ports, err := freePorts(1)
	if err != nil {
		j.status.setCondition("Failed", "PyTorchJobFailed", fmt.Sprintf("PyTorchJob %s: no free port for MASTER_PORT: %v", name, err))
		j.pushStatus()
		return
	}
	nproc := ""
	if spec.NprocPerNode != nil {
		nproc = *spec.NprocPerNode
	}
	states := make([]replicaState, len(replicas))
	cleaned := make([]bool, len(replicas))
	j.status.ReplicaStatuses = map[string]*replicaStatus{}
	for _, rep := range replicas {
		j.status.ReplicaStatuses[rep.Type] = &replicaStatus{
			Selector: fmt.Sprintf("%s=%s,%s=%s,%s=%s", labelJobName, name, labelOperatorName, operatorName, labelReplicaType, strings.ToLower(rep.Type)),
		}
	}
	j.pushStatus()
	j.logf("running %d replicas, MASTER_PORT %d", len(replicas), ports[0])

	for _, rep := range replicas {
		svc := buildReplicaService(buildReplicaPod(j.obj, rep, ports[0], len(replicas), nproc))
		_, err := j.r.kube.CoreV1().Services(svc.Namespace).Create(j.ctx, svc, metav1.CreateOptions{FieldManager: operatorManager})
		if err != nil && !apierrors.IsAlreadyExists(err) && j.ctx.Err() == nil {
			j.logf("creating service %s: %v", svc.Name, err)
		}
	}
	var replicasDone sync.WaitGroup
	for _, rep := range replicas {
		replicasDone.Add(1)
		go func() {
			defer replicasDone.Done()
			j.runReplica(rep, ports[0], len(replicas), nproc)
		}()
	}
	allDone := make(chan struct{})
	go func() { replicasDone.Wait(); close(allDone) }()

	restarts := int32(0)
	cleanPolicy := "None"
	if spec.RunPolicy.CleanPodPolicy != nil {
		cleanPolicy = *spec.RunPolicy.CleanPodPolicy
	}
	hasMaster := spec.PytorchReplicaSpecs["Master"] != nil
	finish := func(t, reason, message string) {
		j.status.setCondition(t, reason, message)
		now := metav1.Now()
		j.status.CompletionTime = &now
		j.logf("%s: %s", t, message)
		switch cleanPolicy {
		case "All", "Running":
			for i, rep := range replicas {
				if cleanPolicy == "All" || states[i] == replicaRunning || states[i] == replicaPending {
					_ = j.r.kube.CoreV1().Pods(j.obj.GetNamespace()).Delete(j.ctx, rep.podName(name), metav1.DeleteOptions{})
					cleaned[i] = true
					if states[i] == replicaRunning || states[i] == replicaPending {
						states[i] = replicaCleaned
					}
				}
			}
		}
	}
	for {
		select {
		case <-j.ctx.Done():
			<-allDone
			return
		case <-allDone:
			return
		case ev := <-j.events:
			i := slices.IndexFunc(replicas, func(r replica) bool { return r.Rank == ev.rep.Rank })
			finished := j.status.finished()
			if ev.running {
				states[i] = replicaRunning
				// As the operator: Running while the Master runs (after a
				// Worker's restart too), or any replica without a Master.
				if !finished && (!hasMaster || states[0] == replicaRunning) {
					j.status.setCondition("Running", "PyTorchJobRunning", fmt.Sprintf("PyTorchJob %s is running.", name))
				}
			} else {
				d := decideStop
				policy := ev.rep.Spec.RestartPolicy
				switch {
				case cleaned[i]:
					states[i] = replicaCleaned // killed by its Pod's deletion
				case ev.code == 0:
					states[i] = replicaSucceeded
					allWorkers := !slices.ContainsFunc(states, func(s replicaState) bool { return s != replicaSucceeded })
					if !finished && (ev.rep.Type == "Master" || (!hasMaster && allWorkers)) {
						finish("Succeeded", "PyTorchJobSucceeded", fmt.Sprintf("PyTorchJob %s is successfully completed.", name))
					}
				case !finished && ev.code > 0 && (policy == "OnFailure" || policy == "Always" || (policy == "ExitCode" && exitRetryable(ev.code))) && j.exists():
					if lim := spec.RunPolicy.BackoffLimit; lim != nil && restarts >= *lim {
						states[i] = replicaFailed
						finish("Failed", "PyTorchJobFailed", fmt.Sprintf("PyTorchJob %s has failed because it has reached the specified backoff limit", name))
						break
					}
					restarts++
					states[i] = replicaPending
					if policy == "ExitCode" {
						d = decideRecreate
						j.status.setCondition("Restarting", "PyTorchJobRestarting",
							fmt.Sprintf("PyTorchJob %s is restarting because %d %s replica(s) failed.", name, 1, ev.rep.Type))
					} else {
						d = decideRestart
					}
				default:
					states[i] = replicaFailed
					if !finished {
						failed := 0
						for k, r := range replicas {
							if r.Type == ev.rep.Type && states[k] == replicaFailed {
								failed++
							}
						}
						msg := fmt.Sprintf("PyTorchJob %s is failed because %d %s replica(s) failed.", name, failed, ev.rep.Type)
						if ev.code < 0 {
							msg += " " + ev.message
						}
						finish("Failed", "PyTorchJobFailed", msg)
					}
				}
				ev.reply <- d
			}
			for t, rs := range j.status.ReplicaStatuses {
				rs.Active, rs.Succeeded, rs.Failed = 0, 0, 0
				for k, rep := range replicas {
					if rep.Type != t {
						continue
					}
					switch states[k] {
					case replicaRunning:
						rs.Active++
					case replicaSucceeded:
						rs.Succeeded++
					case replicaFailed:
						rs.Failed++
					}
				}
			}
			j.pushStatus()
		}
	}
}

// send delivers an event unless the job is being torn down.
func (j *jobRun) send(ev replicaEvent) decision {
	select {
	case j.events <- ev:
	case <-j.ctx.Done():
		return decideStop
	}
	if ev.reply == nil {
		return decideStop
	}
	select {
	case d := <-ev.reply:
		return d
	case <-j.ctx.Done():
		return decideStop
	}
}

// runReplica creates the replica's Pod and runs it, recreating it when the
// job decides so (restartPolicy ExitCode, retryable exit code).
func (j *jobRun) runReplica(rep replica, masterPort, worldSize int, nproc string) {
	pods := j.r.kube.CoreV1().Pods(j.obj.GetNamespace())
	for {
		pod := buildReplicaPod(j.obj, rep, masterPort, worldSize, nproc)
		var created *corev1.Pod
		var err error
		for attempt := 0; ; attempt++ {
			created, err = pods.Create(j.ctx, pod, metav1.CreateOptions{FieldManager: operatorManager})
			if err == nil || !apierrors.IsAlreadyExists(err) || attempt >= 60 {
				break
			}
			// The previous incarnation is still being deleted.
			select {
			case <-j.ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
		if err != nil {
			if j.ctx.Err() == nil {
				j.send(replicaEvent{rep: rep, code: -1, message: fmt.Sprintf("creating pod %s: %v", pod.Name, err), reply: make(chan decision, 1)})
			}
			return
		}
		d := j.r.runPod(j, created, rep)
		if d != decideRecreate || j.ctx.Err() != nil {
			return
		}
		zero := int64(0)
		_ = pods.Delete(j.ctx, created.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &created.UID}})
	}
}
