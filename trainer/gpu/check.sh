#!/usr/bin/env bash
# The trainer's GPU checks, for a machine with an NVIDIA GPU and driver (no network, no Rust
# needed there): the `--features cuda` build of kfaws-trainer trains on CUDA device 0
# (`backend=nccl`), alone and as ranks of a data-parallel job, and the data-parallel tests of
# tests/ddp.rs pass with every rank on the GPU. Each step is logged to $OUT/<step>.log and
# summarised in $OUT/summary.txt; a failing step does not stop the others.
#
#   BIN=path/to/kfaws-trainer (a --features cuda build)
#   DDP_TEST=path/to/the ddp test binary of that build (optional; it runs the trainer from the
#            path it was built with, CARGO_BIN_EXE_kfaws-trainer, so BIN must be there)
#   DATA=Fashion-MNIST directory (default /usr/share/datasets/fashion-mnist)
#   PYTHON=an interpreter with torch (optional): PyTorch's throughput on the same GPU
#   OUT=where the logs go (default ./gpu-check)
# Build (trainer/README.md, "GPU"): cargo build --release -p kfaws-trainer --features cuda,
# and cargo test --release -p kfaws-trainer --features cuda --no-run --test ddp.
set -uo pipefail
BIN="${BIN:?BIN=path to a --features cuda kfaws-trainer}"
DATA="${DATA:-/usr/share/datasets/fashion-mnist}"
OUT="${OUT:-gpu-check}"
HERE="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$OUT"
summary="$OUT/summary.txt"
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT

step() { # name timeout-seconds command...: runs one check, records its exit code and time
    local name=$1 limit=$2; shift 2
    local started=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "step=$name rc=$rc seconds=$((SECONDS - started))" | tee -a "$summary"
    return $rc
}
metrics() { grep -h '^epoch=' "$@" | sed 's/^/  /' | tee -a "$summary"; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; "$BIN" --version; } 2>&1 | tee -a "$summary"
# GPU memory in use, sampled every second while the checks run (MiB).
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader,nounits -l 1 > "$OUT/gpu-usage.csv" 2>/dev/null &
smi_pid=$!

step check-data 60 "$BIN" check-data --data-dir "$DATA"

# 1. One rank on the GPU with the defaults (batch 32, lr 0.02, momentum 0.9, 2 epochs).
step train-1-rank 180 "$BIN" train --data-dir "$DATA" --model-dir "$work/model-1" \
    --checkpoint-dir "$work/ckpt-1" --hp backend=nccl --hp log-interval=1000000
metrics "$OUT/train-1-rank.log"

# 2. The model it wrote is served (on the CPU) and classifies a real test image.
"$BIN" sample --data-dir "$DATA" --index 0 --output "$work/x.png" > "$OUT/sample.log" 2>&1
port=18080
"$BIN" serve --model-dir "$work/model-1" --port $port --bind-addr 127.0.0.1 > "$OUT/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/ping" > /dev/null && break; sleep 0.1; done
step invocations 20 curl -sS -f -H 'Content-Type: application/x-image' --data-binary @"$work/x.png" \
    "http://127.0.0.1:$port/invocations"
sed 's/^/  /' "$OUT/invocations.log" | tee -a "$summary"; echo | tee -a "$summary"
grep -h '^label=' "$OUT/sample.log" | sed 's/^/  expected: /' | tee -a "$summary"
kill $serve_pid 2>/dev/null

# 3. tests/ddp.rs with every rank on the GPU: 2 ranks reach 0.85 in 2 epochs, 1×64 equals
#    2×32, a dead or hung rank fails the other, a signal stops every rank at the same step,
#    ring equals star.
if [[ -n "${DDP_TEST:-}" ]]; then
    KFAWS_TRAINER_TEST_BACKEND=nccl step ddp-tests 240 "$DDP_TEST" --nocapture --test-threads 5
    grep -E '^test |test result' "$OUT/ddp-tests.log" | sed 's/^/  /' | tee -a "$summary"
fi

# 4. Throughput on this machine: the trainer on the GPU with batch 64 and on the CPU (all
#    cores) for one epoch, and PyTorch's reference step on the GPU and the CPU
#    (trainer/bench/pytorch_reference.py) with the same batch sizes.
step train-1-rank-batch-64 60 "$BIN" train --data-dir "$DATA" --model-dir "$work/model-64" \
    --checkpoint-dir "$work/ckpt-64" --hp backend=nccl --hp epochs=1 --hp batch-size=64 \
    --hp log-interval=1000000
metrics "$OUT/train-1-rank-batch-64.log"
step train-cpu-1-epoch 60 "$BIN" train --data-dir "$DATA" --model-dir "$work/model-cpu" \
    --checkpoint-dir "$work/ckpt-cpu" --hp epochs=1 --hp log-interval=1000000
metrics "$OUT/train-cpu-1-epoch.log"
if [[ -n "${PYTHON:-}" ]]; then
    for device in cuda cpu; do
        for batch in 32 64; do
            step "pytorch-$device-$batch" 40 "$PYTHON" "$HERE/../bench/pytorch_reference.py" \
                --data-dir "$DATA" --device $device --batch-size $batch --steps 1000 --threads "$(nproc)"
            sed 's/^/  /' "$OUT/pytorch-$device-$batch.log" | tail -1 | tee -a "$summary"
        done
    done
fi
kill $smi_pid 2>/dev/null
sort -n "$OUT/gpu-usage.csv" | tail -1 | sed 's/^/peak GPU memory used (MiB), utilisation (%): /' | tee -a "$summary"
