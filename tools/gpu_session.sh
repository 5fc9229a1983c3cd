#!/bin/bash
# tools/gpu_session.sh [OUTDIR]: what to run when a machine with one NVIDIA
# GPU is at hand, in one go, so that a short loan of a GPU gives every figure
# the issues ask for. Each step's output goes to OUTDIR (default $OUT, else
# build/gpu_session), and OUTDIR/summary.txt collects the lines that matter:
#   1. the GPU (nvidia-smi), nvcc and the driver
#   2. ./build.sh test: the whole suite, whose CUDA tests run on the GPU here
#      (tests/test_cuda.cu against the CPU backend, the NCCL transport on one
#      process and one GPU, the multi-GPU test where 2+ GPUs exist)
#   3. compute-sanitizer memcheck over build/test_cuda
#   4. the GPT-2 124M benchmark on the GPU: f32 and bf16 (B=16, T=1024), bf16
#      with --trace (where the time goes, by op), and PyTorch on the same
#      model beside it (tools/bench_torch_gpt2.py, bf16 eager and compiled)
#      when torch is installed
# Each step has its own time limit (STEP_LIMIT seconds, default 420 for the
# suite, 240 for the others) so a hang costs one step, not the loan.
# Usage on the device tool: run with command "tools/gpu_session.sh" (the
# default OUTDIR is $OUT there), about 10 minutes on an H100 with 16 cores.
set -u
cd "$(dirname "$0")/.." || exit 1
out=${1:-${OUT:-build/gpu_session}}
mkdir -p "$out" build || exit 1
sum="$out/summary.txt"
: >"$sum"
note() { echo "$*" | tee -a "$sum"; }
# step NAME LIMIT CMD...: run CMD with a time limit, its output to OUTDIR/NAME.log
step() {
    local name=$1 lim=$2 rc t0=$SECONDS; shift 2
    echo "== $name: $*"
    timeout -k 10 "$lim" "$@" >"$out/$name.log" 2>&1
    rc=$?
    note "$name: exit $rc in $((SECONDS - t0)) s$([ $rc = 124 ] && echo " (killed at the $lim s limit)")"
    return $rc
}

note "gpu_session $(date -u '+%Y-%m-%d %H:%M UTC') at $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (+ local changes)')"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    note "no NVIDIA GPU here (nvidia-smi fails): nothing to do"
    exit 1
fi
note "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed 's/^/GPU: /')"
note "nvcc: $(nvcc --version 2>/dev/null | tail -1)"

step suite "${STEP_LIMIT:-420}" ./build.sh test
grep -E "^(== |  (test_cuda|test_nccl)|cuda:|nccl)" "$out/suite.log" | tail -n 40 >>"$sum"
grep -E "[0-9]+ passed, [0-9]+ failed" "$out/suite.log" | tail -n 1 | sed 's/^/suite total: /' | tee -a "$sum"

if [ -x build/test_cuda ] && command -v compute-sanitizer >/dev/null 2>&1; then
    step memcheck 240 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3 build/test_cuda
    grep -E "ERROR SUMMARY|passed, [0-9]+ failed" "$out/memcheck.log" | tail -n 2 >>"$sum"
else
    note "memcheck: skipped (no build/test_cuda or no compute-sanitizer)"
fi

if [ -x build/gpt2_train ]; then
    for v in "f32:" "bf16:--bf16" "bf16_trace:--bf16 --trace $out/trace.json"; do
        n=${v%%:*}
        # shellcheck disable=SC2086
        step "bench_$n" 240 ./build/gpt2_train --bench --cuda --bench-steps 10 ${v#*:}
        grep -E "^bench: (median|GPT-2|memory)|MFU|^  " "$out/bench_$n.log" | head -n 16 | sed "s/^/[$n] /" >>"$sum"
    done
else
    note "bench: skipped (no build/gpt2_train)"
fi
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null && [ -f tools/bench_torch_gpt2.py ]; then
    for v in "eager:" "compile:--compile"; do
        # shellcheck disable=SC2086
        step "torch_${v%%:*}" 240 python3 tools/bench_torch_gpt2.py --batch 16 --dtype bf16 ${v#*:}
        tail -n 4 "$out/torch_${v%%:*}.log" | sed "s/^/[torch ${v%%:*}] /" >>"$sum"
    done
else
    note "torch: skipped (no PyTorch with CUDA, or no tools/bench_torch_gpt2.py)"
fi
echo
cat "$sum"
