#!/usr/bin/env bash
# `make bench` (image): size and build time of the trainer image that
# `kfaws image build` writes, next to the AWS PyTorch training image the
# hybrid-training blog posts run (AWS Deep Learning Containers,
# 763104351884.dkr.ecr.<region>.amazonaws.com/pytorch-training).
#
# The reference figure is not measured here (no Docker, no AWS): AWS's own
# build pipeline records it. aws/deep-learning-containers PR #3337
# (2023-09, "[PT2.0+CUDA118] [Training GPU] Reduce Image size") states the
# PyTorch 2.0 GPU SageMaker training image went from 23.4 GB to 18 GB
# uncompressed, and PR #3270 (2023-08) logs 20,575 MB for the EC2 variant
# against a 19,700 MB baseline. 18 GB is used below, uncompressed against
# uncompressed.
#
# Both a release and a debug trainer are measured (the release build is what
# a user pushes; tests push the debug one). Run from the repository root.
set -euo pipefail
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kfaws/target}"
REFERENCE_BYTES=$((18 * 1000 * 1000 * 1000))
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cargo build --workspace --bins >/dev/null 2>&1
cargo build --release -p kfaws-trainer --bin kfaws-trainer >/dev/null 2>&1
kfaws="$CARGO_TARGET_DIR/debug/kfaws"
for profile in release debug; do
    trainer="$CARGO_TARGET_DIR/$profile/kfaws-trainer"
    start=$(date +%s.%N)
    "$kfaws" image build --trainer "$trainer" --output "$work/$profile" >/dev/null
    end=$(date +%s.%N)
    # The layer blob is the one gzip blob in the layout (the config and manifest are JSON).
    layer="$(find "$work/$profile/oci/blobs/sha256" -type f -size +100k | head -n1)"
    compressed=$(stat -c %s "$layer")
    uncompressed=$(gzip -dc "$layer" | wc -c)
    awk -v p="$profile" -v s="$start" -v e="$end" -v c="$compressed" -v u="$uncompressed" \
        -v r="$REFERENCE_BYTES" 'BEGIN {
        printf "bench=image profile=%s build_secs=%.2f compressed_mb=%.1f uncompressed_mb=%.1f reference_uncompressed_gb=%.1f ratio_to_reference=%.5f (%.0fx smaller)\n",
            p, e - s, c / 1e6, u / 1e6, r / 1e9, u / r, r / u }'
done
