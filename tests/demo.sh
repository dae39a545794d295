#!/usr/bin/env bash
# `make demo`: the main job on the embedded default. Run under
# tests/emulator/with_emulator.sh, which points AWS_ENDPOINT_URL at the local
# AWS emulator with throwaway credentials, so nothing here can reach a real
# AWS account. Grows with the project: today plan, apply, outputs, a
# no-change plan, the graph and destroy of the vanilla profile (AWS half and
# its Kubernetes objects, on a real kube-apiserver standing in for the EKS
# cluster: tests/apiserver), then
# the bundled trainer on real Fashion-MNIST with two data-parallel ranks under
# the PyTorchJob environment contract (what `kfaws train --runtime local`
# will launch).
set -euo pipefail

if [[ -z "${AWS_ENDPOINT_URL:-}" ]]; then
    echo "tests/demo.sh runs under tests/emulator/with_emulator.sh (make demo)" >&2
    exit 2
fi
bin_dir="${CARGO_TARGET_DIR:-$(pwd)/target}/debug"
export PATH="$bin_dir:$PATH"
fixtures="$(pwd)/tests/fixtures/kubeflow"
# shellcheck source=tests/local_cluster.sh
source tests/local_cluster.sh
work="$(mktemp -d "${TMPDIR:-/tmp}/kfaws-demo.XXXXXX")"
cleanup() {
    stop_local_cluster
    rm -rf "$work"
}
trap cleanup EXIT

# The EKS cluster "demo" is a real kube-apiserver (tests/local_cluster.sh);
# the emulator answers its endpoint and CA for every cluster of the account.
start_local_cluster "$work/cluster" demo
cd "$work"
kubectl="$local_cluster_bin/kubectl"

cat > kfaws.toml <<'TOML'
name = "demo"
region = "us-east-1"
kubernetes_version = "1.33"

[node_groups.cpu]
instance_type = "m5.xlarge"
min_size = 1
desired_size = 2
max_size = 4

[options]
sagemaker_role_policy = "scoped"

# A small stand-in for a Kubeflow release (kfaws ships no copy of upstream
# manifests): namespaces, a CRD with its custom resource in one stream, RBAC.
[kubeflow]
manifests = "FIXTURES/platform.yaml"
training_operator = "FIXTURES/training-operator.yaml"
TOML
sed -i "s|FIXTURES|$fixtures|" kfaws.toml

# Stacks take 3 s to create and delete, the EKS cluster 6 s (3 s to
# delete) and a node group 2 s, instead of moto's instant answer (real AWS:
# minutes; about 1/100 of it here), so the waits and the parallel walk are
# visible.
curl -fsS -XPUT "$KFAWS_EMULATOR_CONTROL/lifecycle" -H 'content-type: application/json' \
    -d '{"scale": 1, "durations": {"cloudformation.stack.create": 3,
         "cloudformation.stack.update": 3, "cloudformation.stack.delete": 3,
         "eks.cluster.create": 6, "eks.cluster.delete": 3, "eks.cluster.update": 6,
         "eks.nodegroup.create": 2, "eks.nodegroup.delete": 2}}' >/dev/null

step() {
    printf '\n\033[1m$ %s\033[0m\n' "$*"
    "$@"
}

step cat kfaws.toml
step kfaws validate
step kfaws plan
step kfaws apply --auto-approve
step kfaws output
step kfaws state list
step kfaws plan --detailed-exitcode
step kfaws graph
step kfaws kubeconfig --kubeconfig "$work/kubeconfig"
step "$kubectl" --kubeconfig "$work/kubeconfig" get storageclass,persistentvolume,csidriver
step "$kubectl" --kubeconfig "$work/kubeconfig" get serviceaccount,persistentvolumeclaim,rolebinding -n kubeflow-user-example-com
step "$kubectl" --kubeconfig "$work/kubeconfig" get crd pytorchjobs.kubeflow.org
step kfaws destroy --auto-approve
# The EKS cluster is deleted, so its tokens no longer authenticate; the API
# server that stood in for it is still up: look inside with its admin
# credentials for anything kfaws applied (every object carried an ApplySet label).
printf '\n\033[1m$ # what is left in the API server of the deleted cluster\033[0m\n'
step "$kubectl" --kubeconfig "$work/cluster/kubeconfig" get storageclass,persistentvolume,csidriver,crd,namespace -l applyset.kubernetes.io/part-of
step kfaws destroy --auto-approve

data=/usr/share/datasets/fashion-mnist
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
printf '\n\033[1m$ # 2 ranks, PyTorchJob environment (MASTER_ADDR=127.0.0.1 MASTER_PORT=%s WORLD_SIZE=2 RANK=0|1)\033[0m\n' "$port"
printf '\033[1m$ kfaws-trainer train --data-dir %s --model-dir model --hp epochs=1\033[0m\n' "$data"
pids=()
for rank in 0 1; do
    MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE=2 RANK="$rank" \
        kfaws-trainer train --bind-addr 127.0.0.1 --data-dir "$data" --model-dir model \
        --checkpoint-dir "checkpoints-$rank" --hp epochs=1 --hp log-interval=300 \
        > >(sed "s/^/[rank $rank] /") 2>&1 &
    pids+=("$!")
done
for pid in "${pids[@]}"; do wait "$pid"; done
step cat model/model.json
printf '\nDemo complete: every resource kfaws created was destroyed; the trained model is above.\n'
