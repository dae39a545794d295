#!/usr/bin/env bash
# `make sandbox`: an interactive shell on the embedded default, to drive kfaws
# by hand. Run under tests/emulator/with_emulator.sh (the Makefile does): the
# local AWS emulator with throwaway credentials, and a real kube-apiserver as
# the EKS cluster named $KFAWS_SANDBOX_CLUSTER (default "demo"; the
# deployment name in your kfaws.toml must match it for `kfaws apply` to reach
# it). Everything stops when the shell exits.
set -euo pipefail

if [[ -z "${AWS_ENDPOINT_URL:-}" ]]; then
    echo "tests/sandbox.sh runs under tests/emulator/with_emulator.sh (make sandbox)" >&2
    exit 2
fi
cluster="${KFAWS_SANDBOX_CLUSTER:-demo}"
bin_dir="${CARGO_TARGET_DIR:-$(pwd)/target}/debug"
# shellcheck source=tests/local_cluster.sh
source tests/local_cluster.sh
work="$(mktemp -d "${TMPDIR:-/tmp}/kfaws-sandbox.XXXXXX")"
trap 'stop_local_cluster; rm -rf "$work"' EXIT
start_local_cluster "$work/cluster" "$cluster"
mkdir "$work/home"
cat > "$work/home/kfaws.toml" <<TOML
name = "$cluster"
region = "us-east-1"

[kubeflow]
manifests = "$(pwd)/tests/fixtures/kubeflow/platform.yaml"
training_operator = "$(pwd)/tests/fixtures/kubeflow/training-operator.yaml"
TOML
cat <<MSG
kfaws sandbox: AWS emulator at $AWS_ENDPOINT_URL (account $AWS_ACCESS_KEY_ID, $AWS_REGION),
EKS cluster "$cluster" served by a real kube-apiserver. Working directory $work/home holds a
kfaws.toml; try: kfaws plan, kfaws apply --auto-approve, kfaws kubeconfig --kubeconfig kubeconfig,
kubectl --kubeconfig kubeconfig get storageclass, kfaws destroy --auto-approve.
The emulator's control API (latencies, faults, call log: tests/emulator/README.md) is
\$KFAWS_EMULATOR_CONTROL. Exit the shell to stop everything.
MSG
cd "$work/home"
PATH="$bin_dir:$local_cluster_bin:$PATH" "${SHELL:-bash}" -i || true
