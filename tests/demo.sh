#!/usr/bin/env bash
# `make demo`: the main job on the embedded default. Run under
# tests/emulator/with_emulator.sh, which points AWS_ENDPOINT_URL at the local
# AWS emulator with throwaway credentials, so nothing here can reach a real
# AWS account. The whole hybrid-training story: validate, plan and apply the
# vanilla profile (AWS half and its Kubernetes objects, on a real
# kube-apiserver standing in for the EKS cluster: tests/apiserver); build and
# push the trainer image; train on real Fashion-MNIST with 2 workers as a
# Kubeflow PyTorchJob (the harness's runner plays the training operator and
# the kubelet) and as a SageMaker training job (the emulator runs the
# instances); deploy the SageMaker model to an endpoint and classify a test
# image; destroy, and show that nothing is left.
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

say() {
    printf '\n\033[1;34m# %s\033[0m\n' "$*"
}

say "1/6 The deployment: check the config, plan, apply"
step cat kfaws.toml
step kfaws validate
step kfaws plan
step kfaws apply --auto-approve
step kfaws output
step kfaws plan --detailed-exitcode
step kfaws kubeconfig --kubeconfig "$work/kubeconfig"
step "$kubectl" --kubeconfig "$work/kubeconfig" get storageclass,persistentvolume,csidriver
step "$kubectl" --kubeconfig "$work/kubeconfig" get serviceaccount,persistentvolumeclaim,rolebinding -n kubeflow-user-example-com
step "$kubectl" --kubeconfig "$work/kubeconfig" get crd pytorchjobs.kubeflow.org

say "2/6 The trainer image: built without Docker, pushed to the account's ECR"
step kfaws image build --trainer "$bin_dir/kfaws-trainer"
step kfaws image push

say "3/6 Real Fashion-MNIST onto the EFS file system (on AWS: a DataSync task or a pod; here the emulator's local EFS directory)"
fs="$(kfaws output efs_file_system_id)"
efs_root="$(curl -fsS "$KFAWS_EMULATOR_CONTROL/efs/local-root" | jq -r .root)/$fs"
mkdir -p "$efs_root/datasets/fashion-mnist"
step cp -v /usr/share/datasets/fashion-mnist/. "$efs_root/datasets/fashion-mnist/" -r

epochs="${KFAWS_DEMO_EPOCHS:-2}"
say "4/6 Train as a Kubeflow PyTorchJob: 1 master + 1 worker in the user namespace, data and model on EFS"
step kfaws train --runtime kubernetes --workers 2 --epochs "$epochs" \
    --data efs:/datasets/fashion-mnist --job-name demo-kubernetes | tee k8s.out
step "$kubectl" --kubeconfig "$work/kubeconfig" -n kubeflow-user-example-com get pytorchjobs,pods

say "5/6 Train as a SageMaker training job: 2 instances, the EFS directory as the train channel; then serve it"
step kfaws train --runtime sagemaker --workers 2 --epochs "$epochs" \
    --data efs:/datasets/fashion-mnist --hp dataset=fashion-mnist --job-name demo-sagemaker --follow | tee sm.out
step kfaws endpoint deploy --job demo-sagemaker
step kfaws-trainer sample --data-dir /usr/share/datasets/fashion-mnist --index 0 --output ankle-boot.png
step kfaws endpoint invoke demo-sagemaker --image ankle-boot.png

k8s_acc="$(jq -r .test_accuracy "$efs_root/models/demo-kubernetes/model.json")"
sm_acc="$(grep -o 'test_acc=[0-9.]*' sm.out | tail -n1 | cut -d= -f2)"
printf '\n\033[1mTest accuracy after %s epochs: PyTorchJob %s, SageMaker %s\033[0m\n' "$epochs" "$k8s_acc" "${sm_acc:-?}"
echo "(same data, seed and hyperparameters; they can differ by up to about a point because the pods here use all CPUs each while the SageMaker instances get half each, which changes the trainer's model replicas and so the floating-point summation order, and two epochs of SGD amplify rounding differences: trainer/README.md, \"Threads inside a process\")"

say "6/6 Destroy: the endpoint first, then every resource, dependants first"
# The artifact bucket holds the uploaded data, checkpoints and model
# artifacts: destroy refuses a non-empty bucket unless told to empty it.
step kfaws destroy --auto-approve --force-destroy-buckets
# The EKS cluster is deleted, so its tokens no longer authenticate; the API
# server that stood in for it is still up: look inside with its admin
# credentials for anything kfaws applied (every object carried an ApplySet label).
printf '\n\033[1m$ # what is left in the API server of the deleted cluster\033[0m\n'
step "$kubectl" --kubeconfig "$work/cluster/kubeconfig" get storageclass,persistentvolume,csidriver,crd,namespace -l applyset.kubernetes.io/part-of
step kfaws destroy --auto-approve
printf '\nDemo complete: both runtimes trained, the endpoint answered, and every resource kfaws created was destroyed.\n'
