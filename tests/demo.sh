#!/usr/bin/env bash
# `make demo`: the main job on the embedded default. Run under
# tests/emulator/with_emulator.sh, which points AWS_ENDPOINT_URL at the local
# AWS emulator with throwaway credentials, so nothing here can reach a real
# AWS account. Grows with the project: today plan, apply, outputs, a
# no-change plan, the graph and destroy of the vanilla profile's stacks.
set -euo pipefail

if [[ -z "${AWS_ENDPOINT_URL:-}" ]]; then
    echo "tests/demo.sh runs under tests/emulator/with_emulator.sh (make demo)" >&2
    exit 2
fi
bin_dir="${CARGO_TARGET_DIR:-$(pwd)/target}/debug"
export PATH="$bin_dir:$PATH"
work="$(mktemp -d "${TMPDIR:-/tmp}/kfaws-demo.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"

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
TOML

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
step kfaws destroy --auto-approve
step kfaws destroy --auto-approve
printf '\nDemo complete: every resource kfaws created was destroyed.\n'
