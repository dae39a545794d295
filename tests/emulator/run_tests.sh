#!/usr/bin/env bash
# Runs the emulator's own test suite (tests/) against one emulator started
# for the whole run; extra arguments go to pytest. Exits non-zero on any
# failure, including "no tests ran".
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$("$here/setup.sh")"
cd "$here"
exec "$here/with_emulator.sh" "$venv/bin/python" -m pytest "$@"
