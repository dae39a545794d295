#!/usr/bin/env bash
# Installs what the kfaws-trainer tests need: real Fashion-MNIST from Debian's
# dataset-fashion-mnist (/usr/share/datasets/fashion-mnist/). Idempotent and fast when present.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tests/debian-packages.sh dataset-fashion-mnist
