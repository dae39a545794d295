#!/usr/bin/env bash
# Usage: tests/emulator/with_emulator.sh COMMAND [ARG...]
#
# Starts one warmed-up emulator on a free loopback port, runs COMMAND with
# the emulator's address in its environment, stops the emulator, and exits
# with COMMAND's status (or 1 if the emulator could not start).
#
# COMMAND sees:
#   AWS_ENDPOINT_URL, KFAWS_EMULATOR_ENDPOINT  http://127.0.0.1:PORT
#   KFAWS_EMULATOR_CONTROL                     http://127.0.0.1:PORT/_kfaws
#   KFAWS_EMULATOR_PID                         the emulator's pid
#   AWS_ACCESS_KEY_ID=123456789012, AWS_SECRET_ACCESS_KEY=test,
#   AWS_REGION / AWS_DEFAULT_REGION=us-east-1 (unless set), AWS_PROFILE and
#   AWS_SESSION_TOKEN unset, AWS_EC2_METADATA_DISABLED=true: nothing run
#   under this script can reach a real AWS account with real credentials.
# A test picks its own account by setting AWS_ACCESS_KEY_ID to any other
# 12-digit id (README.md, "Isolation").
#
# No emulator outlives this script: it is stopped on exit, and it also stops
# by itself when this script dies (it watches a pipe whose only writers are
# this script and COMMAND's processes).
set -euo pipefail

if [[ $# -eq 0 ]]; then
    echo "usage: $0 COMMAND [ARG...]" >&2
    exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$("$here/setup.sh")"
work="$(mktemp -d "${TMPDIR:-/tmp}/kfaws-emulator.XXXXXX")"
ready="$work/ready"
log="$work/emulator.log"
mkfifo "$work/lifeline"
emulator_pid=""

stop_emulator() {
    local status=$?
    exec 9>&- 2>/dev/null || true
    if [[ $status -ne 0 && -s "$log" ]]; then
        echo "with_emulator.sh: exit status $status; the emulator's log:" >&2
        tail -n 50 "$log" >&2
    fi
    if [[ -n "$emulator_pid" ]] && kill -0 "$emulator_pid" 2>/dev/null; then
        kill -TERM "$emulator_pid" 2>/dev/null || true
        for _ in $(seq 100); do
            kill -0 "$emulator_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$emulator_pid" 2>/dev/null || true
        wait "$emulator_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
    exit "$status"
}
trap stop_emulator EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The emulator's work directory (local EFS, training jobs, endpoints, unpacked images:
# hundreds of MB) lives in $work, so it goes with it on exit.
(cd "$here" && KFAWS_EMULATOR_WORK_DIR="${KFAWS_EMULATOR_WORK_DIR:-$work/local}" \
    exec "$venv/bin/python" -m kfaws_emulator --port 0 --ready-file "$ready" \
    --exit-on-stdin-eof <"$work/lifeline" 2>"$log") &
emulator_pid=$!
exec 9>"$work/lifeline"

started=$SECONDS
until [[ -f "$ready" ]]; do
    if ! kill -0 "$emulator_pid" 2>/dev/null; then
        echo "with_emulator.sh: the emulator exited before it was ready; its log:" >&2
        cat "$log" >&2
        exit 1
    fi
    if ((SECONDS - started > 120)); then
        echo "with_emulator.sh: the emulator was not ready within 120 s; its log:" >&2
        cat "$log" >&2
        exit 1
    fi
    sleep 0.1
done
cat "$log" >&2

while IFS='=' read -r key value; do
    export "$key=$value"
done <"$ready"
export AWS_ACCESS_KEY_ID=123456789012 AWS_SECRET_ACCESS_KEY=test AWS_EC2_METADATA_DISABLED=true
export AWS_REGION="${AWS_REGION:-us-east-1}" AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-${AWS_REGION:-us-east-1}}"
unset AWS_PROFILE AWS_SESSION_TOKEN

set +e
"$@"
status=$?
set -e
exit "$status"
