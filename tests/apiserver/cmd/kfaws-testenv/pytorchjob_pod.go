package main

// The pure parts of the PyTorchJob runner: the job spec, the Pods the
// training operator would create for it (names, labels, owner reference,
// injected environment), environment resolution and volume mapping as the
// runner's stand-in kubelet does them.

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	// localNodeName is the spec.nodeName of every Pod the runner creates
	// (no Node object exists; nothing schedules).
	localNodeName = "kfaws-local"
	// pytorchContainer is the container the training operator requires in
	// every replica and the only one the runner runs.
	pytorchContainer = "pytorch"
	// operatorName is the training operator's value of the
	// training.kubeflow.org/operator-name label for PyTorchJobs.
	operatorName = "pytorchjob-controller"
	// efsCSIDriver is the CSI driver name of Amazon EFS volumes.
	efsCSIDriver = "efs.csi.aws.com"
)

// Labels the training operator (kubeflow.org/v1) puts on replica Pods.
const (
	labelJobName      = "training.kubeflow.org/job-name"
	labelOperatorName = "training.kubeflow.org/operator-name"
	labelReplicaType  = "training.kubeflow.org/replica-type"
	labelReplicaIndex = "training.kubeflow.org/replica-index"
	labelJobRole      = "training.kubeflow.org/job-role"
)

// pytorchJobSpec is the part of a kubeflow.org/v1 PyTorchJob spec the runner reads.
type pytorchJobSpec struct {
	RunPolicy struct {
		CleanPodPolicy *string `json:"cleanPodPolicy"`
		BackoffLimit   *int32  `json:"backoffLimit"`
	} `json:"runPolicy"`
	NprocPerNode        *string                 `json:"nprocPerNode"`
	PytorchReplicaSpecs map[string]*replicaSpec `json:"pytorchReplicaSpecs"`
}

// replicaSpec is one entry of pytorchReplicaSpecs.
type replicaSpec struct {
	Replicas      *int32                 `json:"replicas"`
	RestartPolicy string                 `json:"restartPolicy"`
	Template      corev1.PodTemplateSpec `json:"template"`
}

// replica is one Pod of the job: Master 0 has rank 0, Worker i rank i+1.
type replica struct {
	Type  string // "Master" or "Worker", as the spec's keys
	Index int
	Rank  int
	Spec  *replicaSpec
}

// podName is the operator's name for the Pod: <job>-<type>-<index>, lowercase.
func (r replica) podName(job string) string {
	return fmt.Sprintf("%s-%s-%d", job, strings.ToLower(r.Type), r.Index)
}

// validateJobSpec applies the training operator's defaults (replicas 1,
// restartPolicy OnFailure) and checks what it checks: only Master and Worker
// replica types, at most one Master, a container named "pytorch" in each
// template. It returns the replicas in rank order.
func validateJobSpec(spec *pytorchJobSpec) ([]replica, error) {
	if len(spec.PytorchReplicaSpecs) == 0 {
		return nil, fmt.Errorf("PyTorchJobSpec is not valid: pytorchReplicaSpecs is empty")
	}
	for t, rs := range spec.PytorchReplicaSpecs {
		if t != "Master" && t != "Worker" {
			return nil, fmt.Errorf("PyTorchJobSpec is not valid: replica type %q is not Master or Worker", t)
		}
		if rs == nil {
			return nil, fmt.Errorf("PyTorchJobSpec is not valid: %s has no spec", t)
		}
		if rs.Replicas == nil {
			one := int32(1)
			rs.Replicas = &one
		}
		if *rs.Replicas < 0 {
			return nil, fmt.Errorf("PyTorchJobSpec is not valid: %s replicas is negative", t)
		}
		if rs.RestartPolicy == "" {
			rs.RestartPolicy = "OnFailure"
		}
		switch rs.RestartPolicy {
		case "Always", "OnFailure", "Never", "ExitCode":
		default:
			return nil, fmt.Errorf("PyTorchJobSpec is not valid: %s restartPolicy %q is not Always, OnFailure, Never or ExitCode", t, rs.RestartPolicy)
		}
		if !slices.ContainsFunc(rs.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == pytorchContainer }) {
			return nil, fmt.Errorf("PyTorchJobSpec is not valid: There is no container named %s in %s", pytorchContainer, t)
		}
		if rs.Template.Spec.Containers[slices.IndexFunc(rs.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == pytorchContainer })].Image == "" {
			return nil, fmt.Errorf("PyTorchJobSpec is not valid: the %s container of %s has no image", pytorchContainer, t)
		}
	}
	var out []replica
	if m := spec.PytorchReplicaSpecs["Master"]; m != nil {
		if *m.Replicas != 1 {
			return nil, fmt.Errorf("PyTorchJobSpec is not valid: There must be only 1 master replica")
		}
		out = append(out, replica{Type: "Master", Index: 0, Rank: 0, Spec: m})
	}
	if w := spec.PytorchReplicaSpecs["Worker"]; w != nil {
		base := len(out)
		for i := range int(*w.Replicas) {
			out = append(out, replica{Type: "Worker", Index: i, Rank: base + i, Spec: w})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("PyTorchJobSpec is not valid: no replicas")
	}
	return out, nil
}

// operatorEnv is what the training operator appends to the pytorch
// container's environment (torch.distributed's env:// contract and the
// PET_* variables torchrun reads), except that MASTER_ADDR is 127.0.0.1
// (the operator's value, the master Service's name, does not resolve here)
// and MASTER_PORT is a free port chosen per job (the operator's is the
// container port "pytorchjob-port", 23456 by default, which several local
// jobs could not share).
func operatorEnv(masterPort, worldSize, rank int, nprocPerNode string) []corev1.EnvVar {
	if nprocPerNode == "" {
		nprocPerNode = "auto"
	}
	return []corev1.EnvVar{
		{Name: "MASTER_PORT", Value: strconv.Itoa(masterPort)},
		{Name: "PET_MASTER_PORT", Value: strconv.Itoa(masterPort)},
		{Name: "MASTER_ADDR", Value: "127.0.0.1"},
		{Name: "PET_MASTER_ADDR", Value: "127.0.0.1"},
		{Name: "WORLD_SIZE", Value: strconv.Itoa(worldSize)},
		{Name: "RANK", Value: strconv.Itoa(rank)},
		{Name: "PET_NPROC_PER_NODE", Value: nprocPerNode},
		{Name: "PET_NNODES", Value: strconv.Itoa(worldSize)},
		{Name: "PET_NODE_RANK", Value: strconv.Itoa(rank)},
		{Name: "PYTHONUNBUFFERED", Value: "1"},
	}
}

// buildReplicaPod is the Pod the operator creates for a replica: the
// template with the operator's labels, a controller owner reference to the
// job, the injected environment in the pytorch container, the Pod restart
// policy (ExitCode becomes Never: the operator, not the kubelet, restarts),
// and spec.nodeName set to the local node (there is no scheduler).
func buildReplicaPod(job metav1.Object, r replica, masterPort, worldSize int, nprocPerNode string) *corev1.Pod {
	tmpl := r.Spec.Template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: *tmpl.ObjectMeta.DeepCopy(),
		Spec:       tmpl.Spec,
	}
	pod.Name = r.podName(job.GetName())
	pod.Namespace = job.GetNamespace()
	pod.GenerateName = ""
	pod.ResourceVersion = ""
	pod.UID = ""
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[labelJobName] = job.GetName()
	pod.Labels[labelOperatorName] = operatorName
	pod.Labels[labelReplicaType] = strings.ToLower(r.Type)
	pod.Labels[labelReplicaIndex] = strconv.Itoa(r.Index)
	if r.Type == "Master" {
		pod.Labels[labelJobRole] = "master"
	}
	yes := true
	pod.OwnerReferences = []metav1.OwnerReference{{
		APIVersion:         "kubeflow.org/v1",
		Kind:               "PyTorchJob",
		Name:               job.GetName(),
		UID:                types.UID(job.GetUID()),
		Controller:         &yes,
		BlockOwnerDeletion: &yes,
	}}
	switch r.Spec.RestartPolicy {
	case "ExitCode":
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	default:
		pod.Spec.RestartPolicy = corev1.RestartPolicy(r.Spec.RestartPolicy)
	}
	pod.Spec.NodeName = localNodeName
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == pytorchContainer {
			pod.Spec.Containers[i].Env = append(pod.Spec.Containers[i].Env, operatorEnv(masterPort, worldSize, r.Rank, nprocPerNode)...)
		}
	}
	return pod
}

// defaultMasterPort is the operator's port when the pytorch container has
// no port named pytorchjob-port.
const defaultMasterPort = 23456

// buildReplicaService is the headless Service the operator creates for each
// replica: named as the Pod, selecting it by the operator's labels, exposing
// the pytorch container's "pytorchjob-port" (23456 by default). No DNS
// serves it here (replicas use MASTER_ADDR=127.0.0.1), but clients that look
// for it find it.
func buildReplicaService(pod *corev1.Pod) *corev1.Service {
	port := int32(defaultMasterPort)
	for _, c := range pod.Spec.Containers {
		if c.Name != pytorchContainer {
			continue
		}
		for _, p := range c.Ports {
			if p.Name == "pytorchjob-port" {
				port = p.ContainerPort
			}
		}
	}
	selector := map[string]string{}
	for _, k := range []string{labelJobName, labelOperatorName, labelReplicaType, labelReplicaIndex} {
		selector[k] = pod.Labels[k]
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace,
			Labels:          selector,
			OwnerReferences: pod.OwnerReferences,
		},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  selector,
			Ports:     []corev1.ServicePort{{Name: "pytorchjob-port", Port: port}},
		},
	}
}

// expandVars replaces $(NAME) with vars[NAME] as the kubelet does in env
// values, command and args: "$$" is a literal "$", an undefined $(NAME)
// stays as written.
func expandVars(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// fieldRefValue resolves an env valueFrom.fieldRef as the kubelet does
// (the Pod's addresses are loopback here). Unsupported paths are errors.
func fieldRefValue(pod *corev1.Pod, fieldPath string) (string, error) {
	switch fieldPath {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.podIP", "status.hostIPs", "status.podIPs":
		return "127.0.0.1", nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if rest, ok := strings.CutPrefix(fieldPath, prefix+"['"); ok && strings.HasSuffix(rest, "']") {
			return m[strings.TrimSuffix(rest, "']")], nil
		}
	}
	return "", fmt.Errorf("env fieldRef %q is not supported by the local runner", fieldPath)
}

// envLookup reads ConfigMap and Secret keys for env valueFrom and envFrom.
type envLookup interface {
	configMap(namespace, name string) (map[string]string, error)
	secret(namespace, name string) (map[string]string, error)
}

// orderedEnv is an environment in the order variables were first defined;
// a later definition replaces the value in place.
type orderedEnv struct {
	names  []string
	values map[string]string
}

func newOrderedEnv() *orderedEnv { return &orderedEnv{values: map[string]string{}} }

func (e *orderedEnv) set(name, value string) {
	if _, ok := e.values[name]; !ok {
		e.names = append(e.names, name)
	}
	e.values[name] = value
}

// list returns NAME=VALUE pairs in definition order.
func (e *orderedEnv) list() []string {
	out := make([]string, 0, len(e.names))
	for _, n := range e.names {
		out = append(out, n+"="+e.values[n])
	}
	return out
}

// containerEnv builds the process environment of a container as a runtime
// plus kubelet would: the image's Env, then envFrom sources, then env in
// order (values expanded against what is defined so far; later
// definitions win), as the kubelet does.
func containerEnv(pod *corev1.Pod, c *corev1.Container, imageEnv []string, lookup envLookup) (*orderedEnv, error) {
	env := newOrderedEnv()
	for _, kv := range imageEnv {
		name, value, _ := strings.Cut(kv, "=")
		env.set(name, value)
	}
	env.set("HOSTNAME", pod.Name)
	for _, from := range c.EnvFrom {
		var data map[string]string
		var err error
		optional := false
		switch {
		case from.ConfigMapRef != nil:
			optional = from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional
			data, err = lookup.configMap(pod.Namespace, from.ConfigMapRef.Name)
		case from.SecretRef != nil:
			optional = from.SecretRef.Optional != nil && *from.SecretRef.Optional
			data, err = lookup.secret(pod.Namespace, from.SecretRef.Name)
		}
		if err != nil {
			if optional {
				continue
			}
			return nil, err
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			env.set(from.Prefix+k, data[k])
		}
	}
	for _, ev := range c.Env {
		if ev.ValueFrom == nil {
			env.set(ev.Name, expandVars(ev.Value, env.values))
			continue
		}
		vf := ev.ValueFrom
		switch {
		case vf.FieldRef != nil:
			v, err := fieldRefValue(pod, vf.FieldRef.FieldPath)
			if err != nil {
				return nil, err
			}
			env.set(ev.Name, v)
		case vf.ConfigMapKeyRef != nil, vf.SecretKeyRef != nil:
			var data map[string]string
			var err error
			var name, key string
			optional := false
			if r := vf.ConfigMapKeyRef; r != nil {
				name, key, optional = r.Name, r.Key, r.Optional != nil && *r.Optional
				data, err = lookup.configMap(pod.Namespace, name)
			} else {
				r := vf.SecretKeyRef
				name, key, optional = r.Name, r.Key, r.Optional != nil && *r.Optional
				data, err = lookup.secret(pod.Namespace, name)
			}
			if err == nil {
				v, ok := data[key]
				if !ok {
					err = fmt.Errorf("env %s: key %q not found in %s", ev.Name, key, name)
				} else {
					env.set(ev.Name, v)
				}
			}
			if err != nil && !optional {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("env %s: only value, fieldRef, configMapKeyRef and secretKeyRef are supported by the local runner", ev.Name)
		}
	}
	return env, nil
}

// mountMap maps a container mountPath to a directory on this machine.
type mountMap struct {
	MountPath string // as the container sees it, cleaned
	HostDir   string
}

// efsHostDir maps an EFS CSI volumeHandle, `fs-ID[:PATH]` (the access point
// form `fs-ID:[PATH]:fsap-ID` is refused: its root directory is the access
// point's, which the local EFS does not model), to <efsRoot>/fs-ID[/PATH].
func efsHostDir(efsRoot, volumeHandle string) (string, error) {
	parts := strings.Split(volumeHandle, ":")
	fs := parts[0]
	if !strings.HasPrefix(fs, "fs-") || len(fs) < 4 || strings.ContainsAny(fs, "/.") {
		return "", fmt.Errorf("EFS volumeHandle %q does not start with a file system id fs-…", volumeHandle)
	}
	if len(parts) > 3 || (len(parts) == 3 && parts[2] != "") {
		return "", fmt.Errorf("EFS volumeHandle %q names an access point, which the local runner does not support", volumeHandle)
	}
	dir := filepath.Join(efsRoot, fs)
	if len(parts) >= 2 && parts[1] != "" {
		sub := path.Clean("/" + parts[1])
		dir = filepath.Join(dir, filepath.FromSlash(sub))
	}
	return dir, nil
}

// joinSubPath appends a volumeMount's subPath, which must stay inside the volume.
func joinSubPath(dir, subPath string) (string, error) {
	if subPath == "" {
		return dir, nil
	}
	if path.IsAbs(subPath) || slices.Contains(strings.Split(subPath, "/"), "..") {
		return "", fmt.Errorf("subPath %q must be a relative path without '..'", subPath)
	}
	return filepath.Join(dir, filepath.FromSlash(subPath)), nil
}

// rewriteMountPaths replaces every occurrence of a mount's mountPath in s
// that is a whole path prefix (followed by '/', the end, or a character
// that cannot continue a path component name, and not preceded by a path
// character) with the mount's directory on this machine. Longer mount paths
// are tried first, so /data/model inside /data maps to its own volume.
func rewriteMountPaths(s string, mounts []mountMap) string {
	if len(mounts) == 0 {
		return s
	}
	ms := slices.Clone(mounts)
	sort.SliceStable(ms, func(i, j int) bool { return len(ms[i].MountPath) > len(ms[j].MountPath) })
	isNameChar := func(b byte) bool {
		return b == '.' || b == '-' || b == '_' || b == '~' || b == '+' || b == '@' ||
			(b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || b >= 0x80
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		matched := false
		if s[i] == '/' && (i == 0 || (!isNameChar(s[i-1]) && s[i-1] != '/')) {
			for _, m := range ms {
				mp := m.MountPath
				if mp == "/" || !strings.HasPrefix(s[i:], mp) {
					continue
				}
				end := i + len(mp)
				if end < len(s) && (isNameChar(s[end])) {
					continue
				}
				b.WriteString(m.HostDir)
				i = end
				matched = true
				break
			}
		}
		if !matched {
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String()
}

// exitRetryable is the training operator's rule for restartPolicy ExitCode:
// exit codes 128 and above (killed by a signal: 128+N) are retryable, 1–127
// are permanent errors.
func exitRetryable(code int32) bool {
	return code >= 128
}
