#!/usr/bin/env bash
# For each patch in kfaws_emulator/patches, serves the emulator without it and
# prints the tests that then fail. Run after changing the moto pin: a patch
# whose tests pass without it restores nothing any more and should go.
# Takes about a minute per patch; not part of `make test`.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$("$here/setup.sh")"
cd "$here"
work="$(mktemp -d)"
pid=""
cleanup() {
    if [[ -n "$pid" ]]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

for patch in $("$venv/bin/python" -c 'from kfaws_emulator.patches import MODULES; print(*MODULES)'); do
    echo "== without $patch"
    rm -f "$work/ready"
    "$venv/bin/python" -m kfaws_emulator --no-warmup --skip-patch "$patch" --ready-file "$work/ready" 2>/dev/null &
    pid=$!
    until [[ -f "$work/ready" ]]; do
        kill -0 "$pid" 2>/dev/null || { echo "the emulator did not start" >&2; exit 1; }
        sleep 0.1
    done
    endpoint="$(sed -n 's/^KFAWS_EMULATOR_ENDPOINT=//p' "$work/ready")"
    KFAWS_EMULATOR_ENDPOINT="$endpoint" "$venv/bin/python" -m pytest -q -p no:cacheprovider -rf \
        --deselect tests/test_launcher.py tests 2>&1 | grep -E '^FAILED|passed|failed' | sed 's/ - .*//' || true
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
    pid=""
done
