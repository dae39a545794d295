# Sourced by tests/demo.sh and tests/sandbox.sh (under with_emulator.sh):
#   start_local_cluster DIR NAME
# starts a real kube-apiserver (tests/apiserver: etcd, RBAC, controllers, and a
# token webhook that checks `kfaws eks get-token` tokens for EKS cluster NAME
# against the emulator's STS, as EKS's authenticator checks them against AWS
# STS) in DIR, and registers its endpoint and CA with the emulator for every
# EKS cluster of every account. Its PyTorchJob runner runs kubeflow.org/v1
# PyTorchJobs as local processes (images from the emulator's registry, EFS
# claims on its local EFS; tests/apiserver/README.md, "PyTorchJob runner").
# Sets local_cluster_bin (the directory of kfaws-testenv and kubectl) and
# local_cluster_pid; stop_local_cluster stops it.

start_local_cluster() {
    local dir=$1 name=$2
    local_cluster_bin="$(tests/apiserver/build.sh | tail -n1)"
    local_cluster_dir=$dir
    "$local_cluster_bin/kfaws-testenv" start --dir "$dir" \
        --aws-sts-endpoint "$AWS_ENDPOINT_URL" --eks-cluster-name "$name" \
        --pytorchjob-runner --aws-emulator-control "$KFAWS_EMULATOR_CONTROL" \
        >"$dir.log" 2>&1 &
    local_cluster_pid=$!
    for _ in $(seq 1 1800); do
        [[ -f "$dir/ready.json" ]] && break
        kill -0 "$local_cluster_pid" 2>/dev/null || { cat "$dir.log" >&2; return 1; }
        sleep 0.1
    done
    [[ -f "$dir/ready.json" ]] || { echo "the API server was not ready in 180 s; see $dir.log" >&2; return 1; }
    jq -n --arg endpoint "$(jq -r .endpoint "$dir/ready.json")" \
          --arg ca "$(base64 -w0 "$(jq -r .ca_file "$dir/ready.json")")" \
          '{endpoint: $endpoint, certificate_authority_data: $ca}' |
        curl -fsS -XPUT "$KFAWS_EMULATOR_CONTROL/eks/cluster-endpoint" \
            -H 'content-type: application/json' --data-binary @- >/dev/null
}

stop_local_cluster() {
    [[ -z "${local_cluster_pid:-}" ]] ||
        "$local_cluster_bin/kfaws-testenv" stop --dir "$local_cluster_dir" >/dev/null 2>&1 || true
}
