#!/usr/bin/env bash
# Installs what the kfaws-trainer tests need: real Fashion-MNIST from Debian's
# dataset-fashion-mnist (/usr/share/datasets/fashion-mnist/). Idempotent.
set -euo pipefail
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends dataset-fashion-mnist
