#!/usr/bin/env bash
# Builds the `--features cuda` trainer (and the ddp test binary trainer/gpu/check.sh runs) on a
# Debian machine without network access.
#
# burn's CUDA backend (cubecl-cuda 0.11) links LLVM statically for its PTX code generator; its
# build script (tracel-llvm-bundler) downloads a prebuilt LLVM 23.1 from GitHub into
# $XDG_DATA_HOME/tracel/tracel-llvm-23.1.0-4 unless that directory holds the marker file
# `.tracel-llvm-installed`. With network access none of this is needed: `cargo build --release
# -p kfaws-trainer --features cuda` downloads the bundle. Offline, this script stands Debian's
# LLVM 22 (packages llvm-22-dev, libpolly-22-dev) in for the bundle, in a directory of its own
# ($KFAWS_CACHE/cuda-llvm, through XDG_DATA_HOME, for this build only):
#   - bin/llvm-config runs Debian's and rewrites its one system library given as a path
#     (/usr/lib/x86_64-linux-gnu/libz3.so), which the bundler would turn into `-llibz3`;
#   - lib, include and share are Debian's.
# LLVM 22 is one major version older than the 23.1 the bindings (llvm-sys 231) are written
# for: the build links (measured here, 2026-12-04) and the binary refuses cleanly without a
# GPU, but kernels compiled through it have not been run on a GPU yet (trainer/README.md, "GPU").
# Output: the binaries' paths, one per line. Needs a target directory of its own (a cold build
# took about 20 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
KFAWS_CACHE="${KFAWS_CACHE:-$HOME/.cache/kfaws}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$KFAWS_CACHE/target-cuda}"
llvm=/usr/lib/llvm-22
if [[ ! -x $llvm/bin/llvm-config || ! -f $llvm/lib/libPolly.a ]]; then
    echo "installing Debian's LLVM 22 (llvm-22-dev libpolly-22-dev)" >&2
    sudo_() { if [[ $(id -u) == 0 ]]; then "$@"; else sudo "$@"; fi; }
    sudo_ apt-get install -y -q llvm-22-dev libpolly-22-dev zlib1g-dev libzstd-dev libxml2-dev >&2
fi
export XDG_DATA_HOME="$KFAWS_CACHE/cuda-llvm"
prefix="$XDG_DATA_HOME/tracel/tracel-llvm-23.1.0-4"
mkdir -p "$prefix/bin"
for d in lib include share; do ln -sfn "$llvm/$d" "$prefix/$d"; done
cat > "$prefix/bin/llvm-config" <<WRAP
#!/bin/sh
$llvm/bin/llvm-config "\$@" | sed 's#/usr/lib/x86_64-linux-gnu/libz3\.so#-lz3#'
WRAP
chmod +x "$prefix/bin/llvm-config"
touch "$prefix/.tracel-llvm-installed"
cargo build --release -p kfaws-trainer --features cuda --bins >&2
cargo test --release -p kfaws-trainer --features cuda --no-run --test ddp 2>&1 >&2 \
    | tee /dev/stderr | sed -n 's/.*Executable tests\/ddp.rs (\(.*\))/\1/p' > "$CARGO_TARGET_DIR/ddp-test-path"
echo "$CARGO_TARGET_DIR/release/kfaws-trainer"
cat "$CARGO_TARGET_DIR/ddp-test-path"
