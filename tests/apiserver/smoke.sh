#!/usr/bin/env bash
# Smoke test of the test control plane: builds it (build.sh), starts it with
# kfaws-testenv, and checks through the admin client certificate that
#   - /version reports the pinned Kubernetes release,
#   - an anonymous request for namespaces is refused (RBAC is on),
#   - a Namespace can be created and a CRD becomes Established and serves a CR,
#   - kubectl (built alongside) can server-side apply through DIR/kubeconfig,
#   - kube-controller-manager holds its lease and a deleted Namespace, custom
#     resource and ConfigMap inside, is actually removed (namespace controller),
# then that it stops cleanly with no process left: on `kfaws-testenv stop`, when the
# process that started it is killed, and when the harness itself is SIGKILLed;
# finally runs pytorchjob-smoke.sh (the PyTorchJob runner, under the AWS emulator).
# Exit status 0 means every check passed; each failure names the check.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$("$here/build.sh" | tail -n1)
want_version=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$here/go.mod")
work=$(mktemp -d "${TMPDIR:-/tmp}/kfaws-smoke.XXXXXX")

fail() { echo "smoke: FAIL: $*" >&2; exit 1; }
ok() { echo "smoke: ok: $*"; }

cleanup() {
  # Last resort only: every check below stops what it started. Matching on
  # the unique work directory cannot hit anyone else's processes.
  pkill -KILL -f -- "$work/" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# wait_ready DIR PID: waits for DIR/ready.json while PID (the harness or its
# parent) is alive.
wait_ready() {
  local dir=$1 pid=$2 start=$SECONDS
  for _ in $(seq 1 1800); do
    if [[ -f $dir/ready.json ]]; then
      echo "smoke: ${dir##*/} ready after $((SECONDS - start)) s"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || fail "harness for $dir exited before ready: $(tail -n 20 "$dir.stderr" 2>/dev/null)"
    sleep 0.1
  done
  fail "harness for $dir not ready within 180 s"
}

# no_process_left DIR: every process started for DIR is gone within 30 s.
no_process_left() {
  local dir=$1
  for _ in $(seq 1 300); do
    pgrep -f -- "$dir" >/dev/null || return 0
    sleep 0.1
  done
  fail "processes left for $dir: $(pgrep -a -f -- "$dir")"
}

pid_of() { jq -r ".pids.$2" "$1/ready.json"; }

# --- 1. start, API checks, SIGTERM ---------------------------------------
env1=$work/env1
"$bin/kfaws-testenv" start --dir "$env1" >"$env1.stdout" 2>"$env1.stderr" &
harness=$!
wait_ready "$env1" "$harness"
# shellcheck source=/dev/null
. "$env1/ready.env"
ok "harness ready at $KFAWS_TESTENV_ENDPOINT"

curl_admin() {
  curl -sS --fail-with-body --cacert "$KFAWS_TESTENV_CA_FILE" \
    --cert "$KFAWS_TESTENV_CLIENT_CERT_FILE" --key "$KFAWS_TESTENV_CLIENT_KEY_FILE" "$@"
}

got_version=$(curl_admin "$KFAWS_TESTENV_ENDPOINT/version" | jq -r .gitVersion)
[[ $got_version == "$want_version" ]] || fail "/version: gitVersion $got_version, want $want_version"
ok "/version answers $got_version with the admin certificate"

code=$(curl -sS -o /dev/null -w '%{http_code}' --cacert "$KFAWS_TESTENV_CA_FILE" "$KFAWS_TESTENV_ENDPOINT/api/v1/namespaces")
[[ $code == 403 ]] || fail "anonymous GET /api/v1/namespaces: HTTP $code, want 403"
ok "anonymous namespace list refused (403)"

curl_admin -X POST -H 'Content-Type: application/json' "$KFAWS_TESTENV_ENDPOINT/api/v1/namespaces" \
  -d '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"smoke"}}' >/dev/null
phase=$(curl_admin "$KFAWS_TESTENV_ENDPOINT/api/v1/namespaces/smoke" | jq -r .status.phase)
[[ $phase == Active ]] || fail "namespace smoke: phase $phase, want Active"
ok "namespace created (phase Active)"

curl_admin -X POST -H 'Content-Type: application/json' \
  "$KFAWS_TESTENV_ENDPOINT/apis/apiextensions.k8s.io/v1/customresourcedefinitions" -d '{
  "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "widgets.smoke.kfaws.dev"},
  "spec": {"group": "smoke.kfaws.dev", "scope": "Namespaced",
    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
    "versions": [{"name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object",
        "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}}]}}' >/dev/null
established=False
for _ in $(seq 1 300); do
  established=$(curl_admin "$KFAWS_TESTENV_ENDPOINT/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.smoke.kfaws.dev" |
    jq -r '[.status.conditions[]? | select(.type == "Established") | .status][0] // "False"')
  [[ $established == True ]] && break
  sleep 0.1
done
[[ $established == True ]] || fail "CRD widgets.smoke.kfaws.dev not Established within 30 s"
ok "CRD Established"

# Established does not promise the new resource is routed yet; poll the create.
for _ in $(seq 1 100); do
  if curl_admin -X POST -H 'Content-Type: application/json' \
    "$KFAWS_TESTENV_ENDPOINT/apis/smoke.kfaws.dev/v1/namespaces/smoke/widgets" \
    -d '{"apiVersion":"smoke.kfaws.dev/v1","kind":"Widget","metadata":{"name":"w1"},"spec":{"size":3}}' >/dev/null 2>&1; then
    break
  fi
  sleep 0.1
done
size=$(curl_admin "$KFAWS_TESTENV_ENDPOINT/apis/smoke.kfaws.dev/v1/namespaces/smoke/widgets/w1" | jq -r .spec.size)
[[ $size == 3 ]] || fail "custom resource w1: spec.size $size, want 3"
ok "custom resource created and read back"

# The kubeconfig the harness wrote works for a standard client, and server-side
# apply (what kfaws uses) goes through; kubectl is the one build.sh builds.
"$bin/kubectl" --kubeconfig "$KUBECONFIG" apply --server-side --field-manager smoke -f - >/dev/null <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata: {name: applied, namespace: smoke}
data: {key: value}
YAML
manager=$("$bin/kubectl" --kubeconfig "$KUBECONFIG" get configmap applied -n smoke --show-managed-fields \
  -o jsonpath='{.metadata.managedFields[0].manager}/{.metadata.managedFields[0].operation}')
[[ $manager == smoke/Apply ]] || fail "configmap applied: managedFields manager/operation $manager, want smoke/Apply"
ok "kubectl with the kubeconfig: server-side apply recorded by field manager smoke"

# The harness only reports ready once kube-controller-manager leads.
holder=$(curl_admin "$KFAWS_TESTENV_ENDPOINT/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager" |
  jq -r '.spec.holderIdentity // ""')
[[ -n $holder ]] || fail "lease kube-system/kube-controller-manager has no holder at ready time"
ok "kube-controller-manager holds its lease ($holder)"

# Deleting the namespace empties it (the custom resource and the ConfigMap)
# and removes it: without a namespace controller it would stay Terminating.
curl_admin -X DELETE "$KFAWS_TESTENV_ENDPOINT/api/v1/namespaces/smoke" >/dev/null
gone=false
for _ in $(seq 1 600); do
  code=$(curl -sS -o /dev/null -w '%{http_code}' --cacert "$KFAWS_TESTENV_CA_FILE" \
    --cert "$KFAWS_TESTENV_CLIENT_CERT_FILE" --key "$KFAWS_TESTENV_CLIENT_KEY_FILE" \
    "$KFAWS_TESTENV_ENDPOINT/api/v1/namespaces/smoke")
  if [[ $code == 404 ]]; then
    gone=true
    break
  fi
  sleep 0.1
done
$gone || fail "namespace smoke still present 60 s after its deletion: $(curl_admin "$KFAWS_TESTENV_ENDPOINT/api/v1/namespaces/smoke" | jq -c .status)"
left=$(curl_admin "$KFAWS_TESTENV_ENDPOINT/apis/smoke.kfaws.dev/v1/widgets" | jq '.items | length')
[[ $left == 0 ]] || fail "$left widgets left after namespace smoke was deleted"
ok "namespace deleted with its contents (namespace controller runs)"

etcd_pid=$(pid_of "$env1" etcd)
api_pid=$(pid_of "$env1" kube_apiserver)
kcm_pid=$(pid_of "$env1" kube_controller_manager)
[[ $kcm_pid =~ ^[0-9]+$ ]] || fail "ready.json pids.kube_controller_manager is $kcm_pid, want a process id"
"$bin/kfaws-testenv" stop --dir "$env1" || fail "kfaws-testenv stop --dir $env1 failed"
rc=0
wait "$harness" || rc=$?
[[ $rc == 0 ]] || fail "harness exited $rc after stop: $(tail -n 20 "$env1.stderr")"
[[ ! -e $env1/ready.json ]] || fail "ready.json still present after stop"
for pid in "$etcd_pid" "$api_pid" "$kcm_pid"; do
  ! kill -0 "$pid" 2>/dev/null || fail "server pid $pid still running after the harness stopped"
done
no_process_left "$env1"
ok "kfaws-testenv stop (SIGTERM): harness exited 0, etcd, kube-apiserver and kube-controller-manager gone"

# --- 2. the process that started the harness dies -------------------------
env2=$work/env2
bash -c '"$1" start --dir "$2" >"$2.stdout" 2>"$2.stderr" & wait' _ "$bin/kfaws-testenv" "$env2" &
parent=$!
wait_ready "$env2" "$parent"
{ kill -KILL "$parent" && wait "$parent"; } 2>/dev/null || true
no_process_left "$env2"
grep -q "parent process .* exited, stopping" "$env2.stderr" || fail "harness did not report its parent's exit: $(tail -n 5 "$env2.stderr")"
ok "parent SIGKILLed: harness, etcd, kube-apiserver and kube-controller-manager gone"

# --- 3. the harness itself is SIGKILLed -----------------------------------
env3=$work/env3
"$bin/kfaws-testenv" start --dir "$env3" >"$env3.stdout" 2>"$env3.stderr" &
harness=$!
wait_ready "$env3" "$harness"
{ kill -KILL "$harness" && wait "$harness"; } 2>/dev/null || true
no_process_left "$env3"
ok "harness SIGKILLed: etcd, kube-apiserver and kube-controller-manager gone (parent-death signal)"

# --- 4. the PyTorchJob runner, against the AWS emulator --------------------
"$here/pytorchjob-smoke.sh" || fail "pytorchjob-smoke.sh (the PyTorchJob runner)"

echo "smoke: PASS"
