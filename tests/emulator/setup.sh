#!/usr/bin/env bash
# Creates (or refreshes) the emulator's virtualenv outside the clone and prints
# its path. Idempotent: pip runs only when requirements.txt or the Python
# interpreter changed since the last successful install (hash stamp), so a
# second call costs well under a second.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${KFAWS_CACHE:-$HOME/.cache/kfaws}"
venv="$cache/venv"
python="${KFAWS_PYTHON:-python3}"

if ! command -v "$python" >/dev/null; then
    echo "setup.sh: $python not found; install Python 3.10+ (Debian: apt-get install python3 python3-venv)" >&2
    exit 1
fi

want="$( { cat "$here/requirements.txt"; "$python" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)"
stamp="$venv/.kfaws-requirements.sha256"

if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "$venv"
    exit 0
fi

mkdir -p "$cache"
if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv" >&2
fi
# A failed install must not leave a stamp that claims success.
rm -f "$stamp"
"$venv/bin/python" -m pip install --disable-pip-version-check --quiet \
    --requirement "$here/requirements.txt" >&2
echo "$want" >"$stamp"
echo "$venv"
