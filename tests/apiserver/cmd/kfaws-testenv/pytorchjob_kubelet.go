package main

// The kubelet half of the PyTorchJob runner: a replica Pod's "pytorch"
// container prepared (image, command, environment, volumes) and run as a
// local process, with the Pod's status kept as a kubelet keeps it.

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// replicaProc is one running container process (leader of its own process group).
type replicaProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	code   int32
}

func (p *replicaProc) signal(sig syscall.Signal) {
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// kill sends SIGTERM to the process group, SIGKILL after grace, and waits.
func (p *replicaProc) kill(grace time.Duration) {
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.signal(syscall.SIGKILL)
		<-p.exited
	}
	p.signal(syscall.SIGKILL) // whatever the leader left behind in its group
}

// spawnRequests are served by one goroutine locked to its own OS thread for
// the life of the harness: the parent-death signal of a child is tied to
// the thread that forked it, so that thread must never exit.
var (
	spawnOnce     sync.Once
	spawnRequests chan spawnRequest
)

type spawnRequest struct {
	cmd *exec.Cmd
	err chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnRequests = make(chan spawnRequest)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the harness
			for req := range spawnRequests {
				req.err <- req.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	spawnRequests <- spawnRequest{cmd: cmd, err: errc}
	return <-errc
}

// preparedCommand is a container ready to start as a process.
type preparedCommand struct {
	path    string // the executable on this machine
	argv    []string
	env     []string
	dir     string
	imageID string
}

// prepare pulls the image and resolves command, environment, volumes and
// working directory of the pod's pytorch container. The reason is the
// kubelet's waiting reason for the error.
func (r *pytorchJobRunner) prepare(pod *corev1.Pod, scratch string) (*preparedCommand, string, error) {
	ci := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == pytorchContainer })
	if ci < 0 {
		return nil, "CreateContainerConfigError", fmt.Errorf("pod has no container named %s", pytorchContainer)
	}
	c := &pod.Spec.Containers[ci]
	var reg registryInfo
	if err := r.controlGet("/ecr/registry", &reg); err != nil {
		return nil, "ErrImagePull", fmt.Errorf("the emulated ECR registry is not available: %w", err)
	}
	regURL, err := url.Parse(reg.URL)
	if err != nil {
		return nil, "ErrImagePull", fmt.Errorf("registry url %q: %w", reg.URL, err)
	}
	ref, err := parseImageRef(c.Image, regURL.Host)
	if err != nil {
		return nil, "InvalidImageName", err
	}
	img, err := r.images.pull(reg, ref)
	if err != nil {
		return nil, "ErrImagePull", fmt.Errorf("pulling %s: %w", c.Image, err)
	}
	env, err := containerEnv(pod, c, img.Config.Env, r)
	if err != nil {
		return nil, "CreateContainerConfigError", err
	}
	mounts, err := r.mapMounts(pod, c, scratch)
	if err != nil {
		return nil, "CreateContainerConfigError", err
	}
	var argv []string
	switch {
	case len(c.Command) > 0:
		argv = append(slices.Clone(c.Command), c.Args...)
	case len(c.Args) > 0:
		argv = append(slices.Clone(img.Config.Entrypoint), c.Args...)
	default:
		argv = append(slices.Clone(img.Config.Entrypoint), img.Config.Cmd...)
	}
	if len(argv) == 0 {
		return nil, "CreateContainerConfigError", fmt.Errorf("no command: the container has none and the image has no Entrypoint or Cmd")
	}
	for i := range argv {
		argv[i] = rewriteMountPaths(expandVars(argv[i], env.values), mounts)
	}
	for _, n := range env.names {
		env.values[n] = rewriteMountPaths(env.values[n], mounts)
	}
	if _, ok := env.values["HOME"]; !ok {
		env.set("HOME", scratch)
	}
	exe := ""
	orig := c.Command
	if len(orig) == 0 {
		orig = img.Config.Entrypoint
	}
	if len(orig) > 0 && argv[0] != orig[0] && filepath.IsAbs(argv[0]) {
		exe = argv[0] // on a mounted volume
	} else {
		exe, err = findExecutable(img.RootFS, argv[0], env.values)
		if err != nil {
			return nil, "CreateContainerError", err
		}
	}
	dir := scratch
	wd := c.WorkingDir
	if wd == "" {
		wd = img.Config.WorkingDir
	}
	if w := rewriteMountPaths(wd, mounts); wd != "" && w != wd {
		dir = w
	}
	return &preparedCommand{
		path: exe, argv: argv, env: env.list(), dir: dir,
		imageID: ref.Host + "/" + ref.Repository + "@" + img.Digest,
	}, "", nil
}

// mapMounts maps the container's volumeMounts to directories here.
func (r *pytorchJobRunner) mapMounts(pod *corev1.Pod, c *corev1.Container, scratch string) ([]mountMap, error) {
	var out []mountMap
	var efsRoot string
	for _, vm := range c.VolumeMounts {
		vi := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
		if vi < 0 {
			return nil, fmt.Errorf("volumeMount %q names no volume of the pod", vm.Name)
		}
		v := pod.Spec.Volumes[vi]
		var dir string
		create := true
		switch {
		case v.PersistentVolumeClaim != nil:
			pv, err := r.boundVolume(pod.Namespace, v.PersistentVolumeClaim.ClaimName)
			if err != nil {
				return nil, fmt.Errorf("volume %q: %w", v.Name, err)
			}
			if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != efsCSIDriver {
				return nil, fmt.Errorf("volume %q: PersistentVolume %s is not an EFS CSI volume (csi driver %s); the local runner only maps EFS volumes", v.Name, pv.Name, efsCSIDriver)
			}
			if efsRoot == "" {
				var ans struct {
					Root string `json:"root"`
				}
				if err := r.controlGet("/efs/local-root", &ans); err != nil {
					return nil, fmt.Errorf("volume %q: the local EFS is not available: %w", v.Name, err)
				}
				if ans.Root == "" {
					return nil, fmt.Errorf("volume %q: the emulator reported no local EFS root", v.Name)
				}
				efsRoot = ans.Root
			}
			if dir, err = efsHostDir(efsRoot, pv.Spec.CSI.VolumeHandle); err != nil {
				return nil, fmt.Errorf("volume %q: %w", v.Name, err)
			}
		case v.EmptyDir != nil:
			dir = filepath.Join(scratch, "volumes", v.Name)
		case v.HostPath != nil:
			dir, create = v.HostPath.Path, false
		default:
			return nil, fmt.Errorf("volume %q is not supported by the local runner (only persistentVolumeClaim bound to an EFS CSI PersistentVolume, emptyDir and hostPath are)", v.Name)
		}
		dir, err := joinSubPath(dir, vm.SubPath)
		if err != nil {
			return nil, fmt.Errorf("volumeMount %q: %w", vm.Name, err)
		}
		if create {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("volume %q: %w", v.Name, err)
			}
		}
		out = append(out, mountMap{MountPath: filepath.Clean(vm.MountPath), HostDir: dir})
	}
	return out, nil
}

// boundVolume finds the PersistentVolume of a claim: its spec.volumeName,
// else a volume whose claimRef names it (pre-bound; no binder runs here).
func (r *pytorchJobRunner) boundVolume(ns, claim string) (*corev1.PersistentVolume, error) {
	pvc, err := r.kube.CoreV1().PersistentVolumeClaims(ns).Get(r.ctx, claim, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("PersistentVolumeClaim %s/%s: %w", ns, claim, err)
	}
	if pvc.Spec.VolumeName != "" {
		pv, err := r.kube.CoreV1().PersistentVolumes().Get(r.ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("PersistentVolume %s of claim %s/%s: %w", pvc.Spec.VolumeName, ns, claim, err)
		}
		return pv, nil
	}
	pvs, err := r.kube.CoreV1().PersistentVolumes().List(r.ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range pvs.Items {
		ref := pvs.Items[i].Spec.ClaimRef
		if ref != nil && ref.Namespace == ns && ref.Name == claim && (ref.UID == "" || ref.UID == pvc.UID) {
			return &pvs.Items[i], nil
		}
	}
	return nil, fmt.Errorf("PersistentVolumeClaim %s/%s is not bound to a PersistentVolume (no volume binder runs in the harness: set the claim's spec.volumeName or the volume's claimRef)", ns, claim)
}

// updatePodStatus applies mutate to the latest Pod status (as the kubelet,
// through pods/status).
func (r *pytorchJobRunner) updatePodStatus(ctx context.Context, pod *corev1.Pod, mutate func(*corev1.PodStatus)) error {
	pods := r.kube.CoreV1().Pods(pod.Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID {
			return apierrors.NewNotFound(corev1.Resource("pods"), pod.Name)
		}
		mutate(&cur.Status)
		_, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{FieldManager: kubeletManager})
		return err
	})
}

// setPodConditions sets the kubelet's Pod conditions for ready (running) or not.
func setPodConditions(st *corev1.PodStatus, ready bool, reason string) {
	now := metav1.Now()
	set := func(t corev1.PodConditionType, ok bool, reason string) {
		status := corev1.ConditionTrue
		if !ok {
			status = corev1.ConditionFalse
		}
		for i := range st.Conditions {
			if st.Conditions[i].Type == t {
				if st.Conditions[i].Status != status {
					st.Conditions[i].LastTransitionTime = now
				}
				st.Conditions[i].Status, st.Conditions[i].Reason = status, reason
				return
			}
		}
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: now})
	}
	set(corev1.PodScheduled, true, "")
	set(corev1.PodInitialized, true, "")
	set(corev1.ContainersReady, ready, reason)
	set(corev1.PodReady, ready, reason)
}

// logTailFrom returns the last 80 lines (at most 2048 bytes) of the log
// written since offset: what the kubelet's FallbackToLogsOnError puts into
// the termination message.
func logTailFrom(file string, offset int64) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	start := max(offset, st.Size()-2048)
	buf := make([]byte, st.Size()-start)
	n, _ := f.ReadAt(buf, start)
	lines := strings.Split(strings.TrimRight(string(buf[:n]), "\n"), "\n")
	if len(lines) > 80 {
		lines = lines[len(lines)-80:]
	}
	return strings.Join(lines, "\n")
}

// runPod runs the pod's pytorch container until it ends for good, keeping
// the Pod's status as a kubelet does, and returns the job's last decision.
func (r *pytorchJobRunner) runPod(j *jobRun, pod *corev1.Pod, rep replica) decision {
	scratch := filepath.Join(r.dir, "pytorchjobs", pod.Namespace, pod.Name+"-"+string(pod.UID)[:8])
	logPath := r.logPath(pod.Namespace, pod.Name)
	image := pod.Spec.Containers[slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == pytorchContainer })].Image
	fail := func(reason string, err error) decision {
		r.logf("pod %s/%s: %s: %v", pod.Namespace, pod.Name, reason, err)
		_ = r.updatePodStatus(j.ctx, pod, func(st *corev1.PodStatus) {
			st.Phase = corev1.PodFailed
			st.Reason, st.Message = reason, err.Error()
			setPodConditions(st, false, "PodFailed")
			st.ContainerStatuses = []corev1.ContainerStatus{{
				Name: pytorchContainer, Image: image,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: err.Error()}},
			}}
		})
		return j.send(replicaEvent{rep: rep, code: -1, message: fmt.Sprintf("Pod %s: %s: %v", pod.Name, reason, err), reply: make(chan decision, 1)})
	}
	for _, d := range []string{scratch, filepath.Dir(logPath)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail("CreateContainerError", err)
		}
	}
	// As the kubelet while it pulls and creates the container.
	_ = r.updatePodStatus(j.ctx, pod, func(st *corev1.PodStatus) {
		st.Phase = corev1.PodPending
		st.HostIP, st.HostIPs = "127.0.0.1", []corev1.HostIP{{IP: "127.0.0.1"}}
		setPodConditions(st, false, "ContainersNotReady")
		st.ContainerStatuses = []corev1.ContainerStatus{{
			Name: pytorchContainer, Image: image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}},
		}}
	})
	prep, reason, err := r.prepare(pod, scratch)
	if err != nil {
		return fail(reason, err)
	}
	if j.ctx.Err() != nil {
		return decideStop // deleted, or the harness stops, while the image was pulled
	}
	restartCount := int32(0)
	var lastState corev1.ContainerState
	for {
		logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fail("CreateContainerError", err)
		}
		st, _ := logFile.Stat()
		offset := st.Size()
		cmd := &exec.Cmd{Path: prep.path, Args: prep.argv, Env: prep.env, Dir: prep.dir, Stdout: logFile, Stderr: logFile}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		err = spawn(cmd)
		logFile.Close()
		if err != nil {
			return fail("StartError", err)
		}
		proc := &replicaProc{cmd: cmd, exited: make(chan struct{})}
		go func() {
			_ = cmd.Wait()
			ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if ws.Signaled() {
				proc.code = 128 + int32(ws.Signal())
			} else {
				proc.code = int32(ws.ExitStatus())
			}
			close(proc.exited)
		}()
		r.mu.Lock()
		r.procs[pod.UID] = proc
		r.mu.Unlock()
		r.runStarted(pod, offset)
		started := metav1.Now()
		r.logf("pod %s/%s: started %s (pid %d), log %s", pod.Namespace, pod.Name, prep.path, cmd.Process.Pid, logPath)
		err = r.updatePodStatus(j.ctx, pod, func(st *corev1.PodStatus) {
			st.Phase = corev1.PodRunning
			st.HostIP, st.PodIP = "127.0.0.1", "127.0.0.1"
			st.HostIPs, st.PodIPs = []corev1.HostIP{{IP: "127.0.0.1"}}, []corev1.PodIP{{IP: "127.0.0.1"}}
			if st.StartTime == nil {
				st.StartTime = &started
			}
			setPodConditions(st, true, "")
			yes := true
			st.ContainerStatuses = []corev1.ContainerStatus{{
				Name: pytorchContainer, Image: image, ImageID: prep.imageID, Ready: true, Started: &yes,
				RestartCount: restartCount, LastTerminationState: lastState,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
			}}
		})
		if apierrors.IsNotFound(err) {
			proc.kill(replicaStopGrace) // deleted meanwhile
		}
		j.send(replicaEvent{rep: rep, running: true})
		select {
		case <-proc.exited:
		case <-j.ctx.Done():
			proc.kill(replicaStopGrace)
		}
		r.mu.Lock()
		delete(r.procs, pod.UID)
		r.mu.Unlock()
		r.runEnded(pod)
		if j.ctx.Err() != nil {
			return decideStop
		}
		term := &corev1.ContainerStateTerminated{ExitCode: proc.code, StartedAt: started, FinishedAt: metav1.Now(), Reason: "Completed"}
		if proc.code != 0 {
			term.Reason = "Error"
			term.Message = logTailFrom(logPath, offset)
		}
		r.logf("pod %s/%s: exited with code %d", pod.Namespace, pod.Name, proc.code)
		d := j.send(replicaEvent{rep: rep, code: proc.code, message: term.Message, reply: make(chan decision, 1)})
		if d == decideRestart {
			restartCount++
			lastState = corev1.ContainerState{Terminated: term}
			continue
		}
		_ = r.updatePodStatus(j.ctx, pod, func(st *corev1.PodStatus) {
			st.Phase = corev1.PodSucceeded
			if proc.code != 0 {
				st.Phase = corev1.PodFailed
			}
			setPodConditions(st, false, "PodCompleted")
			st.ContainerStatuses = []corev1.ContainerStatus{{
				Name: pytorchContainer, Image: image, ImageID: prep.imageID,
				RestartCount: restartCount, LastTerminationState: lastState,
				State: corev1.ContainerState{Terminated: term},
			}}
		})
		return d
	}
}
