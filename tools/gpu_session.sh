#!/bin/bash
# tools/gpu_session.sh [OUTDIR]: what to run when a machine with one NVIDIA
# GPU is at hand, so that a short loan of a GPU gives every figure the
# issues ask for. Each step's output goes to OUTDIR (default $OUT, else
# build/gpu_session), and OUTDIR/summary.txt collects the lines that matter.
# STEPS (environment) picks the steps, run in this order (default: all):
#   build     the CUDA build for this GPU only (GPU_ARCH, default sm_90):
#             build/tinyjax_cuda.o, build/test_cuda, build/gpt2_train --cuda
#   cuda      build/test_cuda on the GPU (every CUDA path against the CPU
#             backend) and --coverage; the summary keeps its closing line and
#             its FAIL lines
#   memcheck  compute-sanitizer memcheck over build/test_cuda
#   bench     GPT-2 124M on the GPU: f32 and bf16 (B=16, T=1024), bf16 with
#             --trace (where the time goes, by op); attention alone, forward
#             and backward at B=16 H=12 T=1024 D=64 bf16 causal: flash path,
#             path 1 and dot + causal_mask + softmax (test_cuda --bench-attention)
#   torch     PyTorch on the same model beside it (tools/bench_torch_gpt2.py,
#             bf16 eager and compiled), and its scaled_dot_product_attention
#             at the attention bench's size, when torch with CUDA is installed
#   nccl      the NCCL transport (-DTJ_NCCL) built and run on this GPU:
#             tests/test_nccl_boot.cu and tests/test_nccl.cu (one process, one
#             GPU; the suite reaches them last, often past the time limit)
#   demo      build/gpt2_train --cuda as a user runs it: the default training
#             (dropout, checkpoints, sampling) against the CPU, resume against
#             an uninterrupted run, and --remat offload, --accum 2, --bf16,
#             --devices 4 on one GPU
#   gpusuite  ./build.sh gpu-suite: the suite's test programs with every
#             context on this GPU (TJ_BACKEND=cuda); the summary keeps each
#             test's closing line
#   suite     ./build.sh test: the whole suite (its CUDA tests again, the NCCL
#             transport on one process and one GPU, 2+ GPU tests where they exist)
# cuda, memcheck and bench build what they need first when it is missing.
# Each step has its own time limit (STEP_LIMIT for the suite, default 560 s).
#
# On the device tool one command may run 10 minutes and $OUT brings back 8
# files, so run it as two calls, most important first (build/ stays on the
# machine between calls while it is warm; name OUTDIR outside $OUT and copy
# the logs you want into $OUT, as the 8-file limit drops the rest):
#   STEPS="build cuda memcheck nccl" tools/gpu_session.sh   (about 6 minutes on an H100)
#   STEPS="bench torch demo" tools/gpu_session.sh          (about 3 minutes)
#   STEPS=gpusuite tools/gpu_session.sh                    (the test programs on the GPU)
# The suite step does not fit one call: on 2026-11-24 `./build.sh test` on
# the H100 machine reached its CUDA section after 545 s and was stopped at
# the limit; the cuda and nccl steps run that section's GPU tests.
set -u
cd "$(dirname "$0")/.." || exit 1
out=${1:-${OUT:-build/gpu_session}}
steps=" ${STEPS:-build cuda memcheck bench torch suite} "
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
GPU_ARCH=${GPU_ARCH:-"-gencode arch=compute_90,code=sm_90"}
mkdir -p "$out" build/cuda || exit 1
sum="$out/summary.txt"
: >"$sum"
note() { echo "$*" | tee -a "$sum"; }
want() { case "$steps" in *" $1 "*) return 0 ;; esac; return 1; }
# step NAME LIMIT CMD...: run CMD with a time limit, its output to OUTDIR/NAME.log
step() {
    local name=$1 lim=$2 rc t0=$SECONDS; shift 2
    echo "== $name: $*"
    timeout -k 10 "$lim" "$@" >"$out/$name.log" 2>&1
    rc=$?
    note "$name: exit $rc in $((SECONDS - t0)) s$([ $rc = 124 ] && echo " (killed at the $lim s limit)")"
    return $rc
}
# the CUDA build (the flags of build.sh's test and build modes, one GPU arch)
# (a function run by `step` through bash -c, so exported with its variables;
# $GPU_ARCH is split into words on purpose)
# shellcheck disable=SC2086
build_cuda() {
    local lib ldrv rc=0
    "$NVCC" -std=c++17 -O3 $GPU_ARCH -Werror all-warnings -Xcompiler -Wall,-Wextra -I. -c tinyjax_cuda.cu -o build/tinyjax_cuda.o & lib=$!
    gcc -std=c99 -O3 -Wall -Wextra -Werror -I. -I"$(dirname "$NVCC")/../include" -DGPT2_CUDA -DTINYJAX_IMPLEMENTATION_DONE -c demos/gpt2_train.c \
        -o build/cuda/gpt2_train.o & ldrv=$!
    wait $lib || rc=1
    wait $ldrv || rc=1
    [ $rc = 0 ] && "$NVCC" -std=c++17 $GPU_ARCH -Werror all-warnings -I. tests/test_cuda.cu build/tinyjax_cuda.o -lcublas -o build/test_cuda &&
        "$NVCC" $GPU_ARCH -o build/gpt2_train build/cuda/gpt2_train.o build/tinyjax_cuda.o -lcublas -lm -lpthread
}
export -f build_cuda
export NVCC GPU_ARCH
need_build() { [ -x build/test_cuda ] && [ -x build/gpt2_train ] || step build 420 bash -c build_cuda; }

note "gpu_session $(date -u '+%Y-%m-%d %H:%M UTC') at $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (+ local changes)'); steps:$steps"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    note "no NVIDIA GPU here (nvidia-smi fails): nothing to do"
    exit 1
fi
note "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed 's/^/GPU: /')"
note "nvcc: $("$NVCC" --version 2>/dev/null | tail -1)"

if want build; then step build 420 bash -c build_cuda || tail -n 30 "$out/build.log" >>"$sum"; fi

if want cuda; then
    need_build
    step cuda 300 build/test_cuda
    # the closing line, what it skipped or set up ("cuda: ..."), and the failures
    grep -E "^(cuda:|[0-9]+ passed, [0-9]+ failed)" "$out/cuda.log" | tail -n 5 | sed 's/^/[test_cuda] /' >>"$sum"
    grep -E "^FAIL " "$out/cuda.log" | head -n 30 | sed 's/^/[test_cuda] /' >>"$sum"
    build/test_cuda --coverage >"$out/coverage.log" 2>&1
    note "[test_cuda --coverage] exit $? $(grep -E '^cuda coverage:' "$out/coverage.log")"
fi

if want memcheck; then
    need_build
    if [ -x build/test_cuda ] && command -v compute-sanitizer >/dev/null 2>&1; then
        step memcheck 300 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3 build/test_cuda
        grep -E "ERROR SUMMARY|[0-9]+ passed, [0-9]+ failed" "$out/memcheck.log" | tail -n 2 | sed 's/^/[memcheck] /' >>"$sum"
        # errors print as they happen: a run stopped at its limit has no ERROR SUMMARY
        note "[memcheck] $(grep -cE '^========= (Invalid|Program hit|Leaked|Race|Uninitialized)' "$out/memcheck.log") error lines; the first:"
        grep -E '^========= (Invalid|Program hit|Leaked|Race|Uninitialized)' -A3 "$out/memcheck.log" | head -n 12 >>"$sum"
    else
        note "memcheck: skipped (no build/test_cuda or no compute-sanitizer)"
    fi
fi

if want bench; then
    need_build
    if [ -x build/gpt2_train ]; then
        for v in "f32:" "bf16:--bf16" "bf16_trace:--bf16 --trace $out/trace.json"; do
            n=${v%%:*}
            # shellcheck disable=SC2086
            step "bench_$n" 240 ./build/gpt2_train --bench --cuda --bench-steps 10 ${v#*:}
            grep -E "^bench: (median|GPT-2|memory)|MFU|^  " "$out/bench_$n.log" | head -n 16 | sed "s/^/[$n] /" >>"$sum"
        done
        # the bf16 step's own lower bound on this card (tj_cost_print: the
        # bytes and flops of the CUDA program at the card's peak and
        # bandwidth), beside the measured step above
        step bench_cost 240 ./build/gpt2_train --bench --cuda --bf16 --cost card
        grep -E "^cost |^bench: --cost" "$out/bench_cost.log" | sed "s/^/[bf16 bound] /" >>"$sum"
        # the small fused groups one element at a time (as before 2026-11-24's
        # session 21), to compare: written without a GPU, first timed here
        step bench_bf16_fsmall0 240 env TJ_CUDA_FUSED_SMALL=0 ./build/gpt2_train --bench --cuda --bench-steps 10 --bf16
        grep -E "^bench: median|MFU" "$out/bench_bf16_fsmall0.log" | head -n 4 | sed "s/^/[bf16, TJ_CUDA_FUSED_SMALL=0] /" >>"$sum"
    else
        note "bench: skipped (build/gpt2_train did not build: see build.log)"
    fi
    if [ -x build/test_cuda ]; then
        step bench_attention 240 build/test_cuda --bench-attention
        grep -E "^attention bench" "$out/bench_attention.log" | sed "s/^/[attention] /" >>"$sum"
    fi
fi

if want torch; then
    if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null && [ -f tools/bench_torch_gpt2.py ]; then
        for v in "eager:" "compile:--compile"; do
            # shellcheck disable=SC2086
            step "torch_${v%%:*}" 240 python3 tools/bench_torch_gpt2.py --batch 16 --dtype bf16 ${v#*:}
            tail -n 4 "$out/torch_${v%%:*}.log" | sed "s/^/[torch ${v%%:*}] /" >>"$sum"
        done
        # attention alone, as test_cuda --bench-attention times it: fwd + bwd (the gradients of sum(out w))
        step torch_sdpa 120 python3 - <<'PY'
import time, torch, torch.nn.functional as F
B, H, T, D = 16, 12, 1024, 64
q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
w = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)
ms = []
for r in range(8):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), w)
    torch.cuda.synchronize()
    if r: ms.append((time.perf_counter() - t0) * 1e3)  # the first run warms up
ms.sort()
print(f"attention bench: B=16 H=12 T=1024 D=64 bf16 causal, fwd+bwd: torch scaled_dot_product_attention: median {ms[3]:.2f} ms (min {ms[0]:.2f}, max {ms[6]:.2f}, 7 runs)")
PY
        grep -E "^attention bench" "$out/torch_sdpa.log" | sed "s/^/[torch] /" >>"$sum"
    else
        note "torch: skipped (no PyTorch with CUDA, or no tools/bench_torch_gpt2.py)"
    fi
fi

if want nccl; then
    step nccl_build 300 bash -c '"$NVCC" -std=c++17 -O2 $GPU_ARCH -DTJ_NCCL -Werror all-warnings -I. -c tinyjax_cuda.cu -o build/tinyjax_cuda_nccl.o &&
        "$NVCC" -std=c++17 $GPU_ARCH -Werror all-warnings -I. tests/test_nccl_boot.cu build/tinyjax_cuda_nccl.o -lcublas -lnccl -o build/test_nccl_boot &&
        "$NVCC" -std=c++17 $GPU_ARCH -Werror all-warnings -I. tests/test_nccl.cu build/tinyjax_cuda_nccl.o -lcublas -lnccl -o build/test_nccl'
    for t in test_nccl_boot test_nccl; do
        [ -x build/$t ] && step $t 120 build/$t && true
        grep -E "^(nccl|cuda|skip)|[0-9]+ passed, [0-9]+ failed|^FAIL" "$out/$t.log" | head -n 12 | sed "s/^/[$t] /" >>"$sum"
    done
fi

if want demo; then
    need_build
    d=$(mktemp -d)
    # last "step N ... loss X" lines and the eval/sample lines of each run
    keep() { grep -E "^(step|trained|resum|error|tinyjax)" "$out/$1.log" | tail -n "${2:-4}" | sed "s/^/[$1] /" >>"$sum"; }
    step demo_cpu 300 ./build/gpt2_train --steps 20 --eval-every 10 --dropout 0.1 --devices 1 && keep demo_cpu 6
    step demo_cuda 300 ./build/gpt2_train --cuda --steps 20 --eval-every 10 --dropout 0.1 --save "$d/ck" --save-every 10 --sample 40 && keep demo_cuda 8
    ls "$d" | tr '\n' ' ' >>"$sum"; echo >>"$sum"
    rm -f "$d/ck" "$d"/ck.step*20 # as if killed after step 10: resume must give demo_cuda's steps 11-20
    step demo_resume 300 ./build/gpt2_train --cuda --steps 20 --eval-every 10 --dropout 0.1 --resume "$d/ck" && keep demo_resume 6
    for v in "offload:--remat offload" "accum2:--accum 2" "bf16:--bf16"; do
        # shellcheck disable=SC2086
        step "demo_${v%%:*}" 200 ./build/gpt2_train --cuda --steps 6 --eval-every 3 ${v#*:} && true
        keep "demo_${v%%:*}" 3
    done
    step demo_dev4 200 ./build/gpt2_train --cuda --steps 6 --eval-every 3 --mesh "data=2 model=2" && true
    keep demo_dev4 3
    rm -rf "$d"
fi

if want gpusuite; then
    step gpusuite "${STEP_LIMIT:-560}" env CUDA_ARCH="$GPU_ARCH" ./build.sh gpu-suite
    grep -E '^  \[gpu/[a-z0-9_]+\] [0-9]+ passed|no closing|exit code|not built|failed to link' "$out/gpusuite.log" | head -n 60 >>"$sum"
    grep -E "^total: " "$out/gpusuite.log" | tail -n 1 | sed 's/^/gpusuite /' | tee -a "$sum"
fi

if want suite; then
    # the GPU machine reaches no package mirror: no apt-get for OpenMPI (its MPI tests then say why they skip)
    step suite "${STEP_LIMIT:-560}" env TJ_NO_APT=1 ./build.sh test
    # build.sh prints each test's lines as "  [name] ...": the CUDA and NCCL
    # tests' closing lines, skips and failures, then the section heads
    grep -E '^  \[(devsim/|mpi/)?(test_cuda|test_nccl)[a-z0-9_]*\] ([0-9]+ passed|cuda:|nccl|.*skip|no closing|exit code)' "$out/suite.log" | head -n 60 >>"$sum"
    grep -E '^  \[[^]]*\] FAIL' "$out/suite.log" | head -n 20 | sed 's/^/[suite failure] /' >>"$sum"
    grep -E "^total: [0-9]+ passed, [0-9]+ failed" "$out/suite.log" | tail -n 1 | sed 's/^/suite /' | tee -a "$sum"
fi
echo
cat "$sum"
