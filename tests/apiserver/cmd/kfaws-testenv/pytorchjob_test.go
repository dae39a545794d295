package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseImageRef(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	ok := []struct {
		in, host, repo, ref string
	}{
		{"123456789012.dkr.ecr.us-east-1.amazonaws.com/kfaws-trainer", "123456789012.dkr.ecr.us-east-1.amazonaws.com", "kfaws-trainer", "latest"},
		{"123456789012.dkr.ecr.us-east-1.amazonaws.com/team/trainer:v1.2", "123456789012.dkr.ecr.us-east-1.amazonaws.com", "team/trainer", "v1.2"},
		{"123456789012.dkr.ecr.eu-west-1.amazonaws.com/trainer@" + digest, "123456789012.dkr.ecr.eu-west-1.amazonaws.com", "trainer", digest},
		{"123456789012.dkr.ecr.eu-west-1.amazonaws.com/trainer:v1@" + digest, "123456789012.dkr.ecr.eu-west-1.amazonaws.com", "trainer", digest},
		{"127.0.0.1:5000/trainer:x", "127.0.0.1:5000", "trainer", "x"},
	}
	for _, c := range ok {
		got, err := parseImageRef(c.in, "127.0.0.1:5000")
		if err != nil {
			t.Errorf("parseImageRef(%q): %v", c.in, err)
			continue
		}
		if got.Host != c.host || got.Repository != c.repo || got.Reference != c.ref {
			t.Errorf("parseImageRef(%q) = %+v, want %s %s %s", c.in, got, c.host, c.repo, c.ref)
		}
	}
	bad := map[string]string{
		"trainer:latest":                                                 "no registry host",
		"docker.io/library/python:3.12":                                  "not in the emulated ECR",
		"127.0.0.1:6000/trainer":                                         "not in the emulated ECR",
		"123456789012.dkr.ecr.us-east-1.amazonaws.com/Trainer":           "repository name",
		"123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer@sha256:ab": "digest",
		"123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:-x":        "tag",
	}
	for in, want := range bad {
		if _, err := parseImageRef(in, "127.0.0.1:5000"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseImageRef(%q) = %v, want an error about %q", in, err, want)
		}
	}
}

func testJob() *metav1.ObjectMeta {
	return &metav1.ObjectMeta{Name: "mnist", Namespace: "ml", UID: "uid-1"}
}

func testSpec(workers int32, policy string) *pytorchJobSpec {
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"sidecar.istio.io/inject": "false"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "pytorch", Image: "123456789012.dkr.ecr.us-east-1.amazonaws.com/t:1",
			Env: []corev1.EnvVar{{Name: "EPOCHS", Value: "2"}},
		}}},
	}
	one := int32(1)
	return &pytorchJobSpec{PytorchReplicaSpecs: map[string]*replicaSpec{
		"Master": {Replicas: &one, RestartPolicy: policy, Template: tmpl},
		"Worker": {Replicas: &workers, RestartPolicy: policy, Template: *tmpl.DeepCopy()},
	}}
}

func TestValidateJobSpecRanksAndDefaults(t *testing.T) {
	spec := testSpec(2, "")
	reps, err := validateJobSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range reps {
		got = append(got, r.podName("mnist")+"/"+string(rune('0'+r.Rank)))
	}
	if want := []string{"mnist-master-0/0", "mnist-worker-0/1", "mnist-worker-1/2"}; !slices.Equal(got, want) {
		t.Errorf("replicas %v, want %v", got, want)
	}
	if spec.PytorchReplicaSpecs["Master"].RestartPolicy != "OnFailure" {
		t.Errorf("default restartPolicy %q, want OnFailure", spec.PytorchReplicaSpecs["Master"].RestartPolicy)
	}

	noPytorch := testSpec(1, "ExitCode")
	noPytorch.PytorchReplicaSpecs["Worker"].Template.Spec.Containers[0].Name = "main"
	if _, err := validateJobSpec(noPytorch); err == nil || !strings.Contains(err.Error(), "no container named pytorch in Worker") {
		t.Errorf("no pytorch container: %v", err)
	}
	two := int32(2)
	twoMasters := testSpec(1, "ExitCode")
	twoMasters.PytorchReplicaSpecs["Master"].Replicas = &two
	if _, err := validateJobSpec(twoMasters); err == nil || !strings.Contains(err.Error(), "only 1 master") {
		t.Errorf("two masters: %v", err)
	}
	chief := testSpec(1, "ExitCode")
	chief.PytorchReplicaSpecs["Chief"] = chief.PytorchReplicaSpecs["Master"]
	if _, err := validateJobSpec(chief); err == nil || !strings.Contains(err.Error(), `"Chief"`) {
		t.Errorf("unknown type: %v", err)
	}
}

func TestBuildReplicaPod(t *testing.T) {
	spec := testSpec(1, "ExitCode")
	reps, err := validateJobSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	pod := buildReplicaPod(testJob(), reps[1], 40123, 2, "")
	if pod.Name != "mnist-worker-0" || pod.Namespace != "ml" || pod.Spec.NodeName != "kfaws-local" {
		t.Errorf("name/namespace/node: %s %s %s", pod.Name, pod.Namespace, pod.Spec.NodeName)
	}
	wantLabels := map[string]string{
		"app":                                 "x",
		"training.kubeflow.org/job-name":      "mnist",
		"training.kubeflow.org/operator-name": "pytorchjob-controller",
		"training.kubeflow.org/replica-type":  "worker",
		"training.kubeflow.org/replica-index": "0",
	}
	for k, v := range wantLabels {
		if pod.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, pod.Labels[k], v)
		}
	}
	if _, ok := pod.Labels["training.kubeflow.org/job-role"]; ok {
		t.Error("a worker has no job-role label")
	}
	if pod.Annotations["sidecar.istio.io/inject"] != "false" {
		t.Error("template annotations are kept")
	}
	if len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].Kind != "PyTorchJob" || pod.OwnerReferences[0].UID != "uid-1" ||
		pod.OwnerReferences[0].Controller == nil || !*pod.OwnerReferences[0].Controller {
		t.Errorf("owner references %+v", pod.OwnerReferences)
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("ExitCode replicas run Never pods, got %q", pod.Spec.RestartPolicy)
	}
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	for k, v := range map[string]string{"EPOCHS": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "40123", "WORLD_SIZE": "2",
		"RANK": "1", "PET_NODE_RANK": "1", "PET_NNODES": "2", "PET_NPROC_PER_NODE": "auto", "PYTHONUNBUFFERED": "1"} {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	// The template itself is not modified (the next replica starts clean).
	if len(spec.PytorchReplicaSpecs["Worker"].Template.Spec.Containers[0].Env) != 1 {
		t.Error("buildReplicaPod changed the template")
	}
	master := buildReplicaPod(testJob(), reps[0], 40123, 2, "")
	if master.Labels["training.kubeflow.org/job-role"] != "master" || master.Labels["training.kubeflow.org/replica-type"] != "master" {
		t.Errorf("master labels %v", master.Labels)
	}
}

func TestBuildReplicaService(t *testing.T) {
	spec := testSpec(1, "ExitCode")
	spec.PytorchReplicaSpecs["Master"].Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "pytorchjob-port", ContainerPort: 29500}}
	reps, err := validateJobSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	master := buildReplicaService(buildReplicaPod(testJob(), reps[0], 40000, 2, ""))
	if master.Name != "mnist-master-0" || master.Spec.ClusterIP != "None" || master.Spec.Ports[0].Port != 29500 ||
		master.Spec.Selector["training.kubeflow.org/replica-type"] != "master" || master.OwnerReferences[0].Name != "mnist" {
		t.Errorf("master service %+v", master)
	}
	if worker := buildReplicaService(buildReplicaPod(testJob(), reps[1], 40000, 2, "")); worker.Spec.Ports[0].Port != 23456 || worker.Spec.Selector["training.kubeflow.org/replica-index"] != "0" {
		t.Errorf("worker service %+v", worker)
	}
}

type fakeLookup map[string]map[string]string

func (f fakeLookup) configMap(ns, name string) (map[string]string, error) {
	if d, ok := f["cm/"+ns+"/"+name]; ok {
		return d, nil
	}
	return nil, errors.New("configmap not found")
}

func (f fakeLookup) secret(ns, name string) (map[string]string, error) {
	if d, ok := f["secret/"+ns+"/"+name]; ok {
		return d, nil
	}
	return nil, errors.New("secret not found")
}

func TestContainerEnv(t *testing.T) {
	yes := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "mnist-master-0", Namespace: "ml", UID: "u1", Labels: map[string]string{"training.kubeflow.org/replica-type": "master"}},
		Spec:       corev1.PodSpec{NodeName: "kfaws-local"},
	}
	c := &corev1.Container{
		EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}, Prefix: "CFG_"}},
		Env: []corev1.EnvVar{
			{Name: "PATH", Value: "/opt/bin:$(PATH)"},
			{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			{Name: "ROLE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['training.kubeflow.org/replica-type']"}}},
			{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "token"}}},
			{Name: "MISSING", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "none"}, Key: "k", Optional: &yes}}},
			{Name: "ESCAPED", Value: "$$(POD) $(UNDEFINED) $(POD)"},
			{Name: "RANK", Value: "9"},
			{Name: "RANK", Value: "0"},
		},
	}
	lookup := fakeLookup{"cm/ml/cfg": {"lr": "0.1"}, "secret/ml/s": {"token": "t0k"}}
	env, err := containerEnv(pod, c, []string{"PATH=/usr/local/bin:/usr/bin", "LANG=C.UTF-8"}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"PATH": "/opt/bin:/usr/local/bin:/usr/bin", "LANG": "C.UTF-8", "HOSTNAME": "mnist-master-0", "CFG_lr": "0.1",
		"POD": "mnist-master-0", "NS": "ml", "ROLE": "master", "TOKEN": "t0k",
		"ESCAPED": "$(POD) $(UNDEFINED) mnist-master-0", "RANK": "0",
	}
	for k, v := range want {
		if env.values[k] != v {
			t.Errorf("%s = %q, want %q", k, env.values[k], v)
		}
	}
	if _, ok := env.values["MISSING"]; ok {
		t.Error("an optional missing key defines nothing")
	}
	if n := strings.Count(strings.Join(env.list(), "\n"), "RANK="); n != 1 {
		t.Errorf("RANK defined %d times in the process environment", n)
	}

	c.Env = append(c.Env, corev1.EnvVar{Name: "CPU", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}})
	if _, err := containerEnv(pod, c, nil, lookup); err == nil || !strings.Contains(err.Error(), "CPU") {
		t.Errorf("resourceFieldRef: %v", err)
	}
	c.Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.generation"}}}}
	if _, err := containerEnv(pod, c, nil, lookup); err == nil || !strings.Contains(err.Error(), "metadata.generation") {
		t.Errorf("unsupported fieldRef: %v", err)
	}
}

func TestEFSHostDir(t *testing.T) {
	for handle, want := range map[string]string{
		"fs-0123abcd":             "/efs/fs-0123abcd",
		"fs-0123abcd:/data/train": "/efs/fs-0123abcd/data/train",
		"fs-0123abcd:data/../x":   "/efs/fs-0123abcd/x",
		"fs-0123abcd:/../../etc":  "/efs/fs-0123abcd/etc",
		"fs-0123abcd:/models:":    "/efs/fs-0123abcd/models",
	} {
		got, err := efsHostDir("/efs", handle)
		if err != nil || got != want {
			t.Errorf("efsHostDir(%q) = %q, %v; want %q", handle, got, err, want)
		}
	}
	for _, handle := range []string{"fs-0123abcd::fsap-0123", "vol-1", "fs-../x", ""} {
		if _, err := efsHostDir("/efs", handle); err == nil {
			t.Errorf("efsHostDir(%q) accepted", handle)
		}
	}
	if _, err := joinSubPath("/efs/fs-1", "../x"); err == nil {
		t.Error("a subPath with .. is refused")
	}
	if got, _ := joinSubPath("/efs/fs-1", "runs/a"); got != "/efs/fs-1/runs/a" {
		t.Errorf("joinSubPath: %s", got)
	}
}

func TestRewriteMountPaths(t *testing.T) {
	mounts := []mountMap{
		{MountPath: "/mnt/efs", HostDir: "/tmp/efs/fs-1"},
		{MountPath: "/mnt/efs/model", HostDir: "/tmp/model"},
		{MountPath: "/data", HostDir: "/h/data"},
	}
	for in, want := range map[string]string{
		"/mnt/efs":                 "/tmp/efs/fs-1",
		"/mnt/efs/train/x.npz":     "/tmp/efs/fs-1/train/x.npz",
		"--data=/mnt/efs/train":    "--data=/tmp/efs/fs-1/train",
		"/mnt/efs/model/out":       "/tmp/model/out",
		"/mnt/efs2/x":              "/mnt/efs2/x",
		"/mnt/efs.bak":             "/mnt/efs.bak",
		"/x/mnt/efs":               "/x/mnt/efs",
		"a:/data,/mnt/efs;/data/b": "a:/h/data,/tmp/efs/fs-1;/h/data/b",
		"s3://bucket/data":         "s3://bucket/data",
		"no paths here":            "no paths here",
		"file:///data/x":           "file:///data/x",
		"/database":                "/database",
	} {
		if got := rewriteMountPaths(in, mounts); got != want {
			t.Errorf("rewriteMountPaths(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExitRetryable(t *testing.T) {
	for code, want := range map[int32]bool{1: false, 2: false, 127: false, 128: true, 130: true, 137: true, 143: true} {
		if exitRetryable(code) != want {
			t.Errorf("exitRetryable(%d) = %v", code, !want)
		}
	}
}

func TestSetCondition(t *testing.T) {
	var s jobStatus
	s.setCondition("Created", "PyTorchJobCreated", "PyTorchJob j is created.")
	s.setCondition("Running", "PyTorchJobRunning", "PyTorchJob j is running.")
	s.setCondition("Restarting", "PyTorchJobRestarting", "PyTorchJob j is restarting because 1 Worker replica(s) failed.")
	if s.condition("Running") != nil {
		t.Error("Restarting replaces Running")
	}
	s.setCondition("Running", "PyTorchJobRunning", "PyTorchJob j is running.")
	if s.condition("Restarting") != nil {
		t.Error("Running replaces Restarting")
	}
	s.setCondition("Succeeded", "PyTorchJobSucceeded", "PyTorchJob j is successfully completed.")
	if c := s.condition("Running"); c == nil || c.Status != "False" {
		t.Errorf("Running after success: %+v", c)
	}
	if !s.finished() {
		t.Error("finished after Succeeded")
	}
	var f jobStatus
	f.setCondition("Failed", "PyTorchJobFailed", "x")
	f.setCondition("Running", "PyTorchJobRunning", "y")
	if f.condition("Running") != nil {
		t.Error("nothing changes once Failed")
	}
}

func TestExpandVars(t *testing.T) {
	vars := map[string]string{"A": "1", "B": "two"}
	for in, want := range map[string]string{
		"$(A)-$(B)": "1-two", "$$(A)": "$(A)", "$(C)": "$(C)", "$A": "$A", "cost $": "cost $", "$(A": "$(A",
	} {
		if got := expandVars(in, vars); got != want {
			t.Errorf("expandVars(%q) = %q, want %q", in, got, want)
		}
	}
}

// tarGz builds a gzip tar layer from entries (a trailing "/" names a
// directory, "->" a symlink).
func tarGz(t *testing.T, entries ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		name, content, _ := strings.Cut(e, "=")
		var hdr tar.Header
		switch {
		case strings.HasSuffix(name, "/"):
			hdr = tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755}
		case strings.Contains(name, "->"):
			n, target, _ := strings.Cut(name, "->")
			hdr = tar.Header{Name: n, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}
		default:
			hdr = tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(content))}
		}
		if err := tw.WriteHeader(&hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg {
			tw.Write([]byte(content))
		}
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

func TestUnpackLayersAndFindExecutable(t *testing.T) {
	root := t.TempDir()
	layers := [][]byte{
		tarGz(t, "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/kfaws-trainer=#!trainer", "etc/old=x", "opt/d/", "opt/d/a=1"),
		tarGz(t, "etc/.wh.old", "opt/d/.wh..wh..opq", "opt/d/b=2", "bin->usr/local/bin", "usr/bin/", "usr/bin/train->/usr/local/bin/kfaws-trainer"),
	}
	for _, l := range layers {
		if err := unpackLayer(bytes.NewReader(l), mediaDockerManifest+".layer.tar.gzip", root); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "etc/old")); !os.IsNotExist(err) {
		t.Error("whiteout .wh.old removes etc/old")
	}
	if _, err := os.Stat(filepath.Join(root, "opt/d/a")); !os.IsNotExist(err) {
		t.Error("opaque whiteout empties opt/d")
	}
	if b, _ := os.ReadFile(filepath.Join(root, "opt/d/b")); string(b) != "2" {
		t.Error("opt/d/b from the upper layer")
	}
	want := filepath.Join(root, "usr/local/bin/kfaws-trainer")
	for _, name := range []string{"kfaws-trainer", "/bin/kfaws-trainer", "/usr/bin/train"} {
		got, err := findExecutable(root, name, map[string]string{"PATH": "/usr/local/bin"})
		if err != nil || got != want {
			t.Errorf("findExecutable(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := findExecutable(root, "python3", map[string]string{"PATH": "/usr/local/bin:/usr/bin"}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing executable: %v", err)
	}
	if _, err := findExecutable(root, "./run", nil); err == nil {
		t.Error("a relative command path is refused")
	}

	escape := tarGz(t, "out->/tmp", "out/evil=x")
	if err := unpackLayer(bytes.NewReader(escape), "application/vnd.oci.image.layer.v1.tar+gzip", t.TempDir()); err == nil {
		t.Error("writing through a symlink is refused")
	}
}

func TestLogQueryAndTail(t *testing.T) {
	q, err := parseLogQuery(map[string][]string{"follow": {"true"}, "tailLines": {"2"}, "limitBytes": {"10"}})
	if err != nil || !q.follow || q.previous || q.tailLines != 2 || q.limitBytes != 10 {
		t.Errorf("parseLogQuery = %+v, %v", q, err)
	}
	if q, _ := parseLogQuery(nil); q.tailLines != -1 || q.limitBytes != 0 || q.follow {
		t.Errorf("defaults %+v", q)
	}
	for _, bad := range []map[string][]string{{"tailLines": {"-1"}}, {"tailLines": {"x"}}, {"limitBytes": {"0"}}} {
		if _, err := parseLogQuery(bad); err == nil {
			t.Errorf("parseLogQuery(%v) accepted", bad)
		}
	}
	log := []byte("a\nb\nc\n")
	for n, want := range map[int]string{-1: "a\nb\nc\n", 0: "", 1: "c\n", 2: "b\nc\n", 5: "a\nb\nc\n"} {
		if got := string(lastLines(log, n)); got != want {
			t.Errorf("lastLines(%d) = %q, want %q", n, got, want)
		}
	}
	if got := string(lastLines([]byte("a\nb"), 1)); got != "b" {
		t.Errorf("lastLines without a final newline = %q", got)
	}
	var buf bytes.Buffer
	lw := &limitWriter{w: &buf, left: 4, on: true}
	if _, err := lw.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if _, err := lw.Write([]byte("def")); !errors.Is(err, errLimit) || buf.String() != "abcd" {
		t.Errorf("limitWriter: %q, %v", buf.String(), err)
	}
}
