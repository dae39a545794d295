#!/usr/bin/env bash
# End-to-end check of `kfaws-testenv start --pytorchjob-runner` against the
# real AWS emulator (its loopback registry behind ECR and its local EFS):
#   1. an image (one layer: /bin/sh) is pushed to the emulator's registry the
#      way ECR clients push (basic auth, monolithic blob uploads, Docker v2
#      schema 2 manifest);
#   2. a PyTorchJob (Master + 1 Worker, restartPolicy ExitCode) whose replicas
#      write their environment to an EFS claim succeeds: conditions Created,
#      Running (now False) and Succeeded with the operator's reasons, replica
#      statuses, the Pods' labels, owner reference, phases and container
#      states, the files on the local EFS directory, the log files, and
#      `kubectl logs` (plain, --tail, -f) through the API server;
#   3. a worker exiting 3 fails the job with the replica's log tail in its Pod's
#      termination message; deleting that job kills the master's process, and
#      the garbage collector's deletion of its Pods completes (the runner
#      finishes a graceful Pod deletion as a kubelet would);
#   4. a retryable exit code (130) recreates the replica up to backoffLimit
#      (ExitCode); with OnFailure, exit 1 restarts the container in place;
#   5. an unsupported volume fails the job with a clear message;
#   6. deleting a namespace with a running job kills its replicas and the
#      namespace goes away;
#   7. stopping the harness kills the running replicas;
#   8. SIGKILL of the harness kills a running replica too (parent-death signal).
# Runs itself under tests/emulator/with_emulator.sh unless KFAWS_EMULATOR_CONTROL
# is set. Skips (exit 0) when the emulator has no registry (docker-registry
# not installed). Needs curl, jq, gzip, sha256sum.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ -z ${KFAWS_EMULATOR_CONTROL:-} ]]; then
  exec "$here/../emulator/with_emulator.sh" "$here/pytorchjob-smoke.sh" "$@"
fi
bin=$("$here/build.sh" | tail -n1)
work=$(mktemp -d "${TMPDIR:-/tmp}/kfaws-pytorchjob-smoke.XXXXXX")
env=$work/env

fail() {
  echo "pytorchjob-smoke: FAIL: $*" >&2
  [[ -f $env/logs/pytorchjob-runner.log ]] && tail -n 30 "$env/logs/pytorchjob-runner.log" >&2
  exit 1
}
ok() { echo "pytorchjob-smoke: ok (${SECONDS}s): $*"; }

harness=""
cleanup() {
  if [[ -n $harness ]] && kill -0 "$harness" 2>/dev/null; then
    "$bin/kfaws-testenv" stop --dir "$env" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

registry=$(curl -sS "$KFAWS_EMULATOR_CONTROL/ecr/registry")
reg_url=$(jq -r '.url // empty' <<<"$registry")
if [[ -z $reg_url ]]; then
  echo "pytorchjob-smoke: SKIP: the emulator has no registry ($registry)"
  exit 0
fi
reg_auth="$(jq -r .username <<<"$registry"):$(jq -r .password <<<"$registry")"
efs_root=$(curl -fsS "$KFAWS_EMULATOR_CONTROL/efs/local-root" | jq -r .root)
[[ -n $efs_root ]] || fail "GET /efs/local-root gave no root"

# --- 1. an image in the emulated ECR -----------------------------------
repo=pytorchjob-smoke
image=123456789012.dkr.ecr.us-east-1.amazonaws.com/$repo:v1
mkdir -p "$work/image/rootfs/bin"
cp "$(readlink -f /bin/sh)" "$work/image/rootfs/bin/sh"
tar -C "$work/image/rootfs" --owner=0 --group=0 --numeric-owner -cf "$work/image/layer.tar" bin
diff_id=sha256:$(sha256sum <"$work/image/layer.tar" | cut -c1-64)
gzip -n -c "$work/image/layer.tar" >"$work/image/layer.tar.gz"
layer_digest=sha256:$(sha256sum <"$work/image/layer.tar.gz" | cut -c1-64)
jq -cn --arg diff "$diff_id" '{architecture: "amd64", os: "linux",
  config: {Entrypoint: ["/bin/sh", "-c"], Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
  rootfs: {type: "layers", diff_ids: [$diff]}}' >"$work/image/config.json"
config_digest=sha256:$(sha256sum <"$work/image/config.json" | cut -c1-64)

push_blob() { # push_blob FILE DIGEST
  local loc
  loc=$(curl -fsS -u "$reg_auth" -X POST -D - -o /dev/null "$reg_url/v2/$repo/blobs/uploads/" |
    awk 'tolower($1) == "location:" { print $2 }' | tr -d '\r')
  [[ $loc == http* ]] || loc=$reg_url$loc
  [[ $loc == *\?* ]] && loc="$loc&digest=$2" || loc="$loc?digest=$2"
  curl -fsS -u "$reg_auth" -X PUT -H 'Content-Type: application/octet-stream' --data-binary "@$1" "$loc" >/dev/null
}
push_blob "$work/image/layer.tar.gz" "$layer_digest"
push_blob "$work/image/config.json" "$config_digest"
jq -cn --arg c "$config_digest" --argjson cs "$(stat -c %s "$work/image/config.json")" \
  --arg l "$layer_digest" --argjson ls "$(stat -c %s "$work/image/layer.tar.gz")" \
  '{schemaVersion: 2, mediaType: "application/vnd.docker.distribution.manifest.v2+json",
    config: {mediaType: "application/vnd.docker.container.image.v1+json", digest: $c, size: $cs},
    layers: [{mediaType: "application/vnd.docker.image.rootfs.diff.tar.gzip", digest: $l, size: $ls}]}' >"$work/image/manifest.json"
curl -fsS -u "$reg_auth" -X PUT -H 'Content-Type: application/vnd.docker.distribution.manifest.v2+json' \
  --data-binary "@$work/image/manifest.json" "$reg_url/v2/$repo/manifests/v1" >/dev/null
ok "pushed $image to $reg_url"

# --- the harness with the runner ----------------------------------------
"$bin/kfaws-testenv" start --dir "$env" --pytorchjob-runner --aws-emulator-control "$KFAWS_EMULATOR_CONTROL" \
  >"$work/env.stdout" 2>"$work/env.stderr" &
harness=$!
for _ in $(seq 1 1800); do
  [[ -f $env/ready.json ]] && break
  kill -0 "$harness" 2>/dev/null || fail "harness exited: $(tail -n 20 "$work/env.stderr")"
  sleep 0.1
done
[[ -f $env/ready.json ]] || fail "harness not ready in 180 s"
[[ $(jq -r .pytorchjob_runner "$env/ready.json") == true ]] || fail "ready.json does not report the runner"
kubectl() { "$bin/kubectl" --kubeconfig "$env/kubeconfig" "$@"; }
ok "harness ready with --pytorchjob-runner"

kubectl create namespace kubeflow >/dev/null
kubectl apply -f "$here/../fixtures/kubeflow/training-operator.yaml" >/dev/null
kubectl wait --for=condition=Established crd/pytorchjobs.kubeflow.org --timeout=60s >/dev/null
fs=fs-0123456789abcdef0
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: ml}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: efs-pv}
spec:
  capacity: {storage: 5Gi}
  accessModes: [ReadWriteMany]
  storageClassName: efs-sc
  csi: {driver: efs.csi.aws.com, volumeHandle: "$fs:/smoke"}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: efs-claim, namespace: ml}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: efs-sc
  volumeName: efs-pv
  resources: {requests: {storage: 5Gi}}
YAML
out=$efs_root/$fs/smoke/out

# job NAME SCRIPT [RESTART_POLICY] [RUN_POLICY_JSON] [EXTRA_VOLUME] [NAMESPACE]: a
# PyTorchJob whose Master and Worker run SCRIPT with /mnt/efs the claim.
job() {
  local name=$1 script=$2 policy=${3:-ExitCode} run_policy=${4:-"{}"} extra=${5:-} ns=${6:-ml}
  local volumes='[{"name": "efs", "persistentVolumeClaim": {"claimName": "efs-claim"}}]'
  local mounts='[{"name": "efs", "mountPath": "/mnt/efs"}]'
  if [[ -n $extra ]]; then
    volumes=$(jq -c ". + [$extra]" <<<"$volumes")
    mounts=$(jq -c '. + [{"name": "extra", "mountPath": "/etc/extra"}]' <<<"$mounts")
  fi
  jq -n --arg name "$name" --arg ns "$ns" --arg image "$image" --arg script "$script" --arg policy "$policy" \
    --argjson rp "$run_policy" --argjson volumes "$volumes" --argjson mounts "$mounts" '
    def replica: {replicas: 1, restartPolicy: $policy, template: {
      metadata: {annotations: {"sidecar.istio.io/inject": "false"}},
      spec: {volumes: $volumes, containers: [{name: "pytorch", image: $image, args: [$script], volumeMounts: $mounts,
        env: [{name: "POD", valueFrom: {fieldRef: {fieldPath: "metadata.name"}}}, {name: "OUT", value: "/mnt/efs/out"}]}]}}};
    {apiVersion: "kubeflow.org/v1", kind: "PyTorchJob", metadata: {name: $name, namespace: $ns},
     spec: {runPolicy: $rp, pytorchReplicaSpecs: {Master: replica, Worker: replica}}}' | kubectl create -f - >/dev/null
}

# wait_condition JOB TYPE [NAMESPACE]: until the job's condition TYPE is True (60 s).
wait_condition() {
  local ns=${3:-ml}
  for _ in $(seq 1 600); do
    [[ $(kubectl get pytorchjob -n "$ns" "$1" -o json | jq -r --arg t "$2" '.status.conditions // [] | map(select(.type == $t))[0].status') == True ]] && return 0
    sleep 0.1
  done
  fail "PyTorchJob $1: no $2 condition within 60 s: $(kubectl get pytorchjob -n "$ns" "$1" -o json | jq -c .status)"
}
cond() { kubectl get pytorchjob -n ml "$1" -o json | jq -r --arg t "$2" ".status.conditions | map(select(.type == \$t))[0].$3"; }
pod_json() { kubectl get pod -n ml "$1" -o json; }
# gone PID: the process exits within 20 s.
gone() {
  for _ in $(seq 1 200); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.1
  done
  fail "process $1 still running: $(ps -o pid,args -p "$1" | tail -n 1)"
}

# --- 2. a job that succeeds ---------------------------------------------
job ok-job 'mkdir -p $OUT && echo "rank=$RANK world=$WORLD_SIZE addr=$MASTER_ADDR port=$MASTER_PORT pod=$POD out=$OUT unbuffered=$PYTHONUNBUFFERED" > $OUT/ok-$RANK.txt && echo "hello from $POD"'
wait_condition ok-job Succeeded
[[ $(cond ok-job Succeeded reason) == PyTorchJobSucceeded ]] || fail "Succeeded reason $(cond ok-job Succeeded reason)"
[[ $(cond ok-job Succeeded message) == "PyTorchJob ok-job is successfully completed." ]] || fail "Succeeded message $(cond ok-job Succeeded message)"
[[ $(cond ok-job Created reason) == PyTorchJobCreated ]] || fail "Created reason $(cond ok-job Created reason)"
[[ $(cond ok-job Running status) == False ]] || fail "Running is False after success, got $(cond ok-job Running status)"
status=$(kubectl get pytorchjob -n ml ok-job -o json | jq -c .status)
[[ $(jq -r '.replicaStatuses.Master.succeeded' <<<"$status") == 1 ]] || fail "replicaStatuses $status"
[[ $(jq -r '.startTime != null and .completionTime != null' <<<"$status") == true ]] || fail "start/completion time $status"
ok "ok-job: Created, Running, Succeeded (PyTorchJobSucceeded), replicaStatuses, times"
for rank in 0 1; do
  [[ -f $out/ok-$rank.txt ]] || fail "no $out/ok-$rank.txt on the local EFS"
done
pod=ok-job-worker-0
want="rank=1 world=2 addr=127.0.0.1 port=$(grep -o 'port=[0-9]*' "$out/ok-0.txt" | cut -d= -f2) pod=$pod out=$out unbuffered=1"
[[ $(cat "$out/ok-1.txt") == "$want" ]] || fail "worker wrote '$(cat "$out/ok-1.txt")', want '$want'"
ok "replicas wrote to $out with the operator's environment (/mnt/efs rewritten)"
kubectl wait --for=jsonpath='{.status.phase}'=Succeeded -n ml pod/$pod --timeout=30s >/dev/null || fail "worker pod phase $(pod_json $pod | jq -r .status.phase)"
pj=$(pod_json $pod)
jq -e '.metadata.labels["training.kubeflow.org/job-name"] == "ok-job" and .metadata.labels["training.kubeflow.org/replica-type"] == "worker"
  and .metadata.labels["training.kubeflow.org/replica-index"] == "0" and .metadata.labels["training.kubeflow.org/operator-name"] == "pytorchjob-controller"
  and .metadata.ownerReferences[0].kind == "PyTorchJob" and .metadata.ownerReferences[0].controller == true
  and .spec.nodeName == "kfaws-local"
  and .status.containerStatuses[0].state.terminated.exitCode == 0 and .status.containerStatuses[0].state.terminated.reason == "Completed"' \
  <<<"$pj" >/dev/null || fail "worker pod: $(jq -c '{labels: .metadata.labels, owner: .metadata.ownerReferences, node: .spec.nodeName, status: .status.containerStatuses}' <<<"$pj")"
[[ $(kubectl get service -n ml ok-job-master-0 -o jsonpath='{.spec.clusterIP} {.spec.ports[0].port} {.metadata.ownerReferences[0].name}') == "None 23456 ok-job" ]] ||
  fail "service ok-job-master-0: $(kubectl get service -n ml ok-job-master-0 -o json 2>&1 | jq -c .spec)"
grep -q "hello from $pod" "$env/logs/pytorchjobs/ml/$pod.log" || fail "log $env/logs/pytorchjobs/ml/$pod.log: $(cat "$env/logs/pytorchjobs/ml/$pod.log" 2>&1)"
ok "Pods: labels, owner reference, node, phase Succeeded, terminated Completed, log file; headless Services"
[[ $(kubectl get node kfaws-local -o jsonpath='{.status.conditions[0].type}={.status.conditions[0].status}') == Ready=True ]] ||
  fail "node kfaws-local: $(kubectl get node kfaws-local -o json | jq -c .status)"
[[ $(kubectl logs -n ml $pod) == "hello from $pod" ]] || fail "kubectl logs $pod: $(kubectl logs -n ml $pod 2>&1)"
job log-job 'for i in 1 2 3; do echo "line $i"; sleep 0.5; done'
wait_condition log-job Running
[[ $(kubectl logs -n ml -f log-job-master-0 | tr '\n' ' ') == "line 1 line 2 line 3 " ]] ||
  fail "kubectl logs -f: $(kubectl logs -n ml log-job-master-0 2>&1)"
[[ $(kubectl logs -n ml --tail=1 log-job-worker-0) == "line 3" ]] || fail "kubectl logs --tail=1: $(kubectl logs -n ml --tail=1 log-job-worker-0 2>&1)"
ok "kubectl logs through the API server (node kfaws-local's kubelet endpoint): plain, -f until the process exits, --tail"

# --- 3. a failing worker; deleting the job kills the master -------------
job fail-job 'mkdir -p $OUT; if [ "$RANK" = 1 ]; then echo "boom on rank $RANK" >&2; exit 3; fi; echo $$$$ > $OUT/fail-master.pid; exec sleep 600'
wait_condition fail-job Failed
[[ $(cond fail-job Failed reason) == PyTorchJobFailed ]] || fail "Failed reason $(cond fail-job Failed reason)"
[[ $(cond fail-job Failed message) == "PyTorchJob fail-job is failed because 1 Worker replica(s) failed." ]] || fail "Failed message $(cond fail-job Failed message)"
pj=$(pod_json fail-job-worker-0)
jq -e '.status.phase == "Failed" and .status.containerStatuses[0].state.terminated.exitCode == 3 and .status.containerStatuses[0].state.terminated.reason == "Error"
  and (.status.containerStatuses[0].state.terminated.message | contains("boom on rank 1"))' <<<"$pj" >/dev/null ||
  fail "failed worker pod: $(jq -c .status <<<"$pj")"
ok "fail-job: exit 3 fails the job (PyTorchJobFailed), the pod's termination message has the log tail"
for _ in $(seq 1 100); do [[ -s $out/fail-master.pid ]] && break; sleep 0.1; done
master_pid=$(cat "$out/fail-master.pid")
kill -0 "$master_pid" || fail "the master's process $master_pid is not running"
kubectl delete pytorchjob -n ml fail-job --wait=true >/dev/null
gone "$master_pid"
ok "deleting fail-job killed the master's process"

# --- 4. retryable exit code, backoff limit -------------------------------
job retry-job 'mkdir -p $OUT; if [ "$RANK" = 0 ]; then echo run >> $OUT/retry-runs; exit 130; fi; exec sleep 600' ExitCode '{"backoffLimit": 1, "cleanPodPolicy": "Running"}'
wait_condition retry-job Failed
[[ $(cond retry-job Failed message) == "PyTorchJob retry-job has failed because it has reached the specified backoff limit" ]] ||
  fail "retry-job message $(cond retry-job Failed message)"
[[ $(wc -l <"$out/retry-runs") == 2 ]] || fail "the master ran $(wc -l <"$out/retry-runs") times, want 2 (backoffLimit 1)"
kubectl wait --for=delete -n ml pod/retry-job-worker-0 --timeout=60s >/dev/null 2>&1 ||
  fail "cleanPodPolicy Running: the running worker was not deleted"
ok "retry-job: exit 130 recreated the master once (backoffLimit 1), then Failed; cleanPodPolicy Running removed the worker"

job restart-job 'mkdir -p $OUT; echo "run of $POD"; if [ ! -f $OUT/restarted-$RANK ]; then touch $OUT/restarted-$RANK; exit 1; fi; echo second' OnFailure '{"backoffLimit": 2}'
wait_condition restart-job Succeeded
pj=$(pod_json restart-job-master-0)
jq -e '.status.containerStatuses[0].restartCount == 1 and .status.containerStatuses[0].lastState.terminated.exitCode == 1
  and .status.containerStatuses[0].state.terminated.exitCode == 0' <<<"$pj" >/dev/null || fail "restart-job master: $(jq -c .status.containerStatuses <<<"$pj")"
[[ $(kubectl logs -n ml restart-job-master-0 --previous) == "run of restart-job-master-0" ]] || fail "logs --previous: $(kubectl logs -n ml restart-job-master-0 --previous 2>&1)"
[[ $(kubectl logs -n ml restart-job-master-0 | tr '\n' ' ') == "run of restart-job-master-0 second " ]] || fail "logs after restart: $(kubectl logs -n ml restart-job-master-0 2>&1)"
ok "restart-job (OnFailure): exit 1 restarted the container in place (restartCount 1, lastState), logs --previous, then Succeeded"

# --- 5. unsupported volume --------------------------------------------------
job bad-volume 'true' ExitCode '{}' '{"name": "extra", "configMap": {"name": "cfg"}}'
wait_condition bad-volume Failed
msg=$(cond bad-volume Failed message)
[[ $msg == *'volume "extra" is not supported'* ]] || fail "bad-volume message: $msg"
ok "bad-volume: Failed with \"$msg\""

# --- 6. deleting a namespace with a running job ----------------------------
kubectl create namespace ml2 >/dev/null
kubectl get pvc -n ml efs-claim -o json | jq '{apiVersion, kind, metadata: {name: "efs-claim", namespace: "ml2"}, spec: (.spec | .volumeName = "efs-pv")}' |
  kubectl create -f - >/dev/null
job ns-job 'mkdir -p $OUT; echo $$$$ > $OUT/ns-$RANK.pid; exec sleep 600' ExitCode '{}' '' ml2
wait_condition ns-job Running ml2
for _ in $(seq 1 100); do [[ -s $out/ns-1.pid && -s $out/ns-0.pid ]] && break; sleep 0.1; done
pids="$(cat "$out/ns-0.pid") $(cat "$out/ns-1.pid")"
kubectl delete namespace ml2 --wait=false >/dev/null
for p in $pids; do gone "$p"; done
ok "deleting namespace ml2 killed its running replicas ($pids)"
kubectl wait --for=delete namespace/ml2 --timeout=90s >/dev/null 2>&1 || fail "namespace ml2 not removed: $(kubectl get namespace ml2 -o json | jq -c .status)"
ok "namespace ml2 went away"

# The garbage collector removes the deleted job's Pods (running ones are
# gracefully deleted, which the runner completes as their kubelet). It only
# watches PyTorchJobs from its first discovery resync after the CRD appeared
# (kube-controller-manager resyncs every 30 s), so this can take that long.
kubectl wait --for=delete -n ml pod/fail-job-master-0 pod/fail-job-worker-0 --timeout=90s >/dev/null 2>&1 ||
  fail "pods of the deleted job remain: $(kubectl get pods -n ml -o name)"
ok "the garbage collector removed fail-job's pods"

# --- 7. harness stop kills running replicas -------------------------------
job long-job 'mkdir -p $OUT; echo $$$$ > $OUT/long-$RANK.pid; exec sleep 600'
wait_condition long-job Running
for _ in $(seq 1 100); do [[ -s $out/long-1.pid ]] && break; sleep 0.1; done
pids="$(cat "$out/long-0.pid") $(cat "$out/long-1.pid")"
"$bin/kfaws-testenv" stop --dir "$env" >/dev/null
for p in $pids; do gone "$p"; done
ok "harness stop killed the running replicas ($pids)"

# --- 8. a SIGKILLed harness takes its replicas along ------------------------
env=$work/env2
"$bin/kfaws-testenv" start --dir "$env" --pytorchjob-runner --aws-emulator-control "$KFAWS_EMULATOR_CONTROL" \
  >"$work/env2.stdout" 2>"$work/env2.stderr" &
harness=$!
for _ in $(seq 1 1800); do
  [[ -f $env/ready.json ]] && break
  kill -0 "$harness" 2>/dev/null || fail "second harness exited: $(tail -n 20 "$work/env2.stderr")"
  sleep 0.1
done
kubectl create namespace kubeflow >/dev/null
kubectl apply -f "$here/../fixtures/kubeflow/training-operator.yaml" >/dev/null
kubectl wait --for=condition=Established crd/pytorchjobs.kubeflow.org --timeout=60s >/dev/null
mkdir -p "$work/pids"
jq -n --arg image "$image" --arg pids "$work/pids" '
  {apiVersion: "kubeflow.org/v1", kind: "PyTorchJob", metadata: {name: "orphan-check", namespace: "default"},
   spec: {pytorchReplicaSpecs: {Master: {replicas: 1, restartPolicy: "ExitCode", template: {spec: {
     volumes: [{name: "out", hostPath: {path: $pids}}],
     containers: [{name: "pytorch", image: $image, args: ["echo $$$$ > /out/master.pid; exec sleep 600"],
       volumeMounts: [{name: "out", mountPath: "/out"}]}]}}}}}}' | kubectl create -f - >/dev/null
for _ in $(seq 1 300); do [[ -s $work/pids/master.pid ]] && break; sleep 0.1; done
[[ -s $work/pids/master.pid ]] || fail "orphan-check's master did not start: $(tail -n 5 "$env/logs/pytorchjob-runner.log")"
pid=$(cat "$work/pids/master.pid")
{ kill -KILL "$harness" && wait "$harness"; } 2>/dev/null || true
gone "$pid"
ok "a SIGKILLed harness took its running replica ($pid) along (parent-death signal)"
"$bin/kfaws-testenv" stop --dir "$env" >/dev/null 2>&1 || true # whatever the SIGKILL left (the servers die with it too)
rm -rf "${efs_root:?}/$fs"
